"""Per-id scores and each query's best ids: the first step from a score matrix to a ranking.

Per id, a query's probability is the maximum over that id's gallery images
(:func:`per_id_scores`: gallery columns sorted by id, then ``np.maximum.reduceat``, through
:class:`whale.core.arrays.IdGroups`, the toolkit's one per-id reduction); gallery
images labelled ``new_whale`` are dropped, so ``new_whale`` is never predicted as an id.
The best ids are ordered by probability, ties broken by id name (ascending). The full test
matrix (7,960 x 25,361) is handled in blocks of queries (:func:`top_id_scores`) so that the
per-id matrix is never held whole. :class:`TopIds` keeps each query's best ids (and its
true id, on validation) for the ``new_whale`` rules of :mod:`whale.ranking.newwhale` and
:mod:`whale.ranking.calibrate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whale import NEW_WHALE
from whale.core.arrays import IdGroups
from whale.core.errors import DataError

TOP_K = 5
DEFAULT_BLOCK = 1024
N_TOP = 20
"""Ids kept per query in a :class:`TopIds` (the calibration features use up to 20)."""


def check_scores(scores, gallery_ids) -> tuple[np.ndarray, np.ndarray]:
    """``(scores [n_query, n_gallery] float, gallery_ids [n_gallery] str)`` checked: 2-D floats, one id per column."""
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores: expected a 2-D [n_query, n_gallery] array, got shape {scores.shape}")
    if not np.issubdtype(scores.dtype, np.floating):
        raise ValueError(f"scores: expected a float array, got dtype {scores.dtype}")
    gallery_ids = check_labels(gallery_ids, "gallery_ids")
    if gallery_ids.shape[0] != scores.shape[1]:
        raise ValueError(
            f"gallery_ids has {gallery_ids.shape[0]} entries but scores has {scores.shape[1]} "
            "gallery columns; expected one id per column"
        )
    return scores, gallery_ids


def check_labels(names, what: str) -> np.ndarray:
    """``[n]`` str labels checked: a 1-D sequence of non-empty strings (``what`` names it in errors)."""
    if isinstance(names, str):
        raise ValueError(f"{what}: expected a sequence of labels, got the str {names!r}")
    names = np.asarray(names)
    if names.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D array of labels, got shape {names.shape}")
    if names.size and names.dtype.kind not in "UO":
        raise ValueError(f"{what}: expected str labels, got dtype {names.dtype}")
    names = names.astype(str)
    empty = np.flatnonzero(names == "")
    if empty.size:
        raise ValueError(f"{what}: empty label at position(s) {empty[:10].tolist()}")
    return names


def check_threshold(threshold) -> float:
    """The threshold as a float; NaN is an error."""
    t = float(threshold)
    if np.isnan(t):
        raise ValueError("threshold is NaN; expected a number (probabilities are in [0, 1])")
    return t


def _check_block(block) -> int:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    return int(block)


def per_id_scores(
    scores: np.ndarray, gallery_ids: Sequence[str], block: int = DEFAULT_BLOCK, open_label: str = NEW_WHALE
) -> tuple[np.ndarray, np.ndarray]:
    """Per-id probability: the maximum over each id's gallery images.

    Args:
        scores: ``[n_query, n_gallery]`` float16/float32/float64 probabilities.
        gallery_ids: ``[n_gallery]`` str, the id of each gallery column. Columns labelled
            ``open_label`` are dropped.
        block: queries processed per step (bounds the temporary memory).
        open_label: the competition's open-set label (:mod:`whale.formats`; ``new_whale``).

    Returns:
        ``(id_names, id_scores)``: ``id_names`` ``[n_ids]`` str in ascending order (no
        ``new_whale``), ``id_scores`` ``[n_query, n_ids]`` float32.

    Raises:
        ValueError: shapes disagree, scores are not floats, or an id is empty.
    """
    scores, gallery_ids = check_scores(scores, gallery_ids)
    block = _check_block(block)
    index = IdGroups.of(gallery_ids, open_label)
    out = np.empty((scores.shape[0], index.names.size), dtype=np.float32)
    for start in range(0, scores.shape[0], block):
        out[start : start + block] = index.max(scores[start : start + block])
    return index.names, out


def top_k_columns(id_scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` columns per row by value (descending), ties by column index (ascending).

    Args:
        id_scores: ``[b, n]`` float array, no NaN.
        k: how many columns to keep.

    Returns:
        ``(idx, vals)``: ``[b, min(k, n)]`` int64 columns and their float32 values.
    """
    b, n = id_scores.shape
    kk = min(k, n)
    if kk == 0:
        return np.empty((b, 0), dtype=np.int64), np.empty((b, 0), dtype=np.float32)
    if np.isnan(id_scores).any():
        rows = np.flatnonzero(np.isnan(id_scores).any(axis=1))
        raise ValueError(f"scores contain NaN (query rows {rows[:10].tolist()} of this block)")
    if kk < n:
        idx = np.argpartition(id_scores, n - kk, axis=1)[:, n - kk :].astype(np.int64)
        vals = np.take_along_axis(id_scores, idx, axis=1)
        kth = vals.min(axis=1)
        # argpartition picks an arbitrary subset of values tied with the k-th largest; redo
        # those rows so that the lowest column indices (= first id names) win.
        tied = np.flatnonzero((id_scores >= kth[:, None]).sum(axis=1) > kk)
        if tied.size:
            sub = id_scores[tied]
            edge = kth[tied][:, None]
            greater = sub > edge
            equal = sub == edge
            need = kk - greater.sum(axis=1)
            chosen = greater | (equal & (np.cumsum(equal, axis=1) <= need[:, None]))
            idx[tied] = np.nonzero(chosen)[1].reshape(tied.size, kk)
            vals[tied] = np.take_along_axis(sub, idx[tied], axis=1)
    else:
        idx = np.broadcast_to(np.arange(n, dtype=np.int64), (b, n)).copy()
        vals = id_scores.copy()
    order = np.lexsort((idx, -vals.astype(np.float64)), axis=-1)
    idx = np.take_along_axis(idx, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1).astype(np.float32, copy=False)
    return idx, vals


