"""Ensembling score files and choosing where ``new_whale`` goes (paper: "Inference and ensembling").

A run folder holds ``scores/test.npz`` (test queries vs the training gallery) and, for a fold
run, ``scores/val.npz`` (its out-of-fold validation queries, true ids with ``new_whale``). See
``docs/ARCHITECTURE.md`` for the arrays. This module

* loads and checks score files (:func:`load_score_file`), aligns runs by image *name* (a run
  may store its queries and gallery in any order) and averages them with weights, one run in
  memory at a time, accumulating in float32 (:func:`average_score_files`);
* groups validation files (:func:`validation_groups`): files with the *same set* of queries
  (several models scoring the same fold) are averaged like the test files; files with
  *disjoint* query sets (the folds of one model) stay separate groups whose queries are
  concatenated for every measure (a query is only ever scored against its own group's
  gallery, so groups may have different galleries). Two files whose query sets overlap without
  being equal are an error: there is no single right way to combine them;
* places ``new_whale`` either by the paper's threshold rule (Table 2, via
  :mod:`whale.ranking`; the threshold fixed, tuned on validation MAP@5, or chosen so a given
  share of test images gets ``new_whale`` first), or by a calibrated rule
  (:class:`Calibrator`): a logistic regression on features of the per-id score vector gives
  ``p = P(new whale)``, an isotonic regression on validation gives ``P(id correct | its
  score)``, and ``new_whale`` goes where it maximises the expected MAP@5;
* measures both rules by K-fold cross-validation over the validation queries
  (:func:`cross_validate`): each rule is fitted on some folds and scored on the held-out one;
* is driven by the entry script ``ensemble.py`` (:func:`main`). The paper's threshold rule is
  the default; ``--calibrate`` switches the submission to the calibrated rule.

Validation weights: within a group of files with equal query sets, the runs' weights are
renormalised to sum 1. Caveat: a fold's validation gallery holds only that fold's training
images while the test gallery holds all of them, so per-id maxima run a little higher on test;
a threshold (or calibration) learnt on validation carries that bias, which is why the share of
``new_whale`` it implies on test is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from whale import NEW_WHALE
from whale.errors import ConfigError, DataError

__all__ = [
    "ScoreFile",
    "score_path",
    "load_score_file",
    "normalise_weights",
    "average_score_files",
    "validation_groups",
    "TopIds",
    "top_ids",
    "concat_top_ids",
    "query_features",
    "Calibrator",
    "expected_map_insertion",
    "map_for_thresholds",
    "tune",
    "share_first",
    "write_threshold_csv",
    "CrossValidation",
    "cross_validate",
    "new_whale_shares",
    "plot_thresholds",
    "build_parser",
    "recorded_sample",
    "main",
]

SPLITS = ("val", "test")
_ROW_BLOCK = 2048  # rows reordered and accumulated at a time: bounds the float32 temporaries
_N_TOP = 20  # ids kept per query for the calibration features
_NAMES_SHOWN = 5


# ----------------------------------------------------------------------------- score files
@dataclass(frozen=True)
class ScoreFile:
    """One score matrix with the names that index it.

    Attributes:
        path: where it came from (for a merged matrix, the first file; ``sources`` has all).
        scores: ``[n_query, n_gallery]`` float16 or float32; higher = more likely the same whale.
        query: ``[n_query]`` str image names.
        gallery: ``[n_gallery]`` str image names.
        gallery_ids: ``[n_gallery]`` str whale ids of the gallery images.
        query_ids: ``[n_query]`` str true ids (``new_whale`` included), or None (test).
        sources: the files that were averaged into it.
    """

    path: Path
    scores: np.ndarray
    query: np.ndarray
    gallery: np.ndarray
    gallery_ids: np.ndarray
    query_ids: np.ndarray | None = None
    sources: tuple[Path, ...] = field(default=())

    @property
    def n_query(self) -> int:
        return len(self.query)


def score_path(run_dir, split: str) -> Path:
    """``RUN_DIR/scores/{split}.npz``; ``split`` is ``"val"`` or ``"test"``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return Path(run_dir) / "scores" / f"{split}.npz"


def _first(names, n: int = _NAMES_SHOWN) -> str:
    names = [str(x) for x in names]
    more = f" ... ({len(names)} in all)" if len(names) > n else ""
    return ", ".join(names[:n]) + more


def _str_array(z, key: str, path: Path) -> np.ndarray:
    arr = z[key]
    if arr.ndim != 1 or arr.dtype.kind != "U":
        raise DataError(f"{path}: array {key!r} must be 1-D str, got shape {arr.shape} dtype {arr.dtype}")
    return arr


