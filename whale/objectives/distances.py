"""Distances between embeddings, written once: the ``keras.ops`` forms the losses and layers train with, and the
NumPy forms the scorers evaluate (:class:`whale.objectives.scorer.EmbeddingScorer`).

The Keras half takes tensors (or arrays) and returns float32 tensors with no Python control flow on
tensor values, so it runs under TensorFlow and JAX, eagerly or inside a compiled train step. The NumPy
half works on float32 arrays in the same order of operations as the Keras half, so a score and the loss
it was trained with read the same distance.
"""
from __future__ import annotations

import numpy as np
from keras import ops

SQRT_EPS = 1e-12
"""Below this squared distance :func:`safe_sqrt` returns exactly 0 (and a zero gradient)."""


def check_rank(x, rank: int, name: str, shape: str) -> None:
    """Static rank check (no tensor values are read)."""
    n = len(x.shape)
    if n != rank:
        raise ValueError(f"{name}: expected a {rank}-D tensor {shape}, received shape {tuple(x.shape)}")


def off_diagonal(n):
    """``[n, n]`` float32: 1 off the diagonal, 0 on it (``n`` may be a traced batch size)."""
    i = ops.arange(n)
    return ops.cast(ops.not_equal(ops.expand_dims(i, 1), ops.expand_dims(i, 0)), "float32")


def safe_sqrt(x, eps: float = SQRT_EPS):
    """``sqrt(x)`` with a finite gradient at 0: exactly 0 (and gradient 0) where ``x <= eps``.

    ``sqrt``'s derivative is infinite at 0, and ``0 * inf`` is NaN in a backward pass even where
    the distance does not matter; the inner ``where`` keeps both branches of the outer one finite.
    The losses use ``eps = SQRT_EPS``; seed 004's DrLIM baseline (:mod:`whale.objectives.similarity`)
    ``eps = 0`` (0 only at exactly 0), each as it was written. Any shape, float32.
    """
    x = ops.cast(x, "float32")
    above = x > eps
    return ops.where(above, ops.sqrt(ops.where(above, x, 1.0)), ops.zeros_like(x))


def l2_normalize(x, axis: int = -1, eps: float = SQRT_EPS):
    """``x / ||x||`` along ``axis`` (a zero vector stays zero, gradient finite). Any shape, float32."""
    x = ops.cast(x, "float32")
    return x / ops.sqrt(ops.maximum(ops.sum(x * x, axis=axis, keepdims=True), eps))


def pair_sq_distances(a, b, keepdims: bool = False):
    """``[B, E]`` and ``[B, E]`` -> ``[B]`` (``[B, 1]`` with ``keepdims``) float32 ``||a_i - b_i||^2``."""
    return ops.sum(ops.square(ops.cast(a, "float32") - ops.cast(b, "float32")), axis=-1, keepdims=keepdims)


def pairwise_sq_distances(emb):
    """Squared Euclidean distances between the rows of ``emb``.

    Args:
        emb: ``[B, D]`` float embeddings.

    Returns:
        ``[B, B]`` float32, ``||e_i - e_j||^2`` from ``|e_i|^2 + |e_j|^2 - 2 e_i.e_j``, clipped at 0
        (rounding can make it slightly negative) and exactly 0 on the diagonal. Its gradient is
        finite everywhere, identical embeddings included.
    """
    emb = ops.cast(ops.convert_to_tensor(emb), "float32")
    check_rank(emb, 2, "pairwise_sq_distances(emb)", "[B, D]")
    sq = ops.sum(emb * emb, axis=1)
    d = ops.expand_dims(sq, 1) - 2.0 * ops.matmul(emb, ops.transpose(emb)) + ops.expand_dims(sq, 0)
    return ops.maximum(d, 0.0) * off_diagonal(ops.shape(emb)[0])


# ----------------------------------------------------------------------------------------- NumPy
def np_l2_normalize(e: np.ndarray) -> np.ndarray:
    """``[n, E]`` float32 rows divided by their norm, in place (:func:`l2_normalize`'s rule); returns ``e``."""
    e /= np.sqrt(np.maximum((e * e).sum(axis=1, keepdims=True), SQRT_EPS))
    return e


def np_sq_distance_matrix(ea: np.ndarray, eb: np.ndarray, dot: np.ndarray | None = None) -> np.ndarray:
    """``[a, E] x [b, E] -> [a, b]`` squared Euclidean distances, clipped at 0 (``dot``: ``ea @ eb.T`` if known)."""
    dot = ea @ eb.T if dot is None else dot
    return np.maximum((ea * ea).sum(1)[:, None] + (eb * eb).sum(1)[None, :] - 2.0 * dot, 0.0)


def np_pair_sq_distances(ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """``[n, E]`` and ``[n, E]`` -> ``[n]`` squared Euclidean distances of the row pairs."""
    return ((ea - eb) ** 2).sum(1)
