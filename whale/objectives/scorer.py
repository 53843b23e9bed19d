"""Scoring two sets of branch features with a trained model, whatever its objective.

:func:`make_scorer` is what training (mining, validation) and inference call: the paper's head gives
its compiled :class:`whale.models.HeadScorer`; an embedding objective (a model with an ``"embedding"``
layer, :mod:`whale.objectives.layers`) gives an :class:`EmbeddingScorer`, which embeds each image's
features once and scores every pair by one matrix product. Both expose the same interface the miners
and :class:`whale.inference.runs.RunScorer` use (``d``, ``pairs_computed``, ``matrix``, ``pairs``,
``pairs_index``, ``has_head_proxy``), and both give float32 scores in [0, 1], higher = more alike,
so score files, ``new_whale`` thresholds and ensembles never ask which objective made them.
"""
from __future__ import annotations

import numpy as np

from whale.core.arrays import as_features
from whale.objectives.distances import np_l2_normalize, np_pair_sq_distances, np_sq_distance_matrix
from whale.core.progress import progress_bar

__all__ = ["EmbeddingScorer", "make_scorer"]


def make_scorer(model, **head_options):
    """The scorer of a trained model (a siamese or identity model from :mod:`whale.objectives`).

    ``head_options`` go to :class:`whale.models.HeadScorer` (e.g. ``constants=True``) for the
    paper's head and are ignored by an embedding model.

    Raises:
        ValueError: the model has neither a ``"head"`` nor an ``"embedding"`` layer.
    """
    names = {layer.name for layer in model.layers}
    if "head" in names:
        from whale.models.scorer import HeadScorer

        return HeadScorer(model.get_layer("head"), **head_options)
    if "embedding" in names:
        similarity = model.get_layer("similarity") if "similarity" in names else None
        return EmbeddingScorer(model.get_layer("embedding"), similarity=similarity)
    raise ValueError(f"model {model.name!r} has neither a 'head' nor an 'embedding' layer: layers {sorted(names)}")


class EmbeddingScorer:
    """Scores of branch features through an :class:`whale.objectives.layers.Embedding` layer.

    Example:
        >>> scorer = EmbeddingScorer(model.get_layer("embedding"))   # doctest: +SKIP
        >>> s = scorer.matrix(f_query, f_gallery)   # [n_q, n_g] float32 in [0, 1]

    ``score == "cauchy"``: ``1 / (1 + ||a - b||^2)``; ``"cosine"``: ``(1 + a.b) / 2`` on unit embeddings;
    with a ``similarity`` layer (:class:`whale.objectives.similarity.SimilarityModel`, ``objective:
    probabilistic``) its ``g(a, b; alpha)`` (:func:`whale.objectives.similarity.similarity_matrix`: one
    matrix product per block for the squared models). The embedding is computed in NumPy from the layer's
    weights (float32), the matrix in row blocks of ``block`` queries so memory stays ``block x n_g``.
    """

    has_head_proxy = False

    def __init__(self, layer, block: int = 2048, similarity=None):
        kernel, bias = (np.asarray(w, np.float32) for w in layer.dense.get_weights())
        self.kernel, self.bias = kernel, bias
        self.normalize, self.score = bool(layer.normalize), layer.score
        self.similarity = None
        if similarity is not None:  # (kind, alpha [E], beta, delta) of seed 004's model
            alpha = np.exp(np.asarray(similarity.log_alpha, np.float32))
            self.similarity = (similarity.kind, alpha, similarity.beta, similarity.delta)
        self.d, self.dim, self.block = int(kernel.shape[0]), int(kernel.shape[1]), int(block)
        self.pairs_computed = 0

    def embed(self, features) -> np.ndarray:
        """``[n, d]`` branch features -> ``[n, E]`` float32 embeddings (unit rows when the layer normalises)."""
        e = as_features(features, "features", self.d) @ self.kernel + self.bias
        if self.normalize:
            np_l2_normalize(e)
        return e.astype(np.float32, copy=False)

    def _scores(self, ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
        """Scores of embedding blocks ``[a, E] x [b, E] -> [a, b]`` float32."""
        if self.similarity is not None:
            from whale.objectives.similarity import similarity_matrix

            kind, alpha, beta, delta = self.similarity
            self.pairs_computed += len(ea) * len(eb)
            return similarity_matrix(kind, ea, eb, alpha, beta, delta)
        dot = ea @ eb.T
        self.pairs_computed += dot.size
        if self.score == "cosine":
            return np.clip((1.0 + dot) * 0.5, 0.0, 1.0, out=dot)
        return 1.0 / (1.0 + np_sq_distance_matrix(ea, eb, dot))

    def _row_scores(self, ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
        """Scores of row pairs ``(ea[i], eb[i])`` -> ``[n]`` float32."""
        self.pairs_computed += len(ea)
        if self.similarity is not None:
            from whale.objectives.similarity import SQUARED, _g_numpy

            kind, alpha, beta, delta = self.similarity
            diff = ea - eb
            d = ((diff * diff if kind in SQUARED else np.abs(diff)) * alpha).sum(1).astype(np.float32)
            return _g_numpy(kind, d, beta, delta)
        if self.score == "cosine":
            return np.clip((1.0 + (ea * eb).sum(1)) * 0.5, 0.0, 1.0)
        return 1.0 / (1.0 + np_pair_sq_distances(ea, eb))

    def matrix(self, fa, fb=None, block=None, dtype=np.float32, progress: bool = True) -> np.ndarray:
        """``[n_a, n_b]`` scores of features ``fa`` against ``fb`` (``fb=None``: ``fa`` against itself)."""
        ea = self.embed(fa)
        eb = ea if fb is None else self.embed(fb)
        out = np.empty((len(ea), len(eb)), dtype=dtype)
        step = int(block or self.block)
        for start in progress_bar(range(0, len(ea), step), desc="scoring", enabled=progress and len(ea) > step):
            out[start:start + step] = self._scores(ea[start:start + step], eb)
        return out

    def pairs(self, fa, fb, progress: bool = False) -> np.ndarray:
        """``[n]`` float32 scores of the row pairs ``(fa[i], fb[i])``."""
        return self._row_scores(self.embed(fa), self.embed(fb)).astype(np.float32)

    def pairs_index(self, fa, fb, ia, ib, progress: bool = False) -> np.ndarray:
        """``[m]`` float32 scores of ``(fa[ia[j]], fb[ib[j]])``."""
        ea, eb = self.embed(fa), self.embed(fb)
        ia, ib = np.asarray(ia, np.int64), np.asarray(ib, np.int64)
        return self._row_scores(ea[ia], eb[ib]).astype(np.float32)
