"""SE-ResNeXt-50 (32x4d) backbone written in Keras.

Mirrors the layout of Cadene's ``pretrainedmodels.se_resnext50_32x4d`` (the one timm and the
Kaggle kernels of 2019 used), so that PyTorch weights could be ported one tensor at a time:

* stem: 7x7/2 conv 64 (no bias), BN, ReLU, 3x3/2 max pool, in one of two layouts (``stem``):
  ``"cadene"`` (Cadene's and timm's ``legacy_seresnext50_32x4d``: ``MaxPool2d(3, 2,
  ceil_mode=True)``) or ``"timm"`` (timm's ``seresnext50_32x4d``: ``MaxPool2d(3, 2,
  padding=1)``). Both are written as explicit zero padding + valid pooling, exact because the
  pool follows a ReLU (values >= 0); the two differ in where the windows start, so converted
  weights must be used with the stem they were trained with (:mod:`whale.models.convert`
  records it in the weights file);
* 4 stages of bottleneck blocks, ``(3, 4, 6, 3)`` blocks, ``planes = 64, 128, 256, 512``,
  grouped width ``planes * 2`` (32 groups x 4 channels scaled), output ``planes * 4``;
* block: 1x1 conv -> BN -> ReLU -> 3x3 grouped conv (32 groups, stride on this conv) -> BN
  -> ReLU -> 1x1 conv -> BN -> squeeze-and-excitation (global average, 1x1 conv to
  ``out/16`` with bias, ReLU, 1x1 conv back with bias, sigmoid, scale) -> add shortcut -> ReLU;
  the first block of each stage has a 1x1 strided conv + BN shortcut;
* BatchNorm ``epsilon=1e-5`` and momentum 0.9 as in PyTorch; explicit zero padding so the
  spatial arithmetic equals PyTorch's for every input size.

Parameter count: the published ``se_resnext50_32x4d`` has 27,559,896 parameters including
its 1000-way classifier (2048 * 1000 + 1000 = 2,049,000), i.e. 25,510,896 without it. PyTorch
counts BN gamma/beta only; Keras also counts the BN moving mean/variance as (non-trainable)
parameters, so the Keras *trainable* count is what equals the published figure.
"""
from __future__ import annotations

import keras
from keras import layers

PUBLISHED_PARAMS_NO_FC = 27_559_896 - (2048 * 1000 + 1000)  # 25,510,896
_BN = {"epsilon": 1e-5, "momentum": 0.9}


def _se(x, channels: int, reduction: int, name: str):
    s = layers.GlobalAveragePooling2D(keepdims=True, name=f"{name}_se_pool")(x)
    s = layers.Conv2D(channels // reduction, 1, activation="relu", name=f"{name}_se_fc1")(s)
    s = layers.Conv2D(channels, 1, activation="sigmoid", name=f"{name}_se_fc2")(s)
    return layers.Multiply(name=f"{name}_se_scale")([x, s])


def _block(x, planes: int, stride: int, downsample: bool, name: str, groups=32, reduction=16):
    width = planes * 4 // 64 * groups  # base width 4 per group
    out = planes * 4
    y = layers.Conv2D(width, 1, use_bias=False, name=f"{name}_conv1")(x)
    y = layers.BatchNormalization(**_BN, name=f"{name}_bn1")(y)
    y = layers.ReLU(name=f"{name}_relu1")(y)
    y = layers.ZeroPadding2D(1, name=f"{name}_pad2")(y)
    y = layers.Conv2D(width, 3, strides=stride, groups=groups, use_bias=False,
                      name=f"{name}_conv2")(y)
    y = layers.BatchNormalization(**_BN, name=f"{name}_bn2")(y)
    y = layers.ReLU(name=f"{name}_relu2")(y)
    y = layers.Conv2D(out, 1, use_bias=False, name=f"{name}_conv3")(y)
    y = layers.BatchNormalization(**_BN, name=f"{name}_bn3")(y)
    y = _se(y, out, reduction, name)
    shortcut = x
    if downsample:
        shortcut = layers.Conv2D(out, 1, strides=stride, use_bias=False,
                                 name=f"{name}_down_conv")(x)
        shortcut = layers.BatchNormalization(**_BN, name=f"{name}_down_bn")(shortcut)
    y = layers.Add(name=f"{name}_add")([y, shortcut])
    return layers.ReLU(name=f"{name}_out")(y)


STEMS = ("cadene", "timm")
"""Stem max-pool layouts (see the module docstring); ``"cadene"`` is the default."""


def seresnext50(input_shape, weights=None, stem: str = "cadene") -> keras.Model:
    """SE-ResNeXt-50 32x4d feature extractor: ``[b, S, S, C] -> [b, S/32, S/32, 2048]``.

    ``weights`` must be ``None`` (Keras has no ImageNet weights for it: convert a PyTorch
    checkpoint with ``python -m whale.models.convert``). ``stem`` is one of :data:`STEMS`.
    """
    if weights is not None:
        raise ValueError(f"seresnext50 builds with weights=None only, got {weights!r}")
    if stem not in STEMS:
        raise ValueError(f"seresnext50 stem must be one of {STEMS}, got {stem!r}")
    inp = keras.Input(tuple(input_shape), name="backbone_input")
    x = layers.ZeroPadding2D(3, name="stem_pad")(inp)
    x = layers.Conv2D(64, 7, strides=2, use_bias=False, name="stem_conv")(x)
    x = layers.BatchNormalization(**_BN, name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    x = layers.ZeroPadding2D(_stem_pool_padding(stem, x.shape[1]), name="stem_pool_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="stem_pool")(x)
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 1) else 1
            x = _block(x, planes, stride, downsample=(b == 0), name=f"stage{stage}_block{b + 1}")
    return keras.Model(inp, x, name="backbone")


def _stem_pool_padding(stem: str, size) -> tuple:
    """Zero padding ``((top, bottom), (left, right))`` before the valid 3x3/2 stem pool.

    timm pads 1 on every side. Cadene's ceil mode adds one row/column at the end when the
    side ``size`` is even (the last window would hang over), none when it is odd.
    """
    if stem == "timm":
        return ((1, 1), (1, 1))
    end = 1 if size is None or int(size) % 2 == 0 else 0
    return ((0, end), (0, end))
