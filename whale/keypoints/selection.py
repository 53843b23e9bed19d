"""Keypoint selection: each photo keeps the keypoints that look like those matched between photos of one whale.

Most of a 300 px fluke photo's SIFT keypoints lie on water, spray or the typed caption of a scanned catalogue
card, and vote for other whales' photos (docs/humpback.md). The gallery's own identities say which keypoints
carry an identity, with no other training data (the idea of Hartmann, Havlena & Schindler 2014, "Predicting
matchability", who learn from the descriptor which keypoints structure-from-motion will match):

1. **labels** (:func:`verified_labels`): a seeded sample of ``photos`` gallery photos, whole individuals with
   two or more photos (:func:`labelled_photos`), is matched against the gallery by the matcher, every keypoint,
   each photo left out of its own neighbours; the inliers of every verified candidate of the same individual
   (at least ``min_inliers``) are positive, every other keypoint of a sampled photo negative. The labels are
   what the matcher itself verifies between photos of one whale; a photo without another of its whale has none
   to give, and the classifier needs far fewer keypoints than a large gallery holds;
2. **classifier**: scikit-learn's gradient-boosted trees on the keypoint's descriptor, its place in
   the photo and its log diameter (:func:`keypoint_context`; no pixel is read again), fitted on a seeded
   sample of ``samples`` of those keypoints in two halves by individual: a gallery photo is scored by the half
   that did not see its individual (no photo's own labels decide what it keeps), a query by both halves' mean;
3. **selection**: every photo, gallery and query, keeps its ``keep`` share of keypoints by score (at least
   ``least``, all of a photo with fewer). A gallery photo given again, as a query or in another gallery, with
   its key (its index in the gallery the selector was fitted on, or the key the caller fitted it under), keeps
   its gallery selection, so one fitted selector also serves a larger gallery that holds its own: the test
   gallery around a validation fold's (:mod:`whale.inference.keypoints`).

The caller fits the selector (:meth:`KeypointSelector.fit`, on a matcher of the gallery with every keypoint)
and hands it to the matcher it builds; :meth:`whale.keypoints.matcher.KeypointMatcher.build` does both.

``select.keep: 1`` turns it off. A gallery without enough same-individual matches to learn from (fewer than
:data:`MIN_POSITIVES` positive keypoints, a catalogue of one photo per whale, a gallery without identities)
keeps every keypoint, and :attr:`KeypointSelector.reason` says why. A gallery photo labelled with the format's
open label (``open_label``, :attr:`whale.formats.Format.open_label`; ``new_whale`` by default) or with no label
names no individual and is never paired.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from whale import NEW_WHALE
from whale.core.progress import progress_bar, progress_line
from whale.keypoints.config import SelectConfig
from whale.keypoints.extract import Features, as_float

PREDICT_ROWS = 100_000
"""Keypoints scored in one call of the classifier: a call per photo (~1,000 keypoints) costs twice as much."""
MIN_POSITIVES = 200
"""Positive keypoints (verified same-individual inliers) below which no classifier is fitted."""


CONTEXT = 6
"""Numbers of :func:`keypoint_context` besides the descriptor's."""


def keypoint_context(f: Features) -> np.ndarray:
    """``[n, w + 6] float32``: each keypoint's descriptor (``w`` numbers, :func:`~whale.keypoints.extract.as_float`:
    128 for RootSIFT, 64 for XFeat), its x and y over the photo's width and height, its x and y within the span of
    the photo's keypoints (1st to 99th percentile: about where the photo's content lies, letterboxed or not), that
    span's width over its height, and log(1 + diameter)."""
    if not len(f):
        return np.zeros((0, f.desc.shape[1] + CONTEXT), np.float32)
    h, w = f.photo_size if len(f.photo_size) == 2 and min(f.photo_size) > 0 else (1, 1)
    lo, hi = np.percentile(f.xy, 1, axis=0), np.percentile(f.xy, 99, axis=0)
    span = np.maximum(hi - lo, 1.0)
    aspect = np.full((len(f), 1), span[0] / span[1])
    return np.hstack([as_float(f.desc), f.xy / np.float32([w, h]), (f.xy - lo) / span, aspect,
                      np.log1p(f.diameter_angle[:, :1])]).astype(np.float32)


