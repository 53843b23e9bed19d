"""The layers an embedding objective puts on the branch, saved with the model (``.keras``, safe mode).

- :class:`Embedding` (layer name ``"embedding"``): branch features ``[b, d]`` -> embedding ``[b, E]``,
  a linear ``Dense(E)`` (seed 002: *not* L2-normalised unless ``normalize``). Its ``score`` says how two
  embeddings are scored (:mod:`whale.objectives.scorer`): ``"cauchy"`` = ``1 / (1 + ||a - b||^2)``,
  ``"cosine"`` = ``(1 + cos(a, b)) / 2`` (unit-norm embeddings). Both lie in [0, 1], higher = more alike.
- :class:`PairDistance` (``"distance"``): ``[a, b]`` -> ``||a - b||^2`` ``[b, 1]``, the output a pair
  objective's loss reads (contrastive).
- :class:`SubCenterArcFace` (``"arcface"``): unit embedding ``[b, E]`` -> ``[b, n_ids]`` cosine to each
  identity's nearest of its ``k`` sub-centres; the margin and scale are the loss's
  (:class:`whale.objectives.objective.ArcFaceLoss`), so the layer needs no labels.

All three compute in float32 whatever the model's dtype policy (like the paper's head), so every loss
and score is float32 under mixed precision too.
"""
from __future__ import annotations

import keras
from keras import ops

from whale.objectives.distances import l2_normalize, pair_sq_distances

SCORES = ("cauchy", "cosine")


@keras.saving.register_keras_serializable(package="whale")
class Embedding(keras.layers.Layer):
    """``[b, d]`` float -> ``[b, dim]`` float32: ``x W + c``, unit-normalised when ``normalize``."""

    def __init__(self, dim: int, normalize: bool = False, score: str = "cauchy", **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"Embedding: score must be one of {', '.join(SCORES)}, received {score!r}")
        self.dim, self.normalize, self.score = int(dim), bool(normalize), score
        self.dense = keras.layers.Dense(self.dim, dtype="float32", name="projection")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x):
        e = self.dense(ops.cast(x, "float32"))
        return l2_normalize(e) if self.normalize else e

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.dim)

    def get_config(self):
        return {**super().get_config(), "dim": self.dim, "normalize": self.normalize, "score": self.score}


@keras.saving.register_keras_serializable(package="whale")
class PairDistance(keras.layers.Layer):
    """``([b, E], [b, E]) -> [b, 1]`` float32 squared Euclidean distance."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)

    def call(self, inputs):
        a, b = inputs
        return pair_sq_distances(a, b, keepdims=True)

    def compute_output_shape(self, input_shape):
        return (input_shape[0][0], 1)


@keras.saving.register_keras_serializable(package="whale")
class SubCenterArcFace(keras.layers.Layer):
    """``[b, E]`` -> ``[b, n_ids]`` float32: ``max_k cos(e, w_{j,k})`` over ``subcenters`` centres per id."""

    def __init__(self, n_ids: int, subcenters: int = 3, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.n_ids, self.subcenters = int(n_ids), int(subcenters)

    def build(self, input_shape):
        self.centers = self.add_weight(shape=(self.n_ids, self.subcenters, int(input_shape[-1])),
                                       initializer="glorot_uniform", name="centers")

    def call(self, e):
        e = l2_normalize(ops.cast(e, "float32"))
        w = l2_normalize(self.centers)
        cos = ops.einsum("be,nke->bnk", e, w)
        return ops.max(cos, axis=-1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.n_ids)

    def get_config(self):
        return {**super().get_config(), "n_ids": self.n_ids, "subcenters": self.subcenters}
