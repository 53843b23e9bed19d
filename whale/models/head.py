"""The head (H-model): a symmetric learned similarity of two feature vectors.

For features ``x, y`` in R^d (Piotte's kernel, restated in the paper's reference code):
``[x*y, x+y, |x-y|, (x-y)^2]`` stacked to ``(4, d, 1)`` -> Conv2D(mid, (4, 1), ReLU) ->
``(1, d, mid)`` -> Reshape ``(d, mid, 1)`` -> Conv2D(1, (1, mid), linear) -> Flatten ``(d,)``
-> optional hidden Dense(ReLU) layers -> Dense(1, sigmoid). The two convolutions are one
small network shared across the ``d`` feature positions; the last Dense is a weighted sum.
All four pair features are symmetric, so ``head(x, y) == head(y, x)`` exactly.

Parameters with ``hidden=0``: ``(4*mid + mid) + (mid + 1) + (d + 1)``.
"""
from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import layers, ops


@keras.saving.register_keras_serializable(package="whale")
class PairFeatures(keras.layers.Layer):
    """``(x [b, d], y [b, d]) -> [b, 4, d, 1]``: ``x*y, x+y, |x-y|, (x-y)^2`` stacked."""

    def call(self, inputs):
        x, y = inputs
        diff = ops.abs(x - y)
        stacked = ops.stack([x * y, x + y, diff, ops.square(diff)], axis=1)
        return ops.expand_dims(stacked, -1)

    def compute_output_shape(self, input_shape):
        batch, d = input_shape[0]
        return (batch, 4, d, 1)


def build_head(feature_dim: int, mid: int = 32, hidden: int | Sequence[int] = 0) -> keras.Model:
    """Head model ``([b, d], [b, d]) float32 -> [b, 1]`` float32 probability of "same whale".

    Args:
        feature_dim: ``d``.
        mid: width of the per-feature network (the reference uses 32).
        hidden: extra Dense(ReLU) layers before the output: ``0`` none, an int ``n > 0`` one
            layer of ``n`` units, or a sequence of widths.
    """
    d, mid = int(feature_dim), int(mid)
    if d < 1 or mid < 1:
        raise ValueError(f"build_head: feature_dim and mid must be >= 1, got {d}, {mid}")
    widths = _hidden_widths(hidden)
    xa = keras.Input((d,), name="feat_a")
    xb = keras.Input((d,), name="feat_b")
    x = PairFeatures(name="pair_features")([xa, xb])
    x = layers.Conv2D(mid, (4, 1), activation="relu", padding="valid", name="per_feature")(x)
    x = layers.Reshape((d, mid, 1), name="reshape")(x)
    x = layers.Conv2D(1, (1, mid), activation="linear", padding="valid", name="per_feature_out")(x)
    x = layers.Flatten(name="flatten")(x)
    for i, w in enumerate(widths):
        x = layers.Dense(w, activation="relu", name=f"hidden_{i}")(x)
    # float32 under any mixed-precision policy: probabilities, the loss and scores stay float32.
    out = layers.Dense(1, activation="sigmoid", name="weighted_average", dtype="float32")(x)
    return keras.Model([xa, xb], out, name="head")


def head_param_count(feature_dim: int, mid: int = 32, hidden: int | Sequence[int] = 0) -> int:
    """Number of parameters :func:`build_head` creates (for checks and documentation)."""
    widths = _hidden_widths(hidden)
    n = (4 * mid + mid) + (mid + 1)
    prev = feature_dim
    for w in widths:
        n += prev * w + w
        prev = w
    return n + prev + 1


def _hidden_widths(hidden) -> list[int]:
    if isinstance(hidden, Sequence):
        widths = [int(w) for w in hidden]
    else:
        widths = [int(hidden)] if int(hidden) > 0 else []
    if any(w < 1 for w in widths) or (not isinstance(hidden, Sequence) and int(hidden) < 0):
        raise ValueError(f"build_head: hidden widths must be >= 1, got {hidden!r}")
    return widths
