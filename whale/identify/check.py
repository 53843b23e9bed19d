"""One check on all the evidence: every shortlisted (query, gallery photo) pair described by every source, one
classifier's P(same whale), aggregated to the individual.

**The pair table** (:func:`pair_table`): one row per shortlisted pair, the columns of :func:`column_names`:

================================  ====================================================================================
``<kind>.p``                      the feature kind's own check of the pair (P(same) where verified, below 1e-3 where not)
``<kind>.inliers``                verified correspondences of that kind (0: not verified)
``<kind>.log_votes``              log(1 + its LNBNN votes for the photo)
``<kind>.vote_rank``              log(1 + the photo's rank among the query's gallery by those votes)
``<kind>.id_p``, ``.id_rank``     the best ``p`` over the photo's individual, and log(1 + that individual's rank by it)
``<run>.score``, ``.rank``        a trained run's score of the pair, log(1 + the photo's rank by it)
``<run>.id_score``, ``.id_rank``  the best score over the photo's individual, log(1 + that individual's rank by it)
``<run>.gap``                     the query's best score by that run minus the pair's
``log_photos``                    log of the gallery photos of the photo's individual (kept, not fitted on: below;
                                  not in a table of the gallery's own photos as queries, ``leave_out``)
================================  ====================================================================================

The check fits every column but :data:`NOT_FITTED`: ``log_photos`` says nothing on validation that holds on the test.
A validation query is a photo of an individual with three or more (:mod:`whale.data.folds`), so its own
individual always keeps two or more photos in the gallery, while a test query's may keep one; fitted on it, the
trees learned that a one-photo individual is never the answer (split 0: the known whales with one gallery photo,
ids only, 0.440 against the late fusion's 0.521, docs/humpback.md "One identification"). A validation **thinned** as
the test is drawn (:mod:`whale.identify.thin`) has whales with one gallery photo in the test's share; fitted there,
``check.columns: individuals`` (:func:`check_rows`) fits the photo count too, with each individual's own columns
(:func:`individual_columns`: how many of its photos some kind verified, each kind's margin over the query's other
individuals).

**The classifier** (:class:`JointCheck`): scikit-learn's gradient-boosted trees, fitted on the validation queries'
pairs (label: same individual; a ``new_whale`` query gives negatives only). Not on the gallery matched against
itself as each kind's own check is (:mod:`whale.keypoints.check`): a trained run's gallery-vs-gallery scores are of
photos it trained on, so a check fitted there would trust the network as it can never be trusted on new photos. The
validation queries are held out from the network and from every kind's check alike, as the test photos are. The
validation file's own probabilities are cross-fitted (``folds`` groups of whole queries, each predicted by trees that
never saw it), so the ``new_whale`` threshold that ``whale ensemble --tune`` sets there is tuned on honest scores.

**Aggregation** (:func:`identification_scores`): a pair's P(same) to its individual's, the best photo's (``max``)
or ``1 - prod(1 - p)`` over the individual's shortlisted photos (``noisy_or``), written on each of those photos so
the toolkit's per-id maximum reads it; a photo no source shortlisted scores below every shortlisted one.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whale import NEW_WHALE
from whale.core.arrays import IdGroups
from whale.core.progress import progress_line

KIND_COLUMNS = ("p", "inliers", "log_votes", "vote_rank", "id_p", "id_rank")
RUN_COLUMNS = ("score", "rank", "id_score", "id_rank", "gap")
FLOOR = 1e-6
"""A photo no source shortlisted scores below this (each kind's own scores times it), every shortlisted one above."""
NOT_FITTED = ("log_photos",)
"""Pair-table columns the check never fits on (module docstring): their validation distribution is not the test's."""


@dataclass
class KindEvidence:
    """One feature kind's match of a split's queries: ``scores`` (its own check), ``votes``, ``inliers``, all
    ``[n_q, n_g]``."""

    scores: np.ndarray
    votes: np.ndarray
    inliers: np.ndarray


def column_names(kinds: Sequence[str], runs: Sequence[str], photos: bool = True) -> list[str]:
    """The pair table's columns (module docstring) for feature kinds ``kinds`` and trained runs ``runs``
    (``photos`` False: without ``log_photos``)."""
    return ([f"{k}.{c}" for k in kinds for c in KIND_COLUMNS] + [f"{r}.{c}" for r in runs for c in RUN_COLUMNS]
            + ["log_photos"] * bool(photos))


def fitted_columns(columns: Sequence[str]) -> list[int]:
    """The indices of ``columns`` the check fits on: all but :data:`NOT_FITTED`."""
    return [i for i, c in enumerate(columns) if c not in NOT_FITTED]


def individual_columns(pairs: np.ndarray, rows: np.ndarray, columns: Sequence[str], gallery_ids,
                       open_label: str = NEW_WHALE) -> tuple[np.ndarray, list[str]]:
    """``([m, e] float32, names)``: ``check.columns: individuals``' columns of the pair table ``pairs`` ``[m, 2]`` /
    ``rows`` ``[m, f]`` (``columns``; ``log_photos`` among them), each read from the query's shortlisted pairs of
    the photo's individual (a ``new_whale`` photo its own individual):

    ``id.verified`` / ``id.shortlisted`` / ``id.verified_share``: of the individual's shortlisted photos, those some
    kind verified, all of them, and the verified over its gallery photos (``log_photos``); per kind ``<kind>.id_sum_p``
    (the sum of ``p`` over them), ``<kind>.gap`` (the query's best ``p`` minus the pair's) and ``<kind>.id_margin``
    (``id_p`` minus the best ``id_p`` of the query's other shortlisted individuals, 0 when it has none)."""
    col = {c: i for i, c in enumerate(columns)}
    if "log_photos" not in col:
        raise ValueError("individual_columns: the pair table has no log_photos column")
    ids = np.asarray(gallery_ids, str)
    q, g = pairs[:, 0], pairs[:, 1]
    alone = ids[g] == open_label
    group = pair_groups(pairs, ids, open_label)
    n_groups, n_q = int(group.max(initial=-1)) + 1, int(q.max(initial=-1)) + 1
    group_query = np.zeros(n_groups, np.int64)
    group_query[group] = q
    kinds = [c[:-len(".inliers")] for c in columns if c.endswith(".inliers")]
    verified = np.bincount(group, np.max([rows[:, col[f"{k}.inliers"]] for k in kinds], axis=0) > 0, n_groups)[group]
    photos = np.where(alone, 1, np.maximum(np.rint(np.exp(rows[:, col["log_photos"]])), 1))
    out = [verified, np.bincount(group, minlength=n_groups)[group], verified / photos]
    for k in kinds:
        p = rows[:, col[f"{k}.p"]].astype(np.float64)
        best = np.full(n_q, -np.inf)
        np.maximum.at(best, q, p)
        id_p = np.full(n_groups, -np.inf)
        np.maximum.at(id_p, group, np.where(alone, p, rows[:, col[f"{k}.id_p"]]))  # the table's id_p: a known one's
        first, second = _two_best(group_query, id_p, n_q)
        mine = id_p[group]
        other = np.where(mine >= first[q], second[q], first[q])
        out += [np.bincount(group, p, n_groups)[group], best[q] - p, mine - np.where(np.isfinite(other), other, mine)]
    names_out = ["id.verified", "id.shortlisted", "id.verified_share"] + [
        f"{k}.{c}" for k in kinds for c in ("id_sum_p", "gap", "id_margin")]
    return (np.stack(out, axis=1).astype(np.float32) if len(pairs) else np.zeros((0, len(names_out)), np.float32),
            names_out)


def pair_groups(pairs: np.ndarray, gallery_ids, open_label: str = NEW_WHALE) -> np.ndarray:
    """``[m] int64``: each pair's (query, individual) group of ``pairs`` ``[m, 2]``, numbered from 0 (a
    ``new_whale`` gallery photo an individual of its own)."""
    ids = np.asarray(gallery_ids, str)
    if not len(pairs):
        return np.zeros(0, np.int64)
    names, who = np.unique(ids, return_inverse=True)
    who = np.where(ids == open_label, len(names) + np.arange(len(ids)), who)[pairs[:, 1]]
    return np.unique(pairs[:, 0] * (len(names) + len(ids)) + who, return_inverse=True)[1].astype(np.int64)


def _two_best(query: np.ndarray, value: np.ndarray, n_q: int) -> tuple[np.ndarray, np.ndarray]:
    """``([n_q], [n_q])``: each query's best and second-best ``value`` over its entries (``query`` each entry's);
    -inf where it has fewer."""
    order = np.lexsort((-value, query))
    sq, sv = query[order], value[order]
    start = np.r_[True, sq[1:] != sq[:-1]] if len(sq) else np.zeros(0, bool)
    following = np.r_[False, start[:-1]] & ~start if len(sq) else start
    first, second = np.full(n_q, -np.inf), np.full(n_q, -np.inf)
    first[sq[start]], second[sq[following]] = sv[start], sv[following]
    return first, second


def check_rows(pairs: np.ndarray, rows: np.ndarray, columns: Sequence[str], gallery_ids, how: str = "pairs",
               open_label: str = NEW_WHALE) -> np.ndarray:
    """What the check fits and predicts on: ``how`` ``pairs``, the table's columns but :data:`NOT_FITTED`;
    ``individuals``, every column (the photo count too) and :func:`individual_columns` (only honest where the
    validation is thinned as the test is drawn: :mod:`whale.identify.config`)."""
    if how == "pairs":
        return rows[:, fitted_columns(columns)]
    if how != "individuals":
        raise ValueError(f"check_rows: expected pairs or individuals, received {how!r}")
    return np.concatenate([rows, individual_columns(pairs, rows, columns, gallery_ids, open_label)[0]], axis=1)


def ranks(scores: np.ndarray) -> np.ndarray:
    """``[n_q, n] int32``: each entry's rank in its row (0: the highest; ties by position)."""
    order = np.argsort(-np.asarray(scores, np.float32), axis=1, kind="stable")
    out = np.empty(order.shape, np.int32)
    np.put_along_axis(out, order, np.broadcast_to(np.arange(order.shape[1], dtype=np.int32), order.shape), axis=1)
    return out


def pairs_of(shortlist: Sequence[np.ndarray]) -> np.ndarray:
    """``[m, 2] int64`` (query, gallery photo) of every shortlisted pair, query by query."""
    sizes = [len(s) for s in shortlist]
    q = np.repeat(np.arange(len(shortlist), dtype=np.int64), sizes)
    g = np.concatenate([np.asarray(s, np.int64) for s in shortlist]) if sum(sizes) else np.zeros(0, np.int64)
    return np.stack([q, g], axis=1)


def pair_table(pairs: np.ndarray, kinds: Sequence[KindEvidence], runs: Sequence[np.ndarray], gallery_ids,
               open_label: str = NEW_WHALE, leave_out: np.ndarray | None = None, photos: bool = True) -> np.ndarray:
    """``[m, len(column_names)] float32``: the row of each pair of ``pairs`` ``[m, 2]`` (module docstring), from
    each kind's evidence and each run's ``[n_q, n_g]`` scores; ``gallery_ids`` ``[n_g]`` str; ``photos`` False:
    without ``log_photos``.

    ``leave_out``: ``[n_q] int``, the gallery photo each query is (-1: none), when the gallery's own photos are the
    queries (the catalogue's check, :mod:`whale.catalogue.joint`): each row is then what the gallery without its
    query gives, the query's own photo outside every rank and maximum. Such a table has no ``log_photos``: a count of
    the candidate's individual tells the label there (the query's own individual one photo short, or, counted whole,
    a one-photo individual never the same whale), as it never does for a new photo.

    Raises:
        ValueError: a pair of a query and its own photo; ``leave_out`` with ``photos``.
    """
    ids = np.asarray(gallery_ids, dtype=str)
    groups = IdGroups.of(ids, open_label)
    known = ids != open_label
    of_id = np.full(len(ids), -1, np.int64)  # each photo's individual, an index into groups.names
    of_id[known] = np.searchsorted(groups.names, ids[known])
    q, g = pairs[:, 0], pairs[:, 1]
    i = np.maximum(of_id[g], 0)
    own = None if leave_out is None else np.asarray(leave_out, np.int64)
    if own is not None and photos:
        raise ValueError("pair_table: a table of the gallery's own photos (leave_out) takes photos=False: the count "
                         "of the query's own individual would tell the label")
    if own is not None and (own[q] == g).any():
        raise ValueError(f"pair_table: {int((own[q] == g).sum())} pairs of a query and its own photo (leave_out)")
    columns = []

    def without_own(scores: np.ndarray) -> np.ndarray:  # each query's own photo below every other
        scores = np.asarray(scores, np.float32)
        if own is None or not (own >= 0).any():
            return scores
        scores = scores.copy()
        rows = np.flatnonzero(own >= 0)
        scores[rows, own[rows]] = -np.inf
        return scores

    def by_id(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        per_id = groups.max(scores)
        return per_id[q, i], np.log1p(ranks(per_id)[q, i])

    for k in kinds:
        id_p, id_rank = by_id(without_own(k.scores))
        columns += [k.scores[q, g], k.inliers[q, g], np.log1p(k.votes[q, g]),
                    np.log1p(ranks(without_own(k.votes))[q, g]), id_p, id_rank]
    for s in runs:
        s = without_own(s)
        id_s, id_rank = by_id(s)
        columns += [s[q, g], np.log1p(ranks(s)[q, g]), id_s, id_rank, s.max(axis=1)[q] - s[q, g]]
    if photos:
        count = np.bincount(of_id[of_id >= 0], minlength=len(groups.names))
        columns.append(np.log(np.where(known[g], np.maximum(count[i], 1), 1)))  # a new_whale photo: alone
    return np.stack([np.asarray(c, np.float32) for c in columns], axis=1) if len(pairs) else \
        np.zeros((0, len(columns)), np.float32)


class JointCheck:
    """The classifier of the pair table (module docstring): :meth:`fit` on validation, :meth:`predict` on test.

    Attributes:
        out_of_fold: ``[m] float64`` the validation pairs' cross-fitted P(same). pairs: ``(positives, negatives)``.
        seconds: ``fit`` wall time (the cross-fitting and the final fit).
    """

    def __init__(self, rounds: int = 200, leaf_nodes: int = 15, learning_rate: float = 0.05, folds: int = 5,
                 seed: int = 0):
        self.rounds, self.leaf_nodes, self.learning_rate = rounds, leaf_nodes, learning_rate
        self.folds, self.seed = folds, seed
        self.model = None
        self.out_of_fold = np.zeros(0)
        self.pairs = (0, 0)
        self.seconds: dict = {}

    @classmethod
    def of(cls, cfg) -> "JointCheck":
        """The check of a :class:`whale.identify.config.JointConfig`."""
        return cls(cfg.rounds, cfg.leaf_nodes, cfg.learning_rate, cfg.folds, cfg.seed)

    def _trees(self):
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(max_iter=self.rounds, max_leaf_nodes=self.leaf_nodes,
                                              learning_rate=self.learning_rate, random_state=self.seed)

    def fit(self, rows: np.ndarray, same: np.ndarray, query: np.ndarray, progress: bool = False,
            cross_fit: bool = True) -> "JointCheck":
        """Fit on ``rows`` ``[m, f]`` with labels ``same`` ``[m] bool``, ``query`` ``[m] int`` each row's query
        (the cross-fitting's groups); ``cross_fit`` False: no :attr:`out_of_fold` (left zeros), one fit.

        Raises:
            ValueError: no same-individual pair or no other pair (nothing to learn from).
        """
        same = np.asarray(same, bool)
        positives, negatives = int(same.sum()), int((~same).sum())
        if not positives or not negatives:
            raise ValueError(f"the joint check needs same-individual and other pairs among the validation queries' "
                             f"shortlists: {positives} and {negatives}")
        self.pairs = (positives, negatives)
        t0 = time.perf_counter()
        self.out_of_fold = (self.cross_predict(rows, same, query, progress=progress) if cross_fit
                            else np.zeros(len(rows)))
        self.model = self._trees().fit(rows, same)
        self.seconds["fit"] = time.perf_counter() - t0
        return self

    def cross_predict(self, rows: np.ndarray, same: np.ndarray, query: np.ndarray, other_rows: np.ndarray | None = None,
                      other_query: np.ndarray | None = None, progress: bool = False) -> np.ndarray:
        """``[m'] float64`` P(same) of ``other_rows`` (default ``rows``) predicted by trees that never saw their
        query: the query numbers dealt to :attr:`folds` groups by :attr:`seed` (the same deal for ``rows`` and
        ``other_rows``), each group's ``other_rows`` predicted by trees fitted on the other groups' ``rows``. A group
        whose training rows lack either label is left at zero. ``other_rows`` lets a check be fitted on one table and
        measured on another of the same queries (``benchmarks/flukes/joint_thin.py``: the original validation's
        pairs predicting its thinned copy's)."""
        same = np.asarray(same, bool)
        if other_rows is None:
            other_rows, other_query = rows, query
        n = int(max(np.max(query, initial=-1), np.max(other_query, initial=-1))) + 1
        fold = np.random.default_rng(self.seed).permutation(n) % self.folds
        out = np.zeros(len(other_rows))
        for f in range(self.folds):
            progress_line(f"joint check: fold {f + 1} of {self.folds} ({int(same.sum()):,} same-individual and "
                          f"{int((~same).sum()):,} other pairs)", progress)
            held, train = fold[other_query] == f, fold[query] != f
            if held.any() and same[train].any() and (~same[train]).any():
                out[held] = self._trees().fit(rows[train], same[train]).predict_proba(other_rows[held])[:, 1]
        return out

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """``[m] float64`` P(same whale) of each row."""
        if not len(rows):
            return np.zeros(0)
        return self.model.predict_proba(rows)[:, 1]


@dataclass
class PairTable:
    """A split's kept pair table (:func:`save_table`): ``pairs`` ``[m, 2]``, ``rows`` ``[m, f]``, ``fallback``
    ``[n_q, n_g]``, the ``columns``' names and the ``key`` of what it was verified from."""

    pairs: np.ndarray
    rows: np.ndarray
    fallback: np.ndarray
    columns: list[str]
    key: str


def save_table(path, pairs: np.ndarray, rows: np.ndarray, fallback: np.ndarray, columns: Sequence[str],
               key: str = ""):
    """Keep a split's pair table (``fallback`` stored as float16), read back by :func:`load_table`
    (``allow_pickle=False``); ``key`` names what it was verified from (:func:`whale.identify.score.verification_key`)."""
    from whale.core.files import atomic_write

    def write(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, pairs=pairs, rows=rows, fallback=np.asarray(fallback, np.float16),
                     columns=np.asarray(list(columns), dtype=str), key=np.asarray(key))

    return atomic_write(path, write)


def load_table(path) -> PairTable:
    """The :class:`PairTable` of :func:`save_table`'s file (``key`` empty for a table that recorded none)."""
    with np.load(path, allow_pickle=False) as z:
        return PairTable(z["pairs"], z["rows"], z["fallback"].astype(np.float32), [str(c) for c in z["columns"]],
                         str(z["key"]) if "key" in z.files else "")


def read_table(path, key: str) -> PairTable | None:
    """The table kept at ``path`` when it was verified from ``key`` and reads whole; None when there is none, it is
    of other settings or photos, or it cannot be read (verified again)."""
    import zipfile

    try:
        table = load_table(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if table.key != key or table.rows.shape != (len(table.pairs), len(table.columns)) or not np.isfinite(
            table.rows).all():
        return None
    return table


def identification_scores(pairs: np.ndarray, p: np.ndarray, gallery_ids, fallback: np.ndarray,
                          aggregate: str = "max", open_label: str = NEW_WHALE) -> np.ndarray:
    """``[n_q, n_g] float32`` scores of the toolkit's score files (module docstring).

    ``pairs`` ``[m, 2]`` (query, photo) with their P(same) ``p`` ``[m]``; ``fallback`` ``[n_q, n_g]`` in [0, 1): the
    order of the photos no source shortlisted (written times :data:`FLOOR`); ``aggregate``: ``max`` or ``noisy_or``.
    """
    out = (np.asarray(fallback, np.float64) * FLOOR).astype(np.float32)
    if not len(pairs):
        return out
    ids = np.asarray(gallery_ids, dtype=str)
    p = np.clip(np.asarray(p, np.float64), 2 * FLOOR, 1 - 1e-6)
    group = pair_groups(pairs, ids, open_label)
    if aggregate == "max":
        agg = np.zeros(group.max() + 1)
        np.maximum.at(agg, group, p)
    elif aggregate == "noisy_or":
        miss = np.zeros(group.max() + 1)
        np.add.at(miss, group, np.log1p(-p))
        agg = np.clip(-np.expm1(miss), 2 * FLOOR, 1 - 1e-6)
    else:
        raise ValueError(f"aggregate: expected max or noisy_or, received {aggregate!r}")
    value = agg[group]
    known = ids[pairs[:, 1]] != open_label
    out[pairs[known, 0], pairs[known, 1]] = value[known].astype(np.float32)
    return out