def predict(models, photos: Sequence[Features], progress: bool = False, what: str = "") -> list[np.ndarray]:
    """``[n_i] float`` per photo: the mean over ``models`` of the probability that a keypoint is one a same-whale
    match verifies, predicted for consecutive photos together, about :data:`PREDICT_ROWS` keypoints a call
    (``progress``: a bar over the calls, named ``what``)."""
    counts = np.array([len(f) for f in photos], dtype=np.int64)
    ends = np.cumsum(counts)
    spans = []
    start = 0
    while start < len(photos):
        before = ends[start] - counts[start]  # keypoints of the photos already scored
        stop = max(start + 1, int(np.searchsorted(ends, before + PREDICT_ROWS, side="right")))
        spans.append((start, stop, before))
        start = stop
    out: list[np.ndarray] = []
    desc = f"keypoint selection: scoring {int(counts.sum()):,} keypoints of {what}"
    for start, stop, before in progress_bar(spans, desc=desc, enabled=progress and len(spans) > 1):
        if ends[stop - 1] == before:  # photos without keypoints
            out.extend(np.zeros(0) for _ in range(start, stop))
        else:
            context = np.concatenate([keypoint_context(f) for f in photos[start:stop]])
            p = np.mean([m.predict_proba(context)[:, 1] for m in models], axis=0)
            out.extend(np.split(p, np.cumsum(counts[start:stop])[:-1]))
    return out


def unknown_labels(open_label: str = NEW_WHALE) -> frozenset:
    """The gallery labels that name no individual: the format's ``open_label`` and the empty label."""
    return frozenset({open_label, ""})


def verified_labels(matcher, ids, min_inliers: int, photos=None, progress: bool = False,
                    open_label: str = NEW_WHALE) -> list[np.ndarray]:
    """``[n_i] bool`` per gallery photo of ``matcher`` (:class:`~whale.keypoints.matcher.KeypointMatcher`):
    its keypoints that are inliers of a verified match to another photo of its individual (module docstring),
    found by matching the gallery photos ``photos`` (indices; None: every photo) against the gallery; photos
    labelled ``open_label`` or ``""`` are never paired."""
    ids = np.asarray(ids, dtype=str)
    unknown = unknown_labels(open_label)
    photos = np.arange(len(ids)) if photos is None else np.asarray(photos, dtype=np.int64)
    labels = [np.zeros(len(f), bool) for f in matcher.gallery]

    def record(q, c, query_keys, photo_keys):
        i = photos[q]
        if ids[i] == ids[c] and ids[i] not in unknown and len(query_keys) >= min_inliers:
            labels[i][query_keys] = True
            labels[c][photo_keys] = True

    matcher.match([matcher.gallery[i] for i in photos], progress=progress, leave_out=photos, on_verified=record)
    return labels


def paired_photos(ids, open_label: str = NEW_WHALE) -> np.ndarray:
    """``[n] bool``: the photos whose individual (not ``open_label`` nor ``""``) has another photo among ``ids``."""
    ids = np.asarray(ids, dtype=str)
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    return (counts[inverse] >= 2) & ~np.isin(ids, sorted(unknown_labels(open_label)))


def labelled_photos(ids, photos: int, seed: int, open_label: str = NEW_WHALE) -> np.ndarray:
    """Sorted indices of the :func:`paired_photos` that give the labels: every one (``photos`` 0 or at least
    their number), else whole individuals in a seeded order until ``photos`` are reached, so that each sampled
    photo's same-whale matches are all among the sample."""
    ids = np.asarray(ids, dtype=str)
    paired = np.flatnonzero(paired_photos(ids, open_label))
    if photos == 0 or len(paired) <= photos:
        return paired
    return paired[whole_individuals(ids[paired], photos, seed)]


def whole_individuals(names, photos: int, seed: int) -> np.ndarray:
    """``[n] bool``: the photos (``names`` ``[n]``, each one's individual) of whole individuals taken in a seeded
    order until ``photos`` are reached (the last one whole, so a few more)."""
    unique, member, per_name = np.unique(np.asarray(names, dtype=str), return_inverse=True, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(unique))
    chosen = np.zeros(len(unique), bool)
    chosen[order[:int(np.searchsorted(np.cumsum(per_name[order]), photos)) + 1]] = True
    return chosen[member.ravel()]