def _check_unique(names: np.ndarray, what: str, path: Path) -> None:
    uniq, counts = np.unique(names, return_counts=True)
    if len(uniq) != len(names):
        raise DataError(f"{path}: {what} names must be unique; repeated: {_first(uniq[counts > 1])}")


def _open_npz(path: Path):
    if not path.is_file():
        raise DataError(f"{path}: score file not found")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: not a readable .npz score file ({e})") from None


def _read_names(path: Path, need_query_ids: bool) -> dict:
    """The name arrays of a score file and the shape of its matrix, without loading the matrix."""
    with _open_npz(path) as z:
        need = ["scores", "query", "gallery", "gallery_ids"] + (["query_ids"] if need_query_ids else [])
        missing = [k for k in need if k not in z.files]
        if missing:
            raise DataError(f"{path}: missing arrays {missing}; expected {need}, found {sorted(z.files)}")
        try:
            out = {k: _str_array(z, k, path) for k in need if k != "scores"}
            if not need_query_ids and "query_ids" in z.files:
                out["query_ids"] = _str_array(z, "query_ids", path)
            # The matrix's header only: NpzFile gives no shape without loading the array.
            with z.zip.open("scores.npy") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    shape, dtype = z["scores"].shape, z["scores"].dtype
        except ValueError as e:
            raise DataError(f"{path}: {e}") from None
    if len(shape) != 2 or np.dtype(dtype).kind != "f":
        raise DataError(f"{path}: 'scores' must be a 2-D float array, got shape {shape} dtype {dtype}")
    nq, ng = shape
    if len(out["query"]) != nq or len(out["gallery"]) != ng or len(out["gallery_ids"]) != ng:
        raise DataError(
            f"{path}: 'scores' is {nq} x {ng} but there are {len(out['query'])} query, "
            f"{len(out['gallery'])} gallery and {len(out['gallery_ids'])} gallery_ids names"
        )
    if "query_ids" in out and len(out["query_ids"]) != nq:
        raise DataError(f"{path}: {len(out['query_ids'])} query_ids for {nq} queries")
    _check_unique(out["query"], "query", path)
    _check_unique(out["gallery"], "gallery", path)
    out["shape"] = (nq, ng)
    return out


def load_score_file(path, need_query_ids: bool = False) -> ScoreFile:
    """Load and check one score file (``allow_pickle=False``).

    Args:
        path: a ``.npz`` with ``scores`` [n_query, n_gallery] float, ``query``, ``gallery``,
            ``gallery_ids`` (1-D str) and, for validation, ``query_ids`` (1-D str).
        need_query_ids: require ``query_ids`` (validation files).

    Returns:
        A :class:`ScoreFile` whose ``scores`` keep the stored dtype.

    Raises:
        DataError: missing file or array, wrong shapes or dtypes, repeated names, non-finite scores.
    """
    path = Path(path)
    names = _read_names(path, need_query_ids)
    with _open_npz(path) as z:
        scores = z["scores"]
    if not np.isfinite(scores).all():
        bad = np.argwhere(~np.isfinite(scores))[0]
        raise DataError(f"{path}: scores must be finite; query {names['query'][bad[0]]!r} vs "
                        f"gallery {names['gallery'][bad[1]]!r} is {scores[bad[0], bad[1]]}")
    return ScoreFile(path, scores, names["query"], names["gallery"], names["gallery_ids"],
                     names.get("query_ids"), (path,))


