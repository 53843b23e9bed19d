"""A learned local descriptor for the keypoint matcher: seed 000's homography equivalence trained with seed 001's loss.

The matcher's keypoints stay SIFT's (same detector, same positions); only the 128 numbers describing each one
change: a small ConvNet reads the keypoint's 32 x 32 patch (:mod:`whale.keypoints.patches`) and returns a
non-negative unit vector, as RootSIFT is (softplus, L1-normalised, square-rooted), so the store, the index and
LNBNN's distances treat it like RootSIFT (``features.descriptor: FOLDER`` in ``configs/keypoints.yaml``).

Training is self-supervised, no identity labels: a photo and its warp by a random homography show the same
points (seed 000's equivalence, on real photos), so a keypoint's two patches are one class and every other
keypoint in the batch another; a batch of P pairs is a P x 2 batch of seed 001's TGLoss (the global loss plus
the ratio triplet, section 5.2's constants) or its global loss alone, on the patches standardised one by one.

A trained descriptor is a folder: ``descriptor.json`` (architecture and how it was trained) and
``descriptor.weights.h5``, written by :mod:`whale.keypoints.learn` (``python -m whale.keypoints.learn``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.keypoints.patches import PATCH_SIZE

LOSSES = ("tgloss", "global")
"""Seed 001's objectives a descriptor is trained with (:mod:`whale.objectives.globalloss`)."""
SPEC = "descriptor.json"
WEIGHTS = "descriptor.weights.h5"


def standardise(patch_batch: np.ndarray) -> np.ndarray:
    """``[n, s, s] uint8`` -> ``[n, s, s, 1] float32``, each patch at mean 0 and standard deviation 1 (L2-Net's
    input normalisation: the descriptor ignores a patch's brightness and contrast)."""
    x = patch_batch.astype(np.float32)
    x -= x.mean(axis=(1, 2), keepdims=True)
    x /= np.maximum(x.std(axis=(1, 2), keepdims=True), 1.0)
    return x[..., None]


def build_net(width: int = 16, dim: int = 128, size: int = PATCH_SIZE):
    """The descriptor ConvNet: three stages of two 3 x 3 convolutions (``width``, 2x, 4x channels; BatchNorm,
    ReLU; the first of each stride 2: 32 -> 16 -> 8 -> 4 pixels, about 2 M multiply-adds a patch at width 16,
    so a CPU describes a photo's 1,000 keypoints in a fraction of a second), a dense layer to ``dim``, then
    softplus, L1 normalisation and a square root: a non-negative unit vector whose Euclidean distances behave
    as RootSIFT's."""
    import keras
    from keras import layers, ops

    class RootNormalise(layers.Layer):
        def call(self, x):
            x = ops.softplus(x)
            return ops.sqrt(x / ops.sum(x, axis=-1, keepdims=True) + 1e-12)

    inputs = keras.Input((size, size, 1))
    x = inputs
    for stage in range(3):
        for stride in (2, 1):
            x = layers.Conv2D(width * 2 ** stage, 3, strides=stride, padding="same", use_bias=False)(x)
            x = layers.BatchNormalization()(x)
            x = layers.ReLU()(x)
    x = layers.Flatten()(x)
    x = layers.Dense(dim)(x)
    return keras.Model(inputs, RootNormalise()(x), name="local_descriptor")


class LearnedDescriptor:
    """A trained descriptor folder, ready to describe patches (loaded once per process: :func:`load`)."""

    def __init__(self, folder):
        folder = Path(folder)
        spec_path, weights = folder / SPEC, folder / WEIGHTS
        if not spec_path.is_file() or not weights.is_file():
            raise DataError(f"{folder}: not a trained descriptor (expected {SPEC} and {WEIGHTS}; "
                            "train one with `python -m whale.keypoints.learn`)")
        try:
            self.spec = json.loads(spec_path.read_text())
        except ValueError as e:
            raise DataError(f"{spec_path}: not valid JSON ({e})") from None
        self.net = build_net(self.spec["width"], self.spec["dim"], self.spec["size"])
        self.net.load_weights(weights)
        self.size = int(self.spec["size"])

    def __call__(self, patch_batch: np.ndarray, batch: int = 1024) -> np.ndarray:
        """``[n, s, s] uint8`` patches -> ``[n, dim] float32`` descriptors."""
        if not len(patch_batch):
            return np.zeros((0, self.spec["dim"]), np.float32)
        x = standardise(patch_batch)
        return np.concatenate([np.asarray(self.net(x[i:i + batch], training=False))
                               for i in range(0, len(x), batch)]).astype(np.float32)


_LOADED: dict[str, LearnedDescriptor] = {}


def load(folder) -> LearnedDescriptor:
    """The descriptor of ``folder``, loaded once per process."""
    key = str(Path(folder).resolve())
    if key not in _LOADED:
        _LOADED[key] = LearnedDescriptor(folder)
    return _LOADED[key]
