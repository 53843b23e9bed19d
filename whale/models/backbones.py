"""keras.applications backbones (no top, no pooling) used as siamese branches.

Each function returns a functional ``keras.Model`` named ``"backbone"`` mapping an already
preprocessed ``float32 [batch, S, S, C]`` tensor to the last feature map
``[batch, s, s, d]``; pooling is added by :func:`whale.models.build_branch`.

``weights`` is ``None`` or ``"imagenet"`` (a download through keras.applications; it needs
3 channels - 1-channel ImageNet branches are made by :func:`whale.models.adapt_first_conv`).
"""
from __future__ import annotations

import keras


def densenet121(input_shape, weights=None) -> keras.Model:
    """DenseNet121 without top: 1024 feature maps, 7,037,504 parameters at 3 channels."""
    return keras.applications.DenseNet121(
        include_top=False, weights=weights, input_shape=tuple(input_shape), name="backbone"
    )


def resnet50(input_shape, weights=None) -> keras.Model:
    """ResNet50 (v1, caffe preprocessing) without top: 2048 maps, 23,587,712 parameters."""
    return keras.applications.ResNet50(
        include_top=False, weights=weights, input_shape=tuple(input_shape), name="backbone"
    )


def inceptionv3(input_shape, weights=None) -> keras.Model:
    """InceptionV3 without top: 2048 maps, 21,802,784 parameters; needs S >= 75."""
    return keras.applications.InceptionV3(
        include_top=False, weights=weights, input_shape=tuple(input_shape), name="backbone"
    )
