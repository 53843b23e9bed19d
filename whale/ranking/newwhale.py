"""Where ``new_whale`` goes in each query's five labels: every rule of the toolkit, in one place.

The paper's inference rule (section "Inference", Table 2):

1. per id, the probability of a query is the maximum over that id's gallery images
   (:func:`whale.ranking.topids.per_id_scores`: gallery columns sorted by id, then ``np.maximum.reduceat``);
   gallery images labelled ``new_whale`` are dropped, so ``new_whale`` is never predicted
   as an id;
2. the five ids of highest probability are taken, ties broken by id name (ascending);
3. walking from rank 1, ``new_whale`` is inserted at the first rank whose probability is
   below the threshold ``t`` and the fifth id falls off (:func:`rank_from_id_scores`).
   If all five are ``>= t`` there is no ``new_whale``. With fewer than five known ids,
   ``new_whale`` goes right after the last id that is ``>= t`` and the list is shorter than
   five only when fewer than four ids exist (labels are never repeated).

Comparisons with ``t`` are made in float64 everywhere, so :func:`tune_threshold`,
:func:`predict_top5` and :func:`threshold_for_fraction` agree exactly at the boundaries.

Thresholds: fixed, tuned on validation MAP@5 (:func:`tune`, the one tuner; :func:`tune_threshold`
takes a score matrix), or chosen so that a share of test queries gets ``new_whale`` first
(:func:`threshold_for_fraction`). The calibrated rule (expected MAP@5 from calibrated
probabilities) is :mod:`whale.ranking.calibrate`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from whale import NEW_WHALE
from whale.core.errors import DataError
from whale.ranking.topids import (DEFAULT_BLOCK, TOP_K, TopIds, check_labels, check_scores, check_threshold,
                                  top5_for_ranking, top_k_columns, top_id_scores)


def _insert_positions(top_vals: np.ndarray, threshold: float) -> np.ndarray:
    """0-based rank where ``new_whale`` goes: the number of leading values ``>= threshold``.

    ``top_vals`` ``[n, k]`` is descending per row, so the count equals the first index below
    the threshold. Returns ``[n]`` int64.
    """
    return (top_vals.astype(np.float64) >= threshold).sum(axis=1).astype(np.int64)


def _labels(top_names: np.ndarray, positions: np.ndarray, open_label: str = NEW_WHALE) -> list[list[str]]:
    """``[n, k]`` str ids + ``[n]`` insertion ranks -> ``n`` lists of at most 5 labels (``open_label`` inserted)."""
    out = []
    for row, p in zip(top_names.tolist(), positions.tolist()):
        if p < TOP_K:
            row = row[:p] + [open_label] + row[p:]
        out.append(row[:TOP_K])
    return out


def rank_from_id_scores(
    id_names: Sequence[str], id_scores: np.ndarray, threshold: float, open_label: str = NEW_WHALE
) -> list[list[str]]:
    """Five labels per query from per-id probabilities, ``new_whale`` inserted by threshold.

    Args:
        id_names: ``[n_ids]`` distinct str ids (any order; ``new_whale`` not allowed).
        id_scores: ``[n_query, n_ids]`` float probabilities.
        threshold: ``new_whale`` goes at the first rank whose probability is ``< threshold``.
        open_label: the label inserted (the competition format's: ``new_whale``, ``new_individual``).

    Returns:
        ``n_query`` lists of distinct labels, five unless fewer than four ids exist.

    Raises:
        ValueError: shapes disagree, ids repeat or include ``new_whale``, NaN scores.
    """
    names = check_labels(id_names, "id_names")
    id_scores = np.asarray(id_scores)
    if id_scores.ndim != 2 or id_scores.shape[1] != names.size:
        raise ValueError(
            f"id_scores: expected shape [n_query, {names.size}] (one column per id name), "
            f"got {id_scores.shape}"
        )
    if not np.issubdtype(id_scores.dtype, np.floating):
        raise ValueError(f"id_scores: expected a float array, got dtype {id_scores.dtype}")
    if open_label in set(names.tolist()):
        raise ValueError(f"id_names contains {open_label!r}; it is inserted by threshold, not ranked")
    t = check_threshold(threshold)
    order = np.argsort(names, kind="stable")
    names = names[order]
    if names.size > 1 and (names[1:] == names[:-1]).any():
        dup = names[1:][names[1:] == names[:-1]]
        raise ValueError(f"id_names repeats {sorted(set(dup.tolist()))[:10]}; expected distinct ids")
    if not np.array_equal(order, np.arange(order.size)):
        id_scores = id_scores[:, order]  # column order = name order, for the tie rule
    idx, vals = top_k_columns(id_scores, TOP_K)
    return _labels(names[idx], _insert_positions(vals, t), open_label)


def predict_top5(
    scores: np.ndarray, gallery_ids: Sequence[str], threshold: float, block: int = DEFAULT_BLOCK,
    open_label: str = NEW_WHALE,
) -> list[list[str]]:
    """Query-vs-gallery probabilities -> five labels per query (per-id max, top 5, new_whale).

    Args:
        scores: ``[n_query, n_gallery]`` float probabilities (float16 is fine).
        gallery_ids: ``[n_gallery]`` str; ``new_whale`` gallery images are dropped.
        threshold: ``new_whale`` goes at the first rank whose probability is ``< threshold``.
        block: queries per step.
        open_label: the competition's open-set label, inserted (and dropped from the gallery).

    Returns:
        ``n_query`` lists of distinct labels (five unless fewer than four known ids).
    """
    t = check_threshold(threshold)
    names, idx, vals = top_id_scores(scores, gallery_ids, TOP_K, block, open_label)
    return _labels(names[idx], _insert_positions(vals, t), open_label)


def predict_from_top(top: TopIds, threshold: float) -> list[list[str]]:
    """:func:`predict_top5` from each query's best ids already found (``top``): the same five labels, with no
    second pass over the score matrix (the ensemble's test matrix is reduced once)."""
    t = check_threshold(threshold)
    names, idx, vals = top5_for_ranking(top)
    return _labels(names[idx], _insert_positions(vals, t), top.open_label)


def threshold_grid() -> np.ndarray:
    """Thresholds to try: 0..1 step 0.005, 0.99..1 step 0.0001, and 0.9995, 0.9999, 0.99999.

    Returns:
        ``[n]`` float64, ascending, distinct, within [0, 1].
    """
    coarse = np.arange(201) * 0.005
    fine = 0.99 + np.arange(101) * 0.0001
    extra = np.array([0.9995, 0.9999, 0.99995, 0.99999])
    return np.unique(np.round(np.concatenate([coarse, fine, extra]), 8))


def map_by_threshold(
    id_names: np.ndarray,
    top_idx: np.ndarray,
    top_vals: np.ndarray,
    query_ids: Sequence[str],
    grid: Sequence[float],
    open_label: str = NEW_WHALE,
    open_share: float | None = None,
) -> np.ndarray:
    """MAP@5 for every threshold, from the top ids computed once (see :func:`top_id_scores`).

    Args:
        id_names: ``[n_ids]`` str.
        top_idx: ``[n_query, k]`` int64 indices into ``id_names``, ``k <= 5``.
        top_vals: ``[n_query, k]`` float probabilities, descending per row.
        query_ids: ``[n_query]`` true labels (``open_label`` included).
        grid: ``[n_t]`` thresholds.
        open_label: the competition's open-set label (``new_whale``).
        open_share: None (every query weighs the same), or the share of open-set queries to weigh
            the mean as (:func:`open_share_weights`).

    Returns:
        ``[n_t]`` float64 MAP@5, equal to :func:`whale.metrics.map_at_k` of
        :func:`predict_top5` at each threshold (with ``open_share``: its reweighted mean).
    """
    query_ids = check_labels(query_ids, "query_ids")
    top_idx = np.asarray(top_idx)
    top_vals = np.asarray(top_vals, dtype=np.float64)
    if top_idx.shape != top_vals.shape or top_idx.ndim != 2 or top_idx.shape[1] > TOP_K:
        raise ValueError(
            f"top_idx {top_idx.shape} and top_vals {top_vals.shape}: expected equal shapes "
            f"[n_query, k] with k <= {TOP_K}"
        )
    if query_ids.size != top_idx.shape[0]:
        raise ValueError(
            f"query_ids has {query_ids.size} entries but there are {top_idx.shape[0]} queries"
        )
    grid = np.asarray(grid, dtype=np.float64).ravel()
    if np.isnan(grid).any():
        raise ValueError("grid contains NaN")
    n = query_ids.size
    if n == 0:
        return np.zeros(grid.size)
    hit = np.asarray(id_names)[top_idx] == query_ids[:, None]
    true_rank = np.where(hit.any(axis=1), hit.argmax(axis=1), -1)  # 0-based, -1 = absent
    is_new = query_ids == open_label
    known = true_rank >= 0
    weight = None if open_share is None else open_share_weights(is_new, open_share)
    maps = np.empty(grid.size)
    for start in range(0, grid.size, 64):
        ts = grid[start : start + 64]
        pos_new = (top_vals[None, :, :] >= ts[:, None, None]).sum(axis=2)  # [t, n]
        pos_true = true_rank[None, :] + (true_rank[None, :] >= pos_new)
        pos = np.where(is_new[None, :], pos_new, pos_true)
        valid = (pos < TOP_K) & (is_new | known)[None, :]
        score = np.divide(1.0, pos + 1, out=np.zeros(pos.shape), where=valid)
        maps[start : start + 64] = score.mean(axis=1) if weight is None else score @ weight
    return maps


def open_share_weights(is_open: np.ndarray, open_share: float | None) -> np.ndarray:
    """``[n]`` float64 query weights summing to 1: equal, or with the open-set queries weighing ``open_share``.

    A validation fold's share of open-set queries may differ from the test set's (the 2019 competition's:
    about 0.276; a fold of a catalogue with few one-photo individuals: less). The threshold of best MAP@5
    depends on that share, so it can be tuned as if validation had the test's share.

    Raises:
        ValueError: ``open_share`` outside (0, 1), or given when one of the two kinds of query is absent.
    """
    n = is_open.size
    if open_share is None:
        return np.full(n, 1.0 / max(n, 1))
    if not 0 < open_share < 1:
        raise ValueError(f"open_share must be in (0, 1), got {open_share}")
    n_open = int(is_open.sum())
    if n_open == 0 or n_open == n:
        raise ValueError(f"open_share needs both kinds of validation query; got {n_open} open-set of {n}")
    return np.where(is_open, open_share / n_open, (1 - open_share) / (n - n_open))


def tune_threshold(
    scores: np.ndarray,
    gallery_ids: Sequence[str],
    query_ids: Sequence[str],
    grid: Sequence[float] | None = None,
    block: int = DEFAULT_BLOCK,
    open_label: str = NEW_WHALE,
) -> tuple[float, float, np.ndarray]:
    """The threshold that maximises validation MAP@5 (with ``new_whale`` queries included).

    A score-matrix front end of :func:`tune`, the one tuner.

    Args:
        scores: ``[n_query, n_gallery]`` float validation-vs-train probabilities.
        gallery_ids: ``[n_gallery]`` str.
        query_ids: ``[n_query]`` str true labels of the queries.
        grid: thresholds to try; :func:`threshold_grid` if None.
        block: queries per step for the per-id max.
        open_label: the competition's open-set label (``new_whale``).

    Returns:
        ``(best_t, best_map, maps)``: the first (smallest) grid value reaching the best
        MAP@5, that MAP@5, and ``[len(grid)]`` float64 MAP@5 per threshold.
    """
    query_ids = check_labels(query_ids, "query_ids")
    scores, gallery_ids = check_scores(scores, gallery_ids)
    if query_ids.size != scores.shape[0]:
        raise ValueError(
            f"query_ids has {query_ids.size} entries but scores has {scores.shape[0]} query rows"
        )
    names, idx, vals = top_id_scores(scores, gallery_ids, TOP_K, block, open_label)
    best_t, best_map, _, maps = tune(TopIds(names[idx], vals, query_ids, open_label), grid)
    return best_t, best_map, maps


def map_for_thresholds(top: TopIds, grid, open_share: float | None = None) -> np.ndarray:
    """``[len(grid)]`` float64 MAP@5 of the paper's rule at each threshold (via :func:`map_by_threshold`;
    ``open_share``: the open-set queries weighted to that share, :func:`open_share_weights`)."""
    if top.truth is None:
        raise DataError("validation MAP@5 needs the true ids (query_ids)")
    names, idx, vals = top5_for_ranking(top)
    return np.asarray(map_by_threshold(names, idx, vals, top.truth, np.asarray(grid, dtype=np.float64),
                                       top.open_label, open_share))


def at_threshold(threshold: float, test: TopIds | None = None, val: TopIds | None = None,
                 open_share: float | None = None) -> tuple[list[list[str]] | None, list[float]]:
    """The paper's rule at one threshold: ``(predictions, maps)``, the test queries' labels (:func:`predict_from_top`;
    None without ``test``) and the rule's validation MAP@5 (``[]`` without ``val``; else ``[MAP@5]``, and with
    ``open_share`` also the MAP@5 with the open-set queries weighted to it)."""
    predictions = None if test is None else predict_from_top(test, threshold)
    maps = [] if val is None else [float(map_for_thresholds(val, [threshold])[0])]
    if val is not None and open_share is not None:
        maps.append(float(map_for_thresholds(val, [threshold], open_share)[0]))
    return predictions, maps


def tune(top: TopIds, grid=None, open_share: float | None = None) -> tuple[float, float, np.ndarray, np.ndarray]:
    """The threshold of best validation MAP@5 over the pooled queries of ``top`` (``open_share``: with the
    open-set queries weighted to that share, :func:`open_share_weights`).

    Returns:
        ``(best_t, best_map, grid [g] float64, maps [g] float64)``; the first (smallest) best
        threshold wins. :func:`tune_threshold` is the same for a score matrix.
    """
    grid = np.asarray(threshold_grid() if grid is None else grid, dtype=np.float64).ravel()
    if grid.size == 0:
        raise ValueError("grid is empty; expected at least one threshold")
    if top.n_query == 0:
        raise DataError("no validation queries to tune the threshold on")
    maps = map_for_thresholds(top, grid, open_share)
    best = int(np.argmax(maps))
    return float(grid[best]), float(maps[best]), grid, maps


def _share_below(top1: np.ndarray, grid) -> np.ndarray:
    """``[len(grid)]`` float64: the share of ``top1`` values below each threshold (compared in float64)."""
    top1 = np.sort(np.asarray(top1, dtype=np.float64))
    return np.searchsorted(top1, np.asarray(grid, dtype=np.float64), side="left") / max(1, top1.size)


def share_first(top: TopIds, grid) -> np.ndarray:
    """``[len(grid)]`` share of queries with ``new_whale`` at rank 1 (best id ``< t``) per threshold.

    Queries without any id (NaN padding) count as getting ``new_whale`` first.
    """
    return _share_below(np.nan_to_num(top.scores[:, 0].astype(np.float64), nan=-np.inf), grid)


def _check_top1(top1_scores) -> np.ndarray:
    top1 = np.asarray(top1_scores)
    if top1.ndim != 1:
        raise ValueError(f"top1_scores: expected a 1-D [n_query] array, got shape {top1.shape}")
    if top1.size and not np.issubdtype(top1.dtype, np.floating):
        raise ValueError(f"top1_scores: expected floats, got dtype {top1.dtype}")
    if np.isnan(top1.astype(np.float64)).any():
        raise ValueError("top1_scores contains NaN")
    return top1


def new_whale_share(top1_scores: np.ndarray, threshold: float) -> float:
    """Share of queries that get ``new_whale`` at rank 1 (their best id is ``< threshold``).

    Args:
        top1_scores: ``[n_query]`` float, each query's best per-id probability
            (``top_vals[:, 0]`` of :func:`top_id_scores`).
        threshold: the ``new_whale`` threshold.

    Returns:
        A float in [0, 1]; 0.0 for no queries.
    """
    top1 = _check_top1(top1_scores)
    t = check_threshold(threshold)
    return float(_share_below(top1, [t])[0]) if top1.size else 0.0


def threshold_for_fraction(top1_scores: np.ndarray, fraction: float) -> float:
    """A threshold giving ``new_whale`` at rank 1 to a share ``fraction`` of the queries.

    The share ``mean(top1 < t)`` only takes the values ``j / n``; the returned ``t`` reaches
    the achievable share closest to ``fraction`` (the smaller one on a tie). ``t`` is one of
    the scores themselves (or the next float above the largest one), so it selects the same
    queries whether compared in float32 or float64.

    Args:
        top1_scores: ``[n_query]`` float, each query's best per-id probability.
        fraction: wanted share in [0, 1] (about 0.276 on the Kaggle test set).

    Returns:
        The threshold (float).

    Raises:
        ValueError: no scores, NaN scores, or ``fraction`` outside [0, 1].
    """
    top1 = _check_top1(top1_scores)
    fraction = float(fraction)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    if top1.size == 0:
        raise ValueError("top1_scores is empty; expected at least one query")
    ordered = np.sort(top1.astype(np.float64))
    distinct = np.unique(top1)
    above = np.nextafter(distinct[-1], np.inf)  # in the input dtype: representable there too
    candidates = np.append(distinct.astype(np.float64), float(above))
    shares = np.searchsorted(ordered, candidates, side="left") / ordered.size
    return float(candidates[int(np.argmin(np.abs(shares - fraction)))])


def predict_for_fraction(top: TopIds, fraction: float) -> tuple[list[list[str]], float]:
    """Five labels per query, ``new_whale`` first for exactly ``round(fraction * n)`` of the ``n`` queries.

    A threshold alone cannot always do this: float16 scores tie, and every query of a tie
    falls on the same side of any threshold. So the queries are ordered by their best id's
    score, ascending, **ties broken by query order** (row index: deterministic), and the
    first ``m = round(fraction * n)`` get ``new_whale`` at rank 1. The others follow the
    paper's rule with ``t = threshold_for_fraction(...)`` except that, when a tie at ``t``
    would still put ``new_whale`` first, it goes right after their best id.

    Args:
        top: each query's best ids (:class:`whale.ranking.TopIds`), ``[n_query, k]``.
        fraction: wanted share in [0, 1].

    Returns:
        ``(predictions, t)``: ``n_query`` lists of labels and the threshold used for ranks 2..5.
    """
    names, idx, vals = top5_for_ranking(top)
    top1 = np.nan_to_num(vals[:, 0].astype(np.float64), nan=-np.inf)
    t = threshold_for_fraction(top1, fraction)
    n = top1.size
    m = int(np.floor(float(fraction) * n + 0.5))
    order = np.lexsort((np.arange(n), top1))  # by score, then by row
    positions = _insert_positions(vals, t)
    first = np.zeros(n, dtype=bool)
    first[order[:m]] = True
    positions[first] = 0
    positions[~first & (positions == 0)] = 1
    return _labels(names[idx], positions, top.open_label), t


def new_whale_shares(predictions: Sequence[Sequence[str]], open_label: str = NEW_WHALE) -> np.ndarray:
    """``[5]`` float64: share of queries with ``open_label`` (``new_whale``) at rank 1..5."""
    out = np.zeros(5)
    for labels in predictions:
        labels = list(labels)[:5]
        if open_label in labels:
            out[labels.index(open_label)] += 1
    return out / max(1, len(predictions))


def topk_to_predictions(id_names, id_scores, threshold: float, open_label: str = NEW_WHALE) -> list[list[str]]:
    """Per-query top ids (``topk_stream`` output) -> five labels with ``new_whale`` inserted.

    ``id_names`` ``[nq, k]`` str, ``id_scores`` ``[nq, k]`` float. Applies
    :func:`whale.ranking.rank_from_id_scores` row by row (same insertion rule and tie order).
    """
    id_names = np.asarray(id_names, dtype=str)
    id_scores = np.asarray(id_scores, dtype=np.float32)
    if id_names.shape != id_scores.shape or id_names.ndim != 2:
        raise ValueError(f"id_names, id_scores: expected equal [nq, k] shapes, received {id_names.shape}, {id_scores.shape}")
    return [rank_from_id_scores(n, s[None, :], threshold, open_label)[0] for n, s in zip(id_names, id_scores)]
