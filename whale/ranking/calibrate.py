"""The calibrated ``new_whale`` rule: expected MAP@5 from calibrated probabilities, and its cross-validation.

:class:`Calibrator` learns, on validation queries with their true ids, ``P(new whale)`` per
query (a logistic regression on features of its per-id score vector) and ``P(an id is right |
its score)`` (an isotonic regression), and puts ``new_whale`` where it maximises the expected
MAP@5 (:func:`expected_map_insertion`). :func:`cross_validate` compares it with the tuned
threshold of :mod:`whale.ranking.newwhale` by K-fold cross-validation over the validation
queries: each rule is fitted on some folds and scored on the held-out one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whale.core.errors import DataError
from whale.ranking.newwhale import map_for_thresholds, tune
from whale.ranking.topids import TopIds


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
        is_new = top.truth == top.open_label
        if is_new.all() or not is_new.any():
            raise DataError(f"calibration needs both {top.open_label} and known-individual validation queries; "
                            f"got {int(is_new.sum())} {top.open_label} of {len(is_new)}")
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
                names = names[: r - 1] + [top.open_label] + names[r - 1 :]
            out.append(names[:5])
        return out


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
