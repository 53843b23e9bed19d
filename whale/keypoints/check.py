"""A learned check of each verified match: P(same individual) from what verification saw (``check.model: gbm``).

The evidence score (:mod:`whale.keypoints.scoring`) ranks a verified candidate by one number, the LNBNN weight
of its inliers. A photo of water or a caption can gather inliers too; a true match's inliers spread over the
fluke under a plausible transform. The 2019 competition's 4th place fed each homography's statistics to a
gradient-boosted classifier; so does this check, with no other training data than the gallery's identities:

1. **pairs**: the gallery is matched against itself (each photo left out of its own neighbours), every verified
   candidate described by :func:`whale.keypoints.pairstats.pair_row` and labelled same individual or not (a
   photo whose individual has no other photo in the gallery gives only negatives, as a new whale does);
2. **classifier**: scikit-learn's gradient-boosted trees on those rows;
3. **score**: a query's verified candidate scores the classifier's probability, an unverified one
   ``UNVERIFIED`` times the evidence score of its votes (below every verified one, still ordered by votes).

The matcher holds the fitted check (:meth:`whale.keypoints.matcher.KeypointMatcher.build` fits it after the
keypoint selection; ``whale score --fold K`` fits it on the fold's gallery and the test reuses it, as the
selector). Too few pairs of each kind (fewer than :data:`MIN_PAIRS`) and no classifier is fitted: the evidence
score stays, and :attr:`MatchCheck.reason` says why.
"""
from __future__ import annotations

import time

import numpy as np

from whale import NEW_WHALE
from whale.core.progress import progress_line
from whale.keypoints.config import CheckConfig
from whale.keypoints.selection import whole_individuals

MIN_PAIRS = 20
"""Verified candidates of each kind (same individual, another) below which no classifier is fitted."""
UNVERIFIED = 1e-3
"""An unverified candidate's score: this times its evidence score (votes only), below the verified ones'."""


