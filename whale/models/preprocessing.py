"""Backbone preprocessing as a layer inside the branch: raw 0..255 pixels -> backbone input.

Callers always feed ``float32 [batch, S, S, C]`` raw pixel values (C = 1 or 3, RGB order);
each branch starts with a :class:`Preprocess` layer that converts them to what its backbone
was trained on. Keeping this in the model means a saved model carries its own preprocessing
and scoring code never has to know which backbone it is running.
"""
from __future__ import annotations

import keras
from keras import ops

# ImageNet statistics (RGB order) used by torchvision-style models (Keras' DenseNet).
_TORCH_MEAN = (0.485, 0.456, 0.406)
_TORCH_STD = (0.229, 0.224, 0.225)
# Caffe-style ResNet50: BGR channel order, mean subtraction only (BGR order).
_CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)

MODES = ("torch", "caffe", "tf", "standardize", "lite")


@keras.saving.register_keras_serializable(package="whale")
class Preprocess(keras.layers.Layer):
    """Map raw pixels ``0..255`` to a backbone's expected input; output shape = input shape.

    Modes:

    * ``"torch"`` (DenseNet121): ``(x / 255 - mean_c) / std_c`` with ImageNet RGB statistics.
    * ``"caffe"`` (ResNet50): RGB -> BGR, then subtract the ImageNet BGR means.
    * ``"tf"`` (InceptionV3): ``x / 127.5 - 1`` -> ``[-1, 1]``.
    * ``"lite"`` (EfficientNet-Lite): ``(x - 127) / 128``, the TensorFlow checkpoints' own.
    * ``"standardize"`` (custom ConvNets, tiny): per image, subtract the mean and divide by the
      standard deviation over all pixels and channels, as the reference Kaggle kernel does
      (``img -= mean(img); img /= std(img) + K.epsilon()``).

    With a 1-channel (gray) input, ``torch`` and ``caffe`` use the average of the three channel
    statistics (the BGR flip is a no-op); ``tf``, ``lite`` and ``standardize`` treat channels alike anyway.

    Args:
        mode: one of :data:`MODES`.
        branch: name of the registry entry this layer belongs to; stored in the config so
            that :func:`whale.models.branch_spec` can rebuild the branch from a loaded model.
        options: the branch's build options (``{"stem": "timm"}``), stored for the same reason.
    """

    def __init__(self, mode: str, branch: str = "", options: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(f"Preprocess mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.branch = branch
        self.options = dict(options or {})

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        channels = x.shape[-1]
        if self.mode == "tf":
            return x / 127.5 - 1.0
        if self.mode == "lite":
            return (x - 127.0) / 128.0
        if self.mode == "standardize":
            mean = ops.mean(x, axis=(1, 2, 3), keepdims=True)
            std = ops.std(x, axis=(1, 2, 3), keepdims=True)
            return (x - mean) / (std + 1e-7)
        if self.mode == "torch":
            mean, std = _TORCH_MEAN, _TORCH_STD
            if channels == 1:
                mean, std = (sum(mean) / 3,), (sum(std) / 3,)
            mean = ops.convert_to_tensor(mean, "float32")
            std = ops.convert_to_tensor(std, "float32")
            return (x / 255.0 - mean) / std
        # caffe
        if channels == 1:
            return x - sum(_CAFFE_MEAN_BGR) / 3
        x = ops.flip(x, axis=-1)  # RGB -> BGR
        return x - ops.convert_to_tensor(_CAFFE_MEAN_BGR, "float32")

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "branch": self.branch, "options": dict(self.options)})
        return config
