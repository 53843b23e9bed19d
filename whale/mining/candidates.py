"""Candidate partners for pruned mining: a cheap proxy similarity, top-m per image, random partners.

Pruned mining (:func:`candidates`, :func:`whale.mining.miners.mine_pruned`). Algorithm 1 picks, per image, a
partner of another id with a high score plus ``K * U(0, 1)`` noise. With ``K`` below the score
range only high-scoring pairs can win, so the head needs to score only each image's top ``m``
partners by a cheap proxy (a matrix product of branch features) and ``lap.lapmod`` solves the
sparse assignment. Random partners are added so that the choice stays spread over all images
when the noise dominates (rule in :func:`candidate_counts`).

Proxy similarity (``similarity=``): ``"cosine"`` (L2-normalised features, inner product; the
default for mining candidates), ``"dot"`` (raw inner product), ``"euclidean"`` (minus the squared
distance, up to a per-row constant) or ``"head"`` (the head's own logit, factorised to rank 4:
:meth:`HeadScorer.proxy_features`; the default, ``"auto"``, of :func:`whale.inference.topk.topk_stream` for a hidden=0
head). Cosine over raw features because the branch ends in a global max pooling of ReLU
activations: vectors are non-negative with norms that vary with contrast and size, while identity
lives in the direction. Measured by the ``proxy`` phase of ``python benchmarks/speed/bench_scoring.py``
(hard world; top-5 agreement with exact scoring, 200 queries x 1,568 gallery, P re-ranked, P =
50 / 100 / 300 / 600): cosine 0.71 / 0.89 / 0.99 / 1.00, euclidean 0.06 / 0.09 / 0.17 / 0.36,
dot 0.10 / 0.21 / 0.37 / 0.58, head rank-4 1.00 already at P = 50. Mining uses cosine: its
candidates are ``m`` per row out of all ``n``, the head proxy's matrix product is 4x wider, and
cosine candidates already keep 99.8% of the dense selection's mean head score (same run,
n = 3,000, K = 0.25 and 0.05; docs/scoring.md).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from whale.core.arrays import as_features, id_codes
from whale.core.progress import progress_bar

SIMILARITIES = ("cosine", "dot", "euclidean", "head")


def proxy_prep(f: np.ndarray, similarity: str, scorer=None, side: str = "g"):
    """``(vectors, column bias)``: proxy(i, j) = left[i] . right[j] + bias[j].

    ``side`` = ``"q"`` for the left (query/row) factor, ``"g"`` for the right one; they differ
    only for ``"head"``.
    """
    if similarity == "head":
        if scorer is None or not scorer.has_head_proxy:
            warnings.warn("similarity='head' needs a hidden=0 contract head; using 'cosine'")
            return proxy_prep(f, "cosine")
        return scorer.proxy_features(f, side), None
    if similarity == "cosine":
        norm = np.linalg.norm(f, axis=1, keepdims=True)
        return f / np.maximum(norm, 1e-12), None
    if similarity == "dot":
        return f, None
    if similarity == "euclidean":
        return f, (-0.5 * np.einsum("ij,ij->i", f, f)).astype(np.float32)
    raise ValueError(f"similarity: expected one of {SIMILARITIES}, received {similarity!r}")


def proxy_scores(fa, fb, similarity: str = "cosine") -> np.ndarray:
    """Cheap proxy similarity ``[na, nb]`` float32 (higher = more alike) for ranking rows.

    ``"euclidean"`` is ``x.y - |y|^2 / 2``: minus half the squared distance up to a per-row
    constant, so it ranks each row like the distance does.
    """
    fa = as_features(fa, "fa")
    fb = as_features(fb, "fb", fa.shape[1])
    va, _ = proxy_prep(fa, similarity)
    vb, bias = proxy_prep(fb, similarity)
    out = va @ vb.T
    if bias is not None:
        out += bias
    return out


def top_columns(sim: np.ndarray, m: int) -> np.ndarray:
    """Per row, the columns of the ``m`` highest finite values (unordered), ``[b, m]`` int64."""
    n = sim.shape[1]
    m = min(m, n)
    if m == n:
        return np.broadcast_to(np.arange(n), sim.shape).copy()
    return np.argpartition(sim, n - m, axis=1)[:, n - m :].astype(np.int64)


def candidate_counts(m: int, k: float, n_random: int | None = None) -> tuple[int, int]:
    """``(m_top, n_random)`` per image for pruned mining at noise scale ``k``.

    The cost is ``-S + k * U(0, 1)`` with ``S`` in ``[0, 1]``:

    * ``k < 1``: the noise is smaller than the score range, so the winners are high-scoring
      pairs: all ``m`` proxy candidates, plus ``max(8, ceil(m * k))`` random partners to catch
      what the proxy misses and keep some randomness.
    * ``k >= 1``: the noise dominates; a top candidate's advantage over a random partner is at
      most 1, i.e. ``1/k`` of the noise range, so only ``ceil(m / k)`` proxy candidates are kept
      next to ``m`` random partners. At ``k = 1000`` the choice is (like the dense one) a
      near-uniform draw over all images of other ids.

    ``n_random`` given: used as is (``m_top`` still follows the rule).
    """
    m = int(m)
    if m < 1:
        raise ValueError(f"m: expected an integer >= 1, received {m}")
    k = float(k)
    if not (k >= 0 and np.isfinite(k)):
        raise ValueError(f"k: expected a finite number >= 0, received {k}")
    if k < 1:
        m_top, r = m, max(8, math.ceil(m * k))
    else:
        m_top, r = max(1, math.ceil(m / k)), m
    if n_random is not None:
        r = int(n_random)
        if r < 0:
            raise ValueError(f"n_random: expected an integer >= 0, received {n_random}")
    return m_top, r


def candidates(features, ids, m: int = 100, n_random: int = 0, rng=None, block: int = 1024,
               similarity: str = "cosine", progress: bool = False, scorer=None):
    """Candidate partners per image for pruned mining.

    Args:
        features: ``[n, d]`` float branch features.
        ids: ``[n]`` labels; same-id pairs (and self) are never candidates.
        m: per image, its ``m`` partners of other ids with the highest proxy similarity.
        n_random: per image, plus this many uniformly random partners of other ids.
        rng: ``np.random.Generator`` (needed when ``n_random > 0``).
        block: rows per proxy block (memory ``block * n * 4`` bytes).
        similarity: proxy, one of ``"cosine"``, ``"dot"``, ``"euclidean"``.

    Returns:
        ``(rows, cols)``: ``[c]`` int64 each, deduplicated, sorted by row then column (CSR
        order); every image appears as a row at least once when it has another-id partner.
    """
    f = as_features(features, "features")
    n = len(f)
    codes = id_codes(ids, n)
    m, n_random, block = int(m), int(n_random), int(block)
    if m < 0 or n_random < 0 or block < 1:
        raise ValueError(f"m, n_random, block: expected m >= 0, n_random >= 0, block >= 1, received {m}, {n_random}, {block}")
    if n_random and rng is None:
        raise ValueError("rng: expected a np.random.Generator when n_random > 0, received None")
    keys = []
    if m:
        vec, bias = proxy_prep(f, similarity, scorer, "g")
        left = proxy_prep(f, similarity, scorer, "q")[0] if similarity == "head" else vec
        starts = range(0, n, block)
        for r0 in progress_bar(starts, total=len(starts), desc="candidates", enabled=progress):
            r1 = min(n, r0 + block)
            sim = left[r0:r1] @ vec.T
            if bias is not None:
                sim += bias
            sim[codes[r0:r1, None] == codes[None, :]] = -np.inf  # same id, self included
            cols = top_columns(sim, m)
            ok = np.isfinite(np.take_along_axis(sim, cols, axis=1))
            rows = np.broadcast_to(np.arange(r0, r1)[:, None], cols.shape)
            keys.append(rows[ok] * n + cols[ok])
    if n_random:
        rows = np.repeat(np.arange(n, dtype=np.int64), n_random)
        cols = rng.integers(0, n, size=rows.size)
        for _ in range(8):  # redraw same-id partners (a few rounds suffice unless one id dominates)
            bad = codes[rows] == codes[cols]
            if not bad.any():
                break
            cols[bad] = rng.integers(0, n, size=int(bad.sum()))
        ok = codes[rows] != codes[cols]
        keys.append(rows[ok] * n + cols[ok])
    if not keys:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys = np.unique(np.concatenate(keys))
    return keys // n, keys % n