class KeypointSelector:
    """Which keypoints each photo keeps, learned from a gallery and its identities (module docstring).

    Attributes:
        models: the two halves' classifiers (none: not :attr:`active`, every keypoint kept; ``reason`` says why).
        seconds: ``labels``, ``fit`` (the two classifiers), ``score`` (every gallery keypoint): wall time of
            :meth:`fit`'s steps.

    Example:
        >>> full = KeypointMatcher(cfg.without_selection(), gallery, ids)    # doctest: +SKIP
        >>> sel = KeypointSelector.fit(cfg.select, full, ids)                # doctest: +SKIP
        >>> kept_gallery = sel.gallery()                                      # doctest: +SKIP
        >>> kept_queries = sel.select(queries)                                # doctest: +SKIP
    """

    def __init__(self, cfg: SelectConfig, gallery: Sequence[Features], keys: Sequence | None = None,
                 models: Sequence = (), gallery_scores: Sequence[np.ndarray] | None = None, reason: str = "",
                 seconds: dict | None = None, progress: bool = False):
        """A selector from its parts (:meth:`fit` makes them): the ``gallery`` it learned from, its photos'
        ``keys`` (None: their indices), the ``models`` and each gallery photo's keypoint scores by the half that
        did not learn from it (``gallery_scores``, ``[n_i] float`` per photo)."""
        self.cfg = cfg
        self.progress = progress
        self.models = list(models)
        self.reason = reason
        self.seconds = dict(seconds or {})
        self._gallery = list(gallery)
        self._gallery_scores = None if gallery_scores is None else list(gallery_scores)
        keys = range(len(self._gallery)) if keys is None else list(keys)
        if len(keys) != len(self._gallery):
            raise ValueError(f"keys: {len(keys)} keys for {len(self._gallery)} gallery photos")
        self._member = {key: i for i, key in enumerate(keys)}
        self.memo: dict | None = None
        """Scores of photos new to the gallery by their key, kept when set to a dict (keys that name a photo's
        content, as :class:`~whale.keypoints.selectcache.SelectorCache` gives: a photo is scored once)."""

    def state(self) -> dict:
        """What :meth:`from_state` needs besides the gallery: models, the gallery's scores, reason, seconds and
        the :attr:`memo`."""
        return {"models": self.models, "gallery_scores": self._gallery_scores, "reason": self.reason,
                "seconds": self.seconds, "memo": self.memo}

    @classmethod
    def from_state(cls, cfg: SelectConfig, gallery: Sequence[Features], keys: Sequence | None, state: dict,
                   progress: bool = False) -> "KeypointSelector":
        """The selector :meth:`state` described, of the same ``gallery`` under the same ``keys``."""
        selector = cls(cfg, gallery, keys, state["models"], state["gallery_scores"], state["reason"],
                       state["seconds"], progress)
        selector.memo = state.get("memo")
        return selector

    @classmethod
    def fit(cls, cfg: SelectConfig, matcher, ids, keys: Sequence | None = None,
            progress: bool = False, open_label: str = NEW_WHALE,
            gallery: Sequence[Features] | None = None) -> "KeypointSelector":
        """Learn from the gallery of ``matcher`` (a :class:`~whale.keypoints.matcher.KeypointMatcher` with every
        keypoint indexed and no selector) and its photos' individuals ``ids`` which keypoints to keep.

        ``keys``: one hashable per gallery photo by which :meth:`select` recognises it when given again (the
        caller's index of the photo; None: its index in this gallery). ``open_label``: the format's label of a
        photo whose individual is unknown (:attr:`whale.formats.Format.open_label`), never paired.
        ``gallery`` (``select.among: sample``): the whole gallery, ``ids`` its photos' individuals, when
        ``matcher`` indexes only its :func:`labelled_photos` (in their order, as :meth:`KeypointMatcher.build
        <whale.keypoints.matcher.KeypointMatcher.build>` makes it for ``select.among: sample``):
        they are matched against each other alone.
        """
        from sklearn.ensemble import HistGradientBoostingClassifier

        sampled = gallery is not None
        gallery = list(matcher.gallery if gallery is None else gallery)
        seconds: dict = {}

        def made(models=(), scores=None, reason=""):
            return cls(cfg, gallery, keys, models, scores, reason, seconds, progress)

        t0 = time.perf_counter()
        labelled = labelled_photos(ids, cfg.photos, cfg.seed, open_label)
        progress_line(f"keypoint selection: labels from the verified same-whale matches of {len(labelled)} photos "
                      f"against " + ("each other" if sampled else f"the gallery's {len(gallery)}"), progress)
        if sampled:
            if len(matcher.gallery) != len(labelled):
                raise ValueError(f"KeypointSelector.fit: the sample's matcher holds {len(matcher.gallery)} photos, "
                                 f"the labelled photos are {len(labelled)}")
            found = verified_labels(matcher, np.asarray(ids, dtype=str)[labelled], cfg.min_inliers, None, progress,
                                    open_label)
            labels = [np.zeros(len(f), bool) for f in gallery]
            for i, y in zip(labelled, found):
                labels[i] = y
        else:
            labels = verified_labels(matcher, ids, cfg.min_inliers, labelled, progress, open_label)
        seconds["labels"] = time.perf_counter() - t0
        positives = int(sum(y.sum() for y in labels))
        if positives < MIN_POSITIVES:
            return made(reason=f"{positives} keypoints verified between photos of one individual, fewer than "
                               f"{MIN_POSITIVES}: every keypoint kept")
        t1 = time.perf_counter()
        _, individual = np.unique(np.asarray(ids, dtype=str), return_inverse=True)
        half = individual % 2  # alternate individuals in sorted order: halves independent of the photos' order
        rng = np.random.default_rng(cfg.seed)
        models = []
        for h in (0, 1):  # the inputs are made per photo when needed: the whole gallery's would take GBs
            train = labelled[half[labelled] == h]
            y = np.concatenate([labels[i] for i in train]) if len(train) else np.zeros(0, bool)
            if y.all() or not y.any():
                return made(reason=f"half {h} of the individuals (every other one by name) has no keypoint of each "
                                   f"kind to learn from: every keypoint kept")
            x = np.concatenate([keypoint_context(gallery[i]) for i in train])
            take = rng.choice(len(x), min(len(x), cfg.samples), replace=False)
            progress_line(f"keypoint selection: fitting classifier {h + 1} of 2 on {len(take):,} keypoints", progress)
            model = HistGradientBoostingClassifier(max_iter=200, max_leaf_nodes=31, random_state=cfg.seed)
            models.append(model.fit(x[take], y[take]))
            del x
        t2 = time.perf_counter()
        seconds["fit"] = t2 - t1
        gallery_scores = [np.zeros(0)] * len(gallery)
        for h in (0, 1):
            own = np.flatnonzero(half == h)
            scores = predict(models[1 - h:2 - h], [gallery[i] for i in own], progress,
                             f"the gallery (half {h + 1} of 2)")
            for i, p in zip(own, scores):
                gallery_scores[i] = p
        seconds["score"] = time.perf_counter() - t2
        return made(models, gallery_scores)

    @property
    def active(self) -> bool:
        return bool(self.models)

    def keep(self, f: Features, scores: np.ndarray) -> Features:
        """``f`` with its ``keep`` share of keypoints by ``scores`` (at least ``least``), in their order."""
        n = len(f)
        count = min(n, max(int(np.ceil(self.cfg.keep * n)), self.cfg.least))
        if count == n:
            return f
        kept = np.sort(np.argsort(-scores, kind="stable")[:count])
        return f.take(kept)

    def gallery(self) -> list[Features]:
        """The gallery's photos, each scored by the half of the classifier that did not learn from it."""
        if not self.active:
            return self._gallery
        return [self.keep(f, s) for f, s in zip(self._gallery, self._gallery_scores)]

    def select(self, photos: Sequence[Features], keys: Sequence | None = None) -> list[Features]:
        """Photos, each with its best keypoints (all of them when the selector is not active).

        ``keys``: one per photo (None: every photo new): a photo whose key is one of the gallery's it learned from
        (:meth:`fit`) keeps that photo's :meth:`gallery` selection, any other is scored by both halves.
        """
        if not self.active:
            return list(photos)
        photos = list(photos)
        keys = [None] * len(photos) if keys is None else list(keys)
        if len(keys) != len(photos):
            raise ValueError(f"keys: {len(keys)} keys for {len(photos)} photos")
        member = [self._member.get(key) for key in keys]
        memo = {} if self.memo is None else self.memo
        new = [i for i, m in enumerate(member)  # a remembered score per keypoint, else scored again
               if m is None and (keys[i] is None or keys[i] not in memo or len(memo[keys[i]]) != len(photos[i]))]
        predicted = dict(zip(new, predict(self.models, [photos[i] for i in new], self.progress,
                                          f"{len(new)} new photos")))
        if self.memo is not None:
            self.memo.update((keys[i], p) for i, p in predicted.items() if keys[i] is not None)
        return [self.keep(f, self._gallery_scores[m] if m is not None else
                          predicted[i] if i in predicted else memo[keys[i]])
                for i, (f, m) in enumerate(zip(photos, member))]