class MatchCheck:
    """The fitted check (module docstring): :meth:`fit` on a matcher of the gallery, :meth:`scores` on a match.

    Attributes:
        model: the classifier (None: not :attr:`active`; ``reason`` says why): scikit-learn's, or its trees read back
            from a store (:class:`whale.core.trees.TreeEnsemble`, the same probabilities).
        pairs: ``(positives, negatives)`` it was fitted on. seconds: ``match``, ``fit`` wall time (of its fit).
    """

    def __init__(self, cfg: CheckConfig, model=None, reason: str = "", pairs=(0, 0), seconds: dict | None = None):
        self.cfg, self.model, self.reason, self.pairs = cfg, model, reason, tuple(pairs)
        self.seconds = dict(seconds or {})
        self.kept = ""
        """The file it was read back from (:mod:`whale.keypoints.selectcache`), else empty: fitted here."""

    @property
    def active(self) -> bool:
        return self.model is not None

    @classmethod
    def fit(cls, cfg: CheckConfig, matcher, ids, open_label: str = NEW_WHALE, progress: bool = False,
            strict: bool = False) -> "MatchCheck":
        """The check learned from ``matcher``'s gallery (a :class:`~whale.keypoints.matcher.KeypointMatcher`,
        its keypoints selected as it matches) matched against itself, each photo left out of its own row
        (``strict``: as :meth:`~whale.keypoints.matcher.KeypointMatcher.match`'s), with its photos' individuals
        ``ids``; photos labelled ``open_label`` or ``""`` are never a same-individual pair. ``cfg.photos``: only
        :func:`check_photos` matched, only the pairs among them fitted on."""
        ids = np.asarray(ids, dtype=str)
        t0 = time.perf_counter()
        sample = check_photos(ids, cfg.photos, cfg.seed, open_label)
        among = "" if len(sample) == len(ids) else f" ({len(sample)} of them, whole individuals)"
        progress_line(f"match check: the gallery's {len(ids)} photos{among} matched against it", progress)
        pairs = matcher.match([matcher.gallery[i] for i in sample], progress=progress, leave_out=sample,
                              selected=True, describe=True, strict=strict).pairs
        seconds = {"match": time.perf_counter() - t0}
        query, photo, rows = sample[pairs.index[:, 0]], pairs.index[:, 1], pairs.rows
        if len(sample) < len(ids):  # a pair with an unsampled photo has no way back: its row would say otherwise
            within = np.isin(photo, sample)
            query, photo, rows = query[within], photo[within], rows[within]
        y = (ids[query] == ids[photo]) & ~np.isin(ids[query], [open_label, ""])
        positives, negatives = int(y.sum()), int((~y).sum())
        if min(positives, negatives) < MIN_PAIRS:
            return cls(cfg, reason=f"{positives} verified same-individual and {negatives} other pairs in the gallery, "
                                   f"fewer than {MIN_PAIRS} of each: the evidence score stays", pairs=(positives, negatives),
                       seconds=seconds)
        t1 = time.perf_counter()
        progress_line(f"match check: fitting on {positives:,} same-individual and {negatives:,} other pairs", progress)
        model = _trees(cfg).fit(rows, y)
        seconds["fit"] = time.perf_counter() - t1
        return cls(cfg, model, pairs=(positives, negatives), seconds=seconds)

    def out_of_fold(self, scores: np.ndarray, pairs, same: np.ndarray, groups: np.ndarray, folds: int = 5,
                    seed: int = 0) -> np.ndarray:
        """``[n_q, n_g] float32``: ``scores`` (this check's :meth:`scores` of a match whose queries it learned from:
        the gallery's own photos, each left out of its own row) with every verified pair of ``pairs`` scored again
        by trees that never saw its query's group: fitted as :meth:`fit` fits, on ``pairs``' rows of the other
        ``folds`` groups (``groups`` ``[m]``, e.g. the query's individual, so a pair's reverse, of one individual,
        is held out with it; ``same`` ``[m] bool`` the labels). A fold whose other groups hold no pair of one kind
        keeps the fitted check's probabilities. Unverified pairs keep theirs (below every verified one); an inactive
        check returns ``scores`` as they are.

        Why: trees score the pairs they were fitted on more confidently than a new photo's, so a second check fitted
        on these scores (:mod:`whale.catalogue.joint`) would trust them as it never can on new photos.
        """
        out = np.array(scores, np.float32)
        if not self.active or not len(pairs.rows):
            return out
        same = np.asarray(same, bool)
        _, group = np.unique(np.asarray(groups), return_inverse=True)
        fold = np.random.default_rng(seed).permutation(group.max() + 1)[group] % folds
        for f in range(folds):
            held = fold == f
            train = ~held
            if not held.any() or not same[train].any() or same[train].all():
                continue
            p = _trees(self.cfg).fit(pairs.rows[train], same[train]).predict_proba(pairs.rows[held])[:, 1]
            out[pairs.index[held, 0], pairs.index[held, 1]] = np.clip(p, UNVERIFIED, 1 - 1e-6)
        return out

    def scores(self, base: np.ndarray, pairs) -> np.ndarray:
        """``[n_q, n_g] float32``: the verified candidates of ``pairs``
        (:class:`~whale.keypoints.matcher.VerifiedPairs`) scored by the classifier, every other one ``UNVERIFIED``
        times its evidence score ``base`` (module docstring)."""
        out = (np.asarray(base, np.float64) * UNVERIFIED).astype(np.float32)
        if self.active and len(pairs.rows):
            p = self.model.predict_proba(pairs.rows)[:, 1]
            out[pairs.index[:, 0], pairs.index[:, 1]] = np.clip(p, UNVERIFIED, 1 - 1e-6)
        return out


def check_photos(ids, photos: int, seed: int, open_label: str = NEW_WHALE) -> np.ndarray:
    """Sorted indices of the gallery photos (``ids`` their individuals) the check matches against the gallery:
    every one (``photos`` 0 or at least their number), else whole individuals in a seeded order until ``photos``
    are reached (a photo labelled ``open_label`` or ``""`` is an individual of its own), so that every photo of
    a sampled individual, and each of its same-whale pairs, is in the sample."""
    ids = np.asarray(ids, dtype=str)
    if photos == 0 or len(ids) <= photos:
        return np.arange(len(ids))
    unnamed = np.isin(ids, [open_label, ""])
    return np.flatnonzero(whole_individuals(np.where(unnamed, np.char.add("\0", np.arange(len(ids)).astype(str)), ids),
                                            photos, seed))


def _trees(cfg: CheckConfig):
    """The check's classifier, unfitted: scikit-learn's gradient-boosted trees of ``cfg``."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_iter=cfg.rounds, max_leaf_nodes=31, learning_rate=0.05,
                                          random_state=cfg.seed)