def top_id_scores(
    scores: np.ndarray, gallery_ids: Sequence[str], k: int = TOP_K, block: int = DEFAULT_BLOCK,
    open_label: str = NEW_WHALE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top ``k`` ids per query by per-id max, in blocks of queries (never the whole per-id matrix).

    Args:
        scores: ``[n_query, n_gallery]`` float probabilities (float16 is fine).
        gallery_ids: ``[n_gallery]`` str; ``open_label`` columns are dropped.
        k: ids kept per query.
        block: queries per step.
        open_label: the competition's open-set label (``new_whale``, ``new_individual``).

    Returns:
        ``(id_names, top_idx, top_vals)``: ``id_names`` ``[n_ids]`` str ascending,
        ``top_idx`` ``[n_query, min(k, n_ids)]`` int64 indices into ``id_names`` and
        ``top_vals`` the matching float32 probabilities, descending per row (ties by name).

    Raises:
        ValueError: shapes disagree, scores are not floats or contain NaN.
    """
    scores, gallery_ids = check_scores(scores, gallery_ids)
    block = _check_block(block)
    index = IdGroups.of(gallery_ids, open_label)
    kk = min(k, index.names.size)
    top_idx = np.empty((scores.shape[0], kk), dtype=np.int64)
    top_vals = np.empty((scores.shape[0], kk), dtype=np.float32)
    for start in range(0, scores.shape[0], block):
        stop = min(start + block, scores.shape[0])
        try:
            idx, vals = top_k_columns(index.max(scores[start:stop]), k)
        except ValueError as err:
            raise ValueError(f"queries {start}..{stop - 1}: {err}") from None
        top_idx[start:stop] = idx
        top_vals[start:stop] = vals
    return index.names, top_idx, top_vals


@dataclass(frozen=True)
class TopIds:
    """The best ids of each query, best first (ties by id name, as :mod:`whale.ranking`).

    Attributes:
        names: ``[n_query, k]`` str ids (``""`` pads rows of a gallery with fewer than k ids).
        scores: ``[n_query, k]`` float32 per-id scores (NaN where padded).
        truth: ``[n_query]`` str true ids or None.
        open_label: the label of a query whose individual the gallery lacks (``new_whale``);
            the rules of :mod:`whale.ranking` insert and check this one.
    """

    names: np.ndarray
    scores: np.ndarray
    truth: np.ndarray | None = None
    open_label: str = NEW_WHALE

    @property
    def n_query(self) -> int:
        return len(self.names)

    def take(self, rows: np.ndarray) -> "TopIds":
        """The queries ``rows`` (int indices)."""
        return TopIds(self.names[rows], self.scores[rows], None if self.truth is None else self.truth[rows],
                      self.open_label)


def top_ids(sf, k: int = N_TOP, open_label: str = NEW_WHALE) -> TopIds:
    """The ``k`` best ids of every query of a score file ``sf`` (:class:`whale.inference.ScoreFile`) by per-id max.

    ``open_label``: the competition's open-set label (gallery columns with it are dropped).
    """

    ids, idx, vals = top_id_scores(sf.scores, sf.gallery_ids, k, open_label=open_label)
    n = sf.n_query
    names = np.full((n, k), "", dtype=ids.dtype if ids.size else "<U1")
    scores = np.full((n, k), np.nan, dtype=np.float32)
    names[:, : idx.shape[1]] = ids[idx]
    scores[:, : idx.shape[1]] = vals
    return TopIds(names, scores, sf.query_ids, open_label)


def concat_top_ids(parts: Sequence[TopIds]) -> TopIds:
    """Queries of several groups stacked (rows in the order of ``parts``, which share one open-set label)."""
    labels = {p.open_label for p in parts}
    if len(labels) > 1:
        raise ValueError(f"concat_top_ids: the parts have different open-set labels {sorted(labels)}")
    truth = None if any(p.truth is None for p in parts) else np.concatenate([p.truth for p in parts])
    width = max(p.names.shape[1] for p in parts)

    def pad(a, fill):
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)

    names = np.concatenate([pad(p.names.astype(str), "") for p in parts])
    scores = np.concatenate([pad(p.scores, np.nan) for p in parts]).astype(np.float32)
    return TopIds(names, scores, truth, parts[0].open_label)


def top5_for_ranking(top: TopIds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``top``'s first five ids as ``(id_names, top_idx, top_vals)`` for :func:`whale.ranking.map_by_threshold`.

    Only ranks filled in every row are kept: fewer than five only when some gallery has fewer
    than five known ids (then all rows are cut to that width).
    """
    filled = (top.names != "").all(axis=0)
    width = int(np.argmin(filled)) if not filled.all() else filled.size
    width = min(5, width)
    if width == 0:
        raise DataError("no known ids in the gallery: nothing to rank")
    uniq, inv = np.unique(top.names[:, :width], return_inverse=True)
    return uniq, inv.reshape(top.n_query, width).astype(np.int64), top.scores[:, :width]