def normalise_weights(weights: Sequence[float] | None, n_runs: int) -> np.ndarray:
    """Weights of ``n_runs`` runs scaled to sum 1 (``None``: equal weights).

    Returns:
        ``[n_runs]`` float64.

    Raises:
        ConfigError: the count differs from ``n_runs``, a weight is negative or not finite, or
            they sum to zero.
    """
    if n_runs < 1:
        raise ConfigError("expected at least one run, got none")
    if weights is None:
        return np.full(n_runs, 1.0 / n_runs)
    w = np.asarray(list(weights), dtype=np.float64)
    if w.shape != (n_runs,):
        raise ConfigError(f"expected one weight per run ({n_runs} runs), got {w.size} weights: {list(w)}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ConfigError(f"weights must be finite, >= 0 and not all zero, got {list(w)}")
    return w / w.sum()


def _positions(names: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index of each of ``wanted`` in ``names`` (both unique, same set) as ``[len(wanted)]`` int64."""
    order = np.argsort(names, kind="stable")
    return order[np.searchsorted(names, wanted, sorter=order)].astype(np.int64)


def _compare_sets(ref: np.ndarray, other: np.ndarray, what: str, ref_path: Path, path: Path) -> None:
    missing = np.setdiff1d(ref, other)
    if missing.size:
        raise DataError(f"{path}: {missing.size} {what} image(s) of {ref_path} are missing from this "
                        f"run: {_first(missing)}; every run must score the same {what} images")
    extra = np.setdiff1d(other, ref)
    if extra.size:
        raise DataError(f"{path}: {extra.size} {what} image(s) are not in {ref_path}: "
                        f"{_first(extra)}; every run must score the same {what} images")


def average_score_files(paths: Sequence, weights: Sequence[float] | None = None,
                        need_query_ids: bool = False, log=None) -> ScoreFile:
    """Weighted mean of several score files, aligned by query and gallery image names.

    All files must hold the same *sets* of query and gallery images (in any order) with the
    same gallery ids (and query ids, where present). The result is in the first file's order.
    Only one file's matrix is in memory at a time besides the float32 sum.

    Args:
        paths: score files (``.npz``), at least one.
        weights: one per file, any positive scale (normalised to sum 1); None = equal.
        need_query_ids: require ``query_ids`` (validation).
        log: optional ``print``-like callable for progress.

    Returns:
        A :class:`ScoreFile` with float32 ``scores`` [n_query, n_gallery].

    Raises:
        DataError: a file is malformed, or an image is missing from a file (the message names
            the file and the first few images), or ids disagree between files.
        ConfigError: the weights do not match the files.
    """
    paths = [Path(p) for p in paths]
    w = normalise_weights(weights, len(paths))
    metas = [_read_names(p, need_query_ids) for p in paths]  # cheap: checks everything first
    ref, ref_path = metas[0], paths[0]
    plans = []
    for path, meta in zip(paths, metas):
        _compare_sets(ref["query"], meta["query"], "query", ref_path, path)
        _compare_sets(ref["gallery"], meta["gallery"], "gallery", ref_path, path)
        qi = _positions(meta["query"], ref["query"])
        gi = _positions(meta["gallery"], ref["gallery"])
        bad = np.flatnonzero(meta["gallery_ids"][gi] != ref["gallery_ids"])
        if bad.size:
            raise DataError(f"{path}: gallery ids differ from {ref_path} for images "
                            f"{_first(ref['gallery'][bad])}")
        if "query_ids" in ref and "query_ids" in meta:
            bad = np.flatnonzero(meta["query_ids"][qi] != ref["query_ids"])
            if bad.size:
                raise DataError(f"{path}: query ids differ from {ref_path} for images "
                                f"{_first(ref['query'][bad])}")
        plans.append((qi, gi))
    nq, ng = ref["shape"]
    total = np.zeros((nq, ng), dtype=np.float32)
    for path, weight, (qi, gi) in zip(paths, w, plans):
        if log:
            log(f"  adding {path} (weight {weight:.4g})")
        scores = load_score_file(path, need_query_ids).scores
        same_q = np.array_equal(qi, np.arange(nq))
        same_g = np.array_equal(gi, np.arange(ng))
        for start in range(0, nq, _ROW_BLOCK):
            rows = slice(start, min(start + _ROW_BLOCK, nq))
            block = scores[rows] if same_q else scores[qi[rows]]
            if not same_g:
                block = block[:, gi]
            total[rows] += np.float32(weight) * block.astype(np.float32, copy=False)
        del scores
    return ScoreFile(ref_path, total, ref["query"], ref["gallery"], ref["gallery_ids"],
                     ref.get("query_ids"), tuple(paths))


def validation_groups(paths: Sequence, weights: Sequence[float] | None = None, log=None) -> list[ScoreFile]:
    """Validation files combined: averaged within identical query sets, kept apart across disjoint ones.

    Files whose query *sets* are equal (several models validating the same fold) are averaged
    with their weights renormalised within the group (:func:`average_score_files`). Files
    with disjoint query sets (the folds of one model) form separate groups; callers
    concatenate the groups' queries, each scored against its own gallery.

    Args:
        paths: ``val.npz`` files (with ``query_ids``).
        weights: one per file (None = equal).

    Returns:
        One float32 :class:`ScoreFile` per group, in order of first appearance.

    Raises:
        DataError: two files share some but not all queries (names both and a few images), a
            file is malformed, or files of a group disagree (see :func:`average_score_files`).
    """
    paths = [Path(p) for p in paths]
    w = normalise_weights(weights, len(paths))
    keys: list[frozenset] = []
    members: list[list[int]] = []
    for i, p in enumerate(paths):
        q = frozenset(_read_names(p, True)["query"].tolist())
        for key, mem in zip(keys, members):
            if key == q:
                mem.append(i)
                break
            shared = key & q
            if shared:
                raise DataError(
                    f"{p}: its validation queries overlap those of {paths[mem[0]]} without being the "
                    f"same set ({len(shared)} shared, e.g. {_first(sorted(shared))}); expected equal sets "
                    "(models of the same fold: averaged) or disjoint sets (folds: concatenated)")
        else:
            keys.append(q)
            members.append([i])
    groups = []
    for mem in members:
        if log:
            log(f"  validation group of {len(mem)} run(s), {len(keys[len(groups)])} queries")
        groups.append(average_score_files([paths[i] for i in mem], w[mem], need_query_ids=True, log=log))
    return groups


# ----------------------------------------------------------------------------- per-query top ids
@dataclass(frozen=True)
class TopIds:
    """The best ids of each query, best first (ties by id name, as :mod:`whale.ranking`).

    Attributes:
        names: ``[n_query, k]`` str ids (``""`` pads rows of a gallery with fewer than k ids).
        scores: ``[n_query, k]`` float32 per-id scores (NaN where padded).
        truth: ``[n_query]`` str true ids or None.
    """

    names: np.ndarray
    scores: np.ndarray
    truth: np.ndarray | None = None

    @property
    def n_query(self) -> int:
        return len(self.names)

    def take(self, rows: np.ndarray) -> "TopIds":
        """The queries ``rows`` (int indices)."""
        return TopIds(self.names[rows], self.scores[rows], None if self.truth is None else self.truth[rows])


def top_ids(sf: ScoreFile, k: int = _N_TOP) -> TopIds:
    """The ``k`` best ids of every query of ``sf`` by per-id max (:func:`whale.ranking.top_id_scores`)."""
    from whale.ranking import top_id_scores

    ids, idx, vals = top_id_scores(sf.scores, sf.gallery_ids, k)
    n = sf.n_query
    names = np.full((n, k), "", dtype=ids.dtype if ids.size else "<U1")
    scores = np.full((n, k), np.nan, dtype=np.float32)
    names[:, : idx.shape[1]] = ids[idx]
    scores[:, : idx.shape[1]] = vals
    return TopIds(names, scores, sf.query_ids)


def concat_top_ids(parts: Sequence[TopIds]) -> TopIds:
    """Queries of several groups stacked (rows in the order of ``parts``)."""
    truth = None if any(p.truth is None for p in parts) else np.concatenate([p.truth for p in parts])
    width = max(p.names.shape[1] for p in parts)

    def pad(a, fill):
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)

    names = np.concatenate([pad(p.names.astype(str), "") for p in parts])
    scores = np.concatenate([pad(p.scores, np.nan) for p in parts]).astype(np.float32)
    return TopIds(names, scores, truth)


def _top5_for_ranking(top: TopIds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


# ----------------------------------------------------------------------------- calibration
def query_features(top: TopIds) -> np.ndarray:
    """Features of each query's per-id score vector for ``P(new whale)``.

    Columns: top-1 .. top-5 scores, gaps top-1 minus top-2 and top-2 minus top-3, mean and
    standard deviation of the (up to 20) best ids, and the top-1 margin over that mean.

    Args:
        top: :class:`TopIds` with ``k >= 1``.

    Returns:
        ``[n_query, 10]`` float64. Missing ranks (fewer ids) take the row's lowest score.
    """
    s = top.scores.astype(np.float64)
    if s.shape[1] < 5:
        s = np.concatenate([s, np.full((len(s), 5 - s.shape[1]), np.nan)], axis=1)
    has = ~np.isnan(s)
    count = has.sum(axis=1)
    low = np.where(count > 0, np.min(np.where(has, s, np.inf), axis=1), 0.0)
    filled = np.where(has, s, low[:, None])
    mean = np.where(count > 0, np.where(has, s, 0.0).sum(axis=1) / np.maximum(count, 1), 0.0)
    var = np.where(has, (s - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(count, 1)
    top5 = filled[:, :5]
    return np.column_stack([top5, top5[:, 0] - top5[:, 1], top5[:, 1] - top5[:, 2], mean,
                            np.sqrt(var), top5[:, 0] - mean])


def expected_map_insertion(p_new: np.ndarray, p_ids: np.ndarray) -> np.ndarray:
    """Rank for ``new_whale`` that maximises each query's expected MAP@5.

    With ``c_k`` = probability that the k-th id (k = 1..5) is right and ``p`` = P(new whale),
    putting ``new_whale`` at rank ``r`` shifts ids ``r..4`` one rank down and drops the 5th:
    ``E(r) = sum_{k<r} c_k/k + p/r + sum_{r<=k<=4} c_k/(k+1)``; leaving it out gives
    ``E(6) = sum_{k<=5} c_k/k``.

    Args:
        p_new: ``[n]`` float, P(new whale).
        p_ids: ``[n, 5]`` float, ``c_k`` (0 where there is no k-th id).

    Returns:
        ``[n]`` int64 ranks 1..6 (6 = not among the five); ties go to the earliest rank.
    """
    p_new = np.asarray(p_new, dtype=np.float64)
    c = np.asarray(p_ids, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 5 or c.shape[0] != p_new.shape[0]:
        raise ValueError(f"expected p_new [n] and p_ids [n, 5], got {p_new.shape} and {c.shape}")
    ranks = np.arange(1, 6, dtype=np.float64)
    gains = np.empty((len(p_new), 6))
    for r in range(1, 6):
        before = (c[:, : r - 1] / ranks[: r - 1]).sum(axis=1)
        after = (c[:, r - 1 : 4] / ranks[r:5]).sum(axis=1)
        gains[:, r - 1] = before + p_new / r + after
    gains[:, 5] = (c / ranks).sum(axis=1)
    return gains.argmax(axis=1).astype(np.int64) + 1


class Calibrator:
    """``new_whale`` placed where it maximises expected MAP@5, from calibrated probabilities.

    ``fit`` learns, on validation queries with their true ids,

    * ``p = P(new whale | query)``: logistic regression on :func:`query_features`
      (standardised);
    * ``g(s) = P(an id is right | its per-id score s, known whale)``: isotonic regression on
      the top-5 ids of the known-whale queries.

    For a query, ``c_k = (1 - p) * g(s_k)``, the ``g(s_k)`` first divided by their sum when it
    exceeds 1 (a known whale has exactly one right id); :func:`expected_map_insertion`
    then picks the rank. Known-whale queries whose id has no gallery image count as known
    (they are "right" nowhere), as the competition scores them.
    """

    def __init__(self, C: float = 1.0):
        self.C = C
        self.p_new_model = None
        self.id_model = None

    def fit(self, top: TopIds) -> "Calibrator":
        """Fit on ``top`` (with ``truth``).

        Raises:
            DataError: no truth, or not both ``new_whale`` and known-whale queries.
        """
        from sklearn.isotonic import IsotonicRegression
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if top.truth is None:
            raise DataError("calibration needs validation queries with true ids (query_ids)")
        is_new = top.truth == NEW_WHALE
        if is_new.all() or not is_new.any():
            raise DataError(f"calibration needs both new_whale and known-whale validation queries; "
                            f"got {int(is_new.sum())} new_whale of {len(is_new)}")
        self.p_new_model = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=1000))
        self.p_new_model.fit(query_features(top), is_new.astype(int))
        known = ~is_new
        s = top.scores[known, :5].astype(np.float64)
        hit = top.names[known, :5] == top.truth[known, None]
        ok = ~np.isnan(s)
        self.id_model = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        self.id_model.fit(s[ok], hit[ok].astype(np.float64))
        return self

    def probabilities(self, top: TopIds) -> tuple[np.ndarray, np.ndarray]:
        """``(p_new [n] float64, c [n, 5] float64)`` for the queries of ``top``."""
        if self.p_new_model is None:
            raise RuntimeError("Calibrator.fit must be called first")
        p = self.p_new_model.predict_proba(query_features(top))[:, 1]
        s = top.scores[:, :5].astype(np.float64)
        if s.shape[1] < 5:
            s = np.concatenate([s, np.full((len(s), 5 - s.shape[1]), np.nan)], axis=1)
        missing = np.isnan(s)
        g = self.id_model.predict(np.where(missing, 0.0, s).ravel()).reshape(s.shape)
        g = np.where(missing, 0.0, g)
        g = g / np.maximum(1.0, g.sum(axis=1, keepdims=True))
        return p, (1.0 - p)[:, None] * g

    def predict(self, top: TopIds) -> list[list[str]]:
        """Five labels per query (fewer only with fewer than four ids), ``new_whale`` at its best rank."""
        p, c = self.probabilities(top)
        ranks = expected_map_insertion(p, c)
        out = []
        for names, r in zip(top.names[:, :5].tolist(), ranks.tolist()):
            names = [n for n in names if n]
            if r <= 5:
                names = names[: r - 1] + [NEW_WHALE] + names[r - 1 :]
            out.append(names[:5])
        return out


# ----------------------------------------------------------------------------- thresholds
def map_for_thresholds(top: TopIds, grid) -> np.ndarray:
    """``[len(grid)]`` float64 MAP@5 of the paper's rule at each threshold (via :func:`whale.ranking.map_by_threshold`)."""
    from whale.ranking import map_by_threshold

    if top.truth is None:
        raise DataError("validation MAP@5 needs the true ids (query_ids)")
    names, idx, vals = _top5_for_ranking(top)
    return np.asarray(map_by_threshold(names, idx, vals, top.truth, np.asarray(grid, dtype=np.float64)))


def tune(top: TopIds, grid=None) -> tuple[float, float, np.ndarray, np.ndarray]:
    """The threshold of best validation MAP@5 over the pooled queries of ``top``.

    Returns:
        ``(best_t, best_map, grid [g] float64, maps [g] float64)``; the first (smallest) best
        threshold wins, as in :func:`whale.ranking.tune_threshold`.
    """
    from whale.ranking import threshold_grid

    grid = np.asarray(threshold_grid() if grid is None else grid, dtype=np.float64).ravel()
    if top.n_query == 0:
        raise DataError("no validation queries to tune the threshold on")
    maps = map_for_thresholds(top, grid)
    best = int(np.argmax(maps))
    return float(grid[best]), float(maps[best]), grid, maps


def share_first(top: TopIds, grid) -> np.ndarray:
    """``[len(grid)]`` share of queries with ``new_whale`` at rank 1 (best id ``< t``) per threshold."""
    top1 = np.sort(np.nan_to_num(top.scores[:, 0].astype(np.float64), nan=-np.inf))
    return np.searchsorted(top1, np.asarray(grid, dtype=np.float64), side="left") / max(1, top1.size)


def new_whale_shares(predictions: Sequence[Sequence[str]]) -> np.ndarray:
    """``[5]`` float64: share of queries with ``new_whale`` at rank 1..5."""
    out = np.zeros(5)
    for labels in predictions:
        labels = list(labels)[:5]
        if NEW_WHALE in labels:
            out[labels.index(NEW_WHALE)] += 1
    return out / max(1, len(predictions))


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_threshold_csv(path, grid, maps) -> Path:
    """``threshold,map5`` rows, written atomically."""
    path = Path(path)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write("threshold,map5\n")
            for t, m in zip(grid, maps):
                f.write(f"{float(t)!r},{float(m)!r}\n")

    _atomic(path, write)
    return path


def plot_thresholds(path, grid, maps, chosen_t, val_share, test_share) -> Path:
    """PNG with two panels: validation MAP@5 vs threshold (chosen one marked), and the share of
    ``new_whale`` at rank 1 on validation and test. Written atomically with the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    grid = np.asarray(grid)
    i = int(np.argmin(np.abs(grid - chosen_t)))
    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    a.plot(grid, maps, lw=1.2)
    a.axvline(chosen_t, color="r", ls="--", lw=1)
    a.plot([grid[i]], [maps[i]], "ro", label=f"t = {chosen_t:.5g}, MAP@5 = {maps[i]:.4f}")
    a.set_ylabel("validation MAP@5")
    a.legend(loc="lower left")
    a.grid(alpha=0.3)
    b.plot(grid, val_share, label="validation")
    b.plot(grid, test_share, label="test")
    b.axvline(chosen_t, color="r", ls="--", lw=1)
    b.set_xlabel("threshold t")
    b.set_ylabel("share with new_whale at rank 1")
    b.legend(loc="upper left")
    b.grid(alpha=0.3)
    fig.tight_layout()
    try:
        _atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path


# ----------------------------------------------------------------------------- cross-validation
@dataclass(frozen=True)
class CrossValidation:
    """K-fold comparison of the two rules on the pooled validation queries.

    Attributes:
        threshold_map: MAP@5 over all held-out queries, each fold's threshold tuned on the others.
        calibrated_map: the same for :class:`Calibrator` fitted on the other folds.
        thresholds: ``[k]`` float64, the threshold tuned in each fold.
        folds: ``k`` pairs ``(fit_rows, held_out_rows)`` of sorted int64 query indices.
        fold_maps: ``[k, 2]`` float64 (threshold, calibrated) MAP@5 of each held-out fold.
    """

    threshold_map: float
    calibrated_map: float
    thresholds: np.ndarray
    folds: list
    fold_maps: np.ndarray


def cross_validate(top: TopIds, n_splits: int = 5, seed: int = 0, grid=None) -> CrossValidation:
    """K-fold cross-validated MAP@5 of the tuned threshold and of the calibrated rule.

    The validation queries are split into ``n_splits`` folds at random (``KFold`` with
    ``shuffle``, ``random_state=seed``); for each fold both rules are fitted on the other
    folds and scored on it, so no query is scored by a rule fitted on it.

    Args:
        top: pooled validation :class:`TopIds` with ``truth``.

    Returns:
        A :class:`CrossValidation`.
    """
    from sklearn.model_selection import KFold

    from whale.metrics import precision_at_k_per_image

    n = top.n_query
    if n < 2:
        raise DataError(f"cross-validation needs at least 2 validation queries, got {n}")
    kf = KFold(n_splits=min(n_splits, n), shuffle=True, random_state=seed)
    per_cal = np.zeros(n)
    thr_sum = 0.0
    folds, thresholds, fold_maps = [], [], []
    for fit_rows, held in kf.split(np.arange(n)):
        fit_rows, held = np.sort(fit_rows).astype(np.int64), np.sort(held).astype(np.int64)
        fit_top, held_top = top.take(fit_rows), top.take(held)
        t, _, _, _ = tune(fit_top, grid)
        thr_map = float(map_for_thresholds(held_top, [t])[0])
        cal = Calibrator().fit(fit_top)
        per_cal[held] = precision_at_k_per_image(cal.predict(held_top), held_top.truth, 5)
        thr_sum += thr_map * held.size
        folds.append((fit_rows, held))
        thresholds.append(t)
        fold_maps.append((thr_map, float(per_cal[held].mean())))
    return CrossValidation(thr_sum / n, float(per_cal.mean()), np.asarray(thresholds),
                           folds, np.asarray(fold_maps))


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``ensemble.py``."""
    p = argparse.ArgumentParser(
        prog="ensemble.py",
        description="Weighted average of runs' score files -> new_whale insertion -> submission CSV.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="run folders with scores/test.npz (and scores/val.npz for --tune/--calibrate)")
    p.add_argument("--weights", nargs="+", type=float, default=None, metavar="W",
                   help="one weight per run (normalised to sum 1); default equal")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=float, default=None, metavar="T",
                      help="new_whale at the first rank whose probability is < T (paper, Table 2)")
    mode.add_argument("--new-whale-fraction", type=float, default=None, metavar="F",
                      help="choose T so a share F of test images get new_whale at rank 1 (~0.276 on Kaggle)")
    mode.add_argument("--tune", action="store_true",
                      help="choose T by validation MAP@5 over a fine grid; writes NAME.threshold.{csv,png}")
    p.add_argument("--calibrate", action="store_true",
                   help="place new_whale by expected MAP@5 from probabilities calibrated on validation; "
                        "prints its cross-validated MAP@5 beside the tuned threshold's")
    p.add_argument("--cv-folds", type=int, default=5, help="folds for the cross-validation of --calibrate")
    p.add_argument("--seed", type=int, default=0, help="seed of the cross-validation split")
    p.add_argument("--out", required=True, type=Path, help="submission CSV, e.g. submissions/NAME.csv")
    p.add_argument("--sample", type=Path, default=None,
                   help="sample_submission.csv giving the row order (default: the one in the data "
                        "folder recorded in the first run's run.json, if any; else the npz query order)")
    return p


def recorded_sample(run_dirs: Sequence[Path]) -> Path | None:
    """``sample_submission.csv`` of the data folder recorded in a run's ``run.json``, if it exists."""
    for run in run_dirs:
        meta = Path(run) / "run.json"
        if not meta.is_file():
            continue
        try:
            data = json.loads(meta.read_text()).get("data")
        except (OSError, ValueError):
            continue
        if data:
            sample = Path(data) / "sample_submission.csv"
            if sample.is_file():
                return sample
    return None


def _sibling(out: Path, suffix: str) -> Path:
    name = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(name + suffix)


def _fmt_shares(shares: np.ndarray) -> str:
    return "  ".join(f"r{i + 1} {s:.3f}" for i, s in enumerate(shares))


def main(argv: Sequence[str] | None = None, log=print) -> int:
    """Run ``ensemble.py``; returns 0. Raises :class:`whale.errors.WhaleError` on bad input."""
    from whale.ranking import new_whale_share, predict_top5, threshold_for_fraction
    from whale.submission import check_submission, write_submission

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threshold is None and args.new_whale_fraction is None and not args.tune and not args.calibrate:
        parser.error("one of --threshold, --new-whale-fraction, --tune (or --calibrate) is required")
    if args.new_whale_fraction is not None and not 0.0 <= args.new_whale_fraction <= 1.0:
        raise ConfigError(f"--new-whale-fraction must be in [0, 1], got {args.new_whale_fraction}")
    if args.threshold is not None and not np.isfinite(args.threshold):
        raise ConfigError(f"--threshold must be a number, got {args.threshold}")
    runs = list(args.runs)
    weights = normalise_weights(args.weights, len(runs))

    log("runs and weights:")
    for run, w in zip(runs, weights):
        log(f"  {w:.4f}  {run}")
    log("test scores:")
    test = average_score_files([score_path(r, "test") for r in runs], weights, log=log)
    test_top = top_ids(test)
    log(f"  {test.n_query} test images x {len(test.gallery)} gallery images")

    val_paths = [score_path(r, "val") for r in runs]
    have_val = [p.is_file() for p in val_paths]
    val_top = None
    if args.tune or args.calibrate:
        missing = [str(p) for p, h in zip(val_paths, have_val) if not h]
        if missing:
            raise DataError(f"--tune/--calibrate need every run's validation scores; missing: {_first(missing)}")
    if all(have_val):
        log("validation scores (averaged within equal query sets, concatenated across disjoint ones):")
        groups = validation_groups(val_paths, weights, log=log)
        val_top = concat_top_ids([top_ids(g) for g in groups])
        del groups  # only the top ids are needed from here on
        log(f"  {val_top.n_query} validation queries, "
            f"{float((val_top.truth == NEW_WHALE).mean()):.3f} of them new_whale")
    else:
        log("validation scores: not every run has scores/val.npz; no validation estimate")

    out = Path(args.out)
    t = None
    expected = {}
    if args.threshold is not None:
        t, how = float(args.threshold), "given"
    elif args.new_whale_fraction is not None:
        t = threshold_for_fraction(np.nan_to_num(test_top.scores[:, 0], nan=-np.inf), args.new_whale_fraction)
        how = f"share {args.new_whale_fraction:g} of test images get new_whale at rank 1"
    elif args.tune:
        t, best_map, grid, maps = tune(val_top)
        how = "tuned on validation MAP@5"
        csv_path = write_threshold_csv(_sibling(out, ".threshold.csv"), grid, maps)
        png_path = plot_thresholds(_sibling(out, ".threshold.png"), grid, maps, t,
                                   share_first(val_top, grid), share_first(test_top, grid))
        log(f"threshold grid ({grid.size} values, {grid.min():g}..{grid.max():g}) -> {csv_path}, {png_path}")
        log(f"tuned threshold {t:.6g}: validation MAP@5 {best_map:.5f} (in-sample); "
            f"test share of new_whale at rank 1: {share_first(test_top, [t])[0]:.4f}")
    if t is not None and val_top is not None:
        label = f"threshold {t:.6g}" + (" (in-sample: tuned on these queries)" if args.tune else "")
        expected[label] = float(map_for_thresholds(val_top, [t])[0])

    method = "threshold"
    if args.calibrate:
        cv = cross_validate(val_top, n_splits=args.cv_folds, seed=args.seed)
        log(f"{len(cv.folds)}-fold cross-validated validation MAP@5 (fitted on the other folds):")
        log("  fold  tuned-threshold  calibrated")
        for i, (a, b) in enumerate(cv.fold_maps):
            log(f"  {i:>4}  {a:15.5f}  {b:10.5f}   (t = {cv.thresholds[i]:.6g})")
        log(f"  all   {cv.threshold_map:15.5f}  {cv.calibrated_map:10.5f}")
        log(f"cross-validated MAP@5: tuned threshold {cv.threshold_map:.5f} | calibrated {cv.calibrated_map:.5f}")
        predictions = Calibrator().fit(val_top).predict(test_top)
        method = "calibrated"
        expected["calibrated (cross-validated)"] = cv.calibrated_map
        expected["tuned threshold (cross-validated)"] = cv.threshold_map
    else:
        predictions = predict_top5(test.scores, test.gallery_ids, t)

    sample = args.sample if args.sample is not None else recorded_sample(runs)
    if sample is not None and args.sample is None:
        log(f"row order from {sample} (data folder recorded in run.json)")
    write_submission(out, test.query.tolist(), predictions, sample=sample)
    problems = check_submission(out, sample)
    if problems:
        raise DataError(f"{out}: the written submission fails its check: " + "; ".join(problems[:10]))

    shares = new_whale_shares(predictions)
    log("summary:")
    log(f"  runs: {len(runs)}  weights: {', '.join(f'{w:.4f}' for w in weights)}")
    if method == "calibrated":
        log("  new_whale: calibrated expected-MAP@5 insertion"
            + (f" (threshold {t:.6g} reported only)" if t is not None else ""))
    else:
        log(f"  new_whale: threshold {t:.6g} ({how}); "
            f"test share with best id < t: {new_whale_share(np.nan_to_num(test_top.scores[:, 0], nan=-np.inf), t):.4f}")
    log(f"  new_whale share at rank 1..5 on test: {_fmt_shares(shares)} (any: {shares.sum():.3f})")
    if expected:
        for k, v in expected.items():
            log(f"  expected MAP@5 from validation, {k}: {v:.5f}")
    else:
        log("  expected MAP@5 from validation: unknown (no validation scores)")
    log(f"  wrote {out} ({len(predictions)} rows, checked"
        + (f" against {sample})" if sample is not None else ")"))
    return 0
