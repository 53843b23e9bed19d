"""Custom ConvNet backbones trained from scratch, and the ``tiny`` test backbone.

``convnet_v1`` follows the branch model of Martin Piotte's Kaggle kernel "Whale Recognition
Model with score 0.78563" (the reference the paper extends); for an ``S x S`` input:

* block 1: Conv2D(64, 9x9, stride 2, ReLU) + MaxPool 2x2            -> S/4  x S/4  x 64
* block 2: 2 x [BN, Conv2D(64, 3x3, ReLU)]                          -> S/4  x S/4  x 64
* MaxPool, block 3: BN, Conv2D(128, 1x1, ReLU), 4 subblocks(64)      -> S/8  x S/8  x 128
* MaxPool, block 4: BN, Conv2D(256, 1x1, ReLU), 4 subblocks(64)      -> S/16 x S/16 x 256
* MaxPool, block 5: BN, Conv2D(384, 1x1, ReLU), 4 subblocks(96)      -> S/32 x S/32 x 384
* MaxPool, block 6: BN, Conv2D(512, 1x1, ReLU), 4 subblocks(128)     -> S/64 x S/64 x 512
* (global max pooling, added by the branch builder -> 512 features)

A subblock is the kernel's bottleneck residual unit: ``x = BN(x)``; ``y = Conv1x1(f, ReLU)``,
``BN``, ``Conv3x3(f, ReLU)``, ``BN``, ``Conv1x1(c)`` (linear, back to the input width ``c``);
``relu(x + y)``. All convolutions use ``padding="same"``. The kernel normalised every image to
zero mean and unit variance (the branch's ``"standardize"`` preprocessing) and used an L2
kernel regulariser, which :func:`whale.models.compile_siamese` applies at compile time.

``convnet_v2`` (the paper's "Customized ConvNet v2") is the same network with a
squeeze-and-excitation unit (global average -> Dense(c/16, ReLU) -> Dense(c, sigmoid) ->
channel scale) on the residual branch of every subblock, before the addition, as in
SE-ResNet.
"""
from __future__ import annotations

import keras
from keras import layers

_SE_REDUCTION = 16
LAST_BN = "last_bn"
"""Name of each backbone's last BatchNormalization layer (the heatmaps' layer, see the registry)."""


def _subblock(x, filters: int, se: bool, last_bn: str | None = None):
    channels = x.shape[-1]
    x = layers.BatchNormalization()(x)
    y = layers.Conv2D(filters, 1, activation="relu", padding="same")(x)
    y = layers.BatchNormalization()(y)
    y = layers.Conv2D(filters, 3, activation="relu", padding="same")(y)
    y = layers.BatchNormalization(name=last_bn)(y)
    y = layers.Conv2D(channels, 1, padding="same")(y)
    if se:
        s = layers.GlobalAveragePooling2D(keepdims=True)(y)
        s = layers.Dense(channels // _SE_REDUCTION, activation="relu")(s)
        s = layers.Dense(channels, activation="sigmoid")(s)
        y = layers.Multiply()([y, s])
    y = layers.Add()([x, y])
    return layers.Activation("relu")(y)


def _convnet(input_shape, se: bool) -> keras.Model:
    inp = keras.Input(tuple(input_shape), name="backbone_input")
    x = layers.Conv2D(64, 9, strides=2, activation="relu", padding="same")(inp)
    x = layers.MaxPooling2D(2)(x)
    for _ in range(2):
        x = layers.BatchNormalization()(x)
        x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
    for width, filters in ((128, 64), (256, 64), (384, 96), (512, 128)):
        x = layers.MaxPooling2D(2)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Conv2D(width, 1, activation="relu", padding="same")(x)
        for i in range(4):
            x = _subblock(x, filters, se, LAST_BN if (width, i) == (512, 3) else None)
    return keras.Model(inp, x, name="backbone")


def convnet_v1(input_shape, weights=None) -> keras.Model:
    """Piotte's branch ConvNet: ``[b, S, S, C] -> [b, S/64, S/64, 512]`` (see module doc)."""
    _no_weights("convnet_v1", weights)
    return _convnet(input_shape, se=False)


def convnet_v2(input_shape, weights=None) -> keras.Model:
    """``convnet_v1`` with squeeze-and-excitation in every subblock; 512 feature maps."""
    _no_weights("convnet_v2", weights)
    return _convnet(input_shape, se=True)


def tiny(input_shape, weights=None) -> keras.Model:
    """A ~7k-parameter backbone for tests and the CPU demo: ``[b, S, S, C] -> [b, s, s, 32]``.

    Three 3x3 stride-2 convolutions (8, 16, 32 maps, ReLU, each followed by BN) and a final
    1x1 convolution to 32 maps.
    """
    _no_weights("tiny", weights)
    inp = keras.Input(tuple(input_shape), name="backbone_input")
    x = inp
    for filters in (8, 16, 32):
        x = layers.Conv2D(filters, 3, strides=2, activation="relu", padding="same")(x)
        x = layers.BatchNormalization(name=LAST_BN if filters == 32 else None)(x)
    x = layers.Conv2D(32, 1, activation="relu")(x)
    return keras.Model(inp, x, name="backbone")


def _no_weights(name, weights):
    if weights is not None:
        raise ValueError(f"{name} builds with weights=None only, got {weights!r}")


SMALL_STEMS = ("conv", "pool")
"""``small``'s stems (the registry's ``stem`` option, ``model.stem`` in a config)."""


def small(input_shape, weights=None, stem: str = "conv") -> keras.Model:
    """A ~0.2M-parameter ConvNet for CPU demos and benchmarks at 48-128 px.

    ``[b, S, S, C] -> [b, S/32, S/32, 128]``: a 5x5 stride-2 stem (24 maps), then four stages
    of two 3x3 convolutions (32, 48, 64, 128 maps; ReLU, BN) each followed by 2x2 max pooling.
    The same shape as the reference ConvNet (strided stem, conv stages, max pooling), sized
    so that a fold of the synthetic demo trains in minutes on two CPU cores.

    ``stem="pool"`` adds a 2x2 max pooling after the stem, as the reference ConvNet's first
    block does (``[b, S, S, C] -> [b, S/64, S/64, 128]``, same weights): the stages then see a
    quarter of the pixels: on 2 CPU cores at 64 px the train step ran 2.0x and the whole
    training 1.9x as fast (``benchmarks/speed/bench_train.py --branches small --stems conv,pool``, README).
    """
    _no_weights("small", weights)
    if stem not in SMALL_STEMS:
        raise ValueError(f"small stem must be one of {SMALL_STEMS}, got {stem!r}")
    inp = keras.Input(tuple(input_shape), name="backbone_input")
    x = layers.Conv2D(24, 5, strides=2, padding="same", activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    if stem == "pool":
        x = layers.MaxPooling2D(2, padding="same")(x)
    for filters in (32, 48, 64, 128):
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = layers.BatchNormalization(name=LAST_BN if filters == 128 else None)(x)
        x = layers.MaxPooling2D(2, padding="same")(x)
    return keras.Model(inp, x, name="backbone")
