"""The keypoint matcher: LNBNN votes over the whole gallery, geometric verification of the best, scores.

For each query photo (HotSpotter's pipeline, Crall et al. 2013, on RootSIFT):

0. (``select``; ``select.keep: 1`` turns it off) the query and every gallery photo keep only the keypoints that
   a classifier, fitted on the gallery's own verified matches between photos of one individual, expects such a
   match to verify (:mod:`whale.keypoints.selection`; water and captions go);
1. every query descriptor finds its ``k + 1`` nearest gallery descriptors (:mod:`whale.keypoints.index`);
   each of the first ``k`` votes for its photo with the LNBNN weight ``d_(k+1) - d_i`` (a descriptor close
   to one photo and far from the rest is evidence; one seen everywhere, such as water, is not), at most
   one vote per (query descriptor, photo);
2. the ``shortlist`` photos with the most votes are verified: their voting correspondences are fitted
   by a homography, affine or similarity transform (OpenCV USAC MAGSAC++ or RANSAC); the LNBNN weight of
   the inliers is the photo's evidence;
3. score = ``t / (t + scale), t = evidence + vote_weight * votes`` in [0, 1): the score files of the
   toolkit (:mod:`whale.inference.scorefile`), so the per-id maximum, the ``new_whale`` threshold and
   the ensemble treat it like a trained run's. The threshold on it is a threshold on verified evidence.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from whale.keypoints.config import KeypointConfig, VerifyConfig
from whale.keypoints.extract import Features, as_float
from whale.keypoints.index import DescriptorIndex
from whale.keypoints.selection import KeypointSelector
from whale.core.progress import progress_bar

_QUERY_BLOCK = 64  # query photos searched per FAISS call: large enough for its threads, small for memory


@dataclass
class MatchResult:
    """The matcher's output for ``n_q`` queries against ``n_g`` gallery photos.

    Attributes:
        scores: ``[n_q, n_g] float32`` in [0, 1): higher = more evidence of the same individual.
        inliers: ``[n_q, n_g] int32`` verified correspondences (0 where not verified).
        votes: ``[n_q, n_g] float32`` LNBNN vote per gallery photo.
        seconds: ``{"select", "search", "verify"}`` wall time (``select``: the queries' keypoints chosen).
    """

    scores: np.ndarray
    inliers: np.ndarray
    votes: np.ndarray
    seconds: dict


def normaliser(rows: np.ndarray, owner: np.ndarray, individual: np.ndarray | None, k: int) -> np.ndarray:
    """``[m] int64``: the neighbour (column of ``rows``) whose distance normalises each descriptor's votes.

    ``individual`` None: column ``k``, the ``k+1``-th neighbour (McCann & Lowe). Else HotSpotter's name rule:
    the first neighbour after the ``k`` voters whose individual (``individual[owner[row]]``) none of the
    voters has, so that an individual with many gallery photos does not normalise its own votes away; the
    last neighbour found when every searched one is one of theirs. A gallery without descriptors (``owner``
    empty: no neighbour found) gives column ``k`` too.
    """
    m, depth = rows.shape
    if individual is None or depth == k + 1 or not len(owner):
        return np.full(m, k, np.int64)
    ind = np.where(rows >= 0, individual[owner[np.maximum(rows, 0)]], -1)
    voters = ind[:, :k]
    other = np.ones((m, depth - k), bool)
    for j in range(k):
        other &= ind[:, k:] != voters[:, j:j + 1]
    found = rows[:, k:] >= 0
    other &= found
    last = k + np.where(found.any(axis=1), depth - k - 1 - np.argmax(found[:, ::-1], axis=1), 0)
    return np.where(other.any(axis=1), k + other.argmax(axis=1), last).astype(np.int64)


def lnbnn_votes(dist: np.ndarray, rows: np.ndarray, owner: np.ndarray, k: int, n_gallery: int,
                individual: np.ndarray | None = None):
    """One query photo's votes.

    Args:
        dist, rows: ``[m, d]`` neighbours of its ``m`` descriptors (:meth:`DescriptorIndex.search`), ``d > k``.
        owner: ``[N] int64`` gallery photo of each index row. k: voters per descriptor.
        n_gallery: gallery photos. individual: ``[n_gallery] int64`` individual of each gallery photo, for
            :func:`normaliser`'s name rule (None: the ``k+1``-th neighbour normalises).

    Returns:
        ``(votes [n_gallery] float32, feat [v], photo [v], row [v], weight [v])``: the votes summed per
        photo and the ``v`` kept votes (query descriptor, gallery photo, gallery row, weight), at most
        one per (descriptor, photo), the strongest.
    """
    m = len(dist)
    votes = np.zeros(n_gallery, np.float32)
    empty = np.zeros(0, np.int64)
    if m == 0 or not len(owner):  # no query descriptor, or a gallery without any: no vote
        return votes, empty, empty, empty, np.zeros(0, np.float32)
    norm = np.take_along_axis(dist, normaliser(rows, owner, individual, k)[:, None], axis=1)
    w = norm - dist[:, :k]
    r = rows[:, :k]
    ok = (r >= 0) & np.isfinite(w) & (w > 0)
    feat = np.repeat(np.arange(m, dtype=np.int64), k)[ok.ravel()]
    row = r.ravel()[ok.ravel()]
    weight = w.ravel()[ok.ravel()].astype(np.float32)
    photo = owner[row]
    key = feat * n_gallery + photo
    order = np.lexsort((-weight, key))
    first = np.ones(len(order), bool)
    first[1:] = key[order][1:] != key[order][:-1]
    keep = order[first]
    np.add.at(votes, photo[keep], weight[keep])
    return votes, feat[keep], photo[keep], row[keep], weight[keep]


def fit_geometry(src: np.ndarray, dst: np.ndarray, cfg: VerifyConfig) -> np.ndarray | None:
    """``[n] bool`` inliers of the transform of ``cfg.geometry`` from ``src`` to ``dst`` (``[n, 2] float32``
    pixels), or None when there are too few points or no transform fits."""
    import cv2

    if len(src) < cfg.min_matches:
        return None
    method = cv2.USAC_MAGSAC if cfg.robust == "magsac" else cv2.RANSAC
    if cfg.geometry == "homography":
        _, mask = cv2.findHomography(src, dst, method, cfg.reproj_px)
    elif cfg.geometry == "affine":
        _, mask = cv2.estimateAffine2D(src, dst, method=method, ransacReprojThreshold=cfg.reproj_px)
    else:  # OpenCV has no USAC estimator of a similarity: RANSAC whatever ``robust`` says
        _, mask = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=cfg.reproj_px)
    return None if mask is None else mask.ravel().astype(bool)


def evidence_to_score(evidence, votes, cfg: VerifyConfig) -> np.ndarray:
    """``t / (t + scale), t = evidence + vote_weight * votes`` as float32 (module docstring)."""
    total = np.asarray(evidence, np.float64) + cfg.vote_weight * np.asarray(votes, np.float64)
    return (total / (total + cfg.scale)).astype(np.float32)


@contextlib.contextmanager
def opencv_threads(n: int) -> Iterator[None]:
    """OpenCV's thread count set to ``n`` inside the block and restored after it (``cv2.setNumThreads`` is
    process-wide: a call must not leave it changed for the caller)."""
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(n)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


class KeypointMatcher:
    """A gallery of photos' features, matched against query photos' features.

    The constructor only indexes the gallery (with ``selector``'s keypoints when one is given); :meth:`build`
    also fits the selector the config asks for.

    Example:
        >>> m = KeypointMatcher.build(cfg, gallery_features, ids)   # doctest: +SKIP
        >>> result = m.match(query_features)                          # result.scores [n_q, n_g]
    """

    def __init__(self, cfg: KeypointConfig, gallery: Sequence[Features], ids: Sequence[str] | None = None,
                 selector: KeypointSelector | None = None, keys: Sequence | None = None, progress: bool = False):
        """``ids``: the gallery photos' individuals, for ``search.normaliser: other_individual`` (None: each
        photo counts as an individual of its own). ``selector``: a fitted
        :class:`~whale.keypoints.selection.KeypointSelector` (None: every keypoint kept), applied to this gallery
        as to queries, save the photos it learned from, given with their ``keys`` (one per gallery photo; None:
        every photo new to it), which keep their gallery selection
        (:meth:`~whale.keypoints.selection.KeypointSelector.select`). ``select_seconds``: the wall time of
        selection in all; ``select_steps``: of its steps when :meth:`build` fitted the selector (``index`` of
        every keypoint, ``labels``, ``fit``, ``score``: :attr:`KeypointSelector.seconds`)."""
        self.cfg = cfg
        gallery = list(gallery)
        if ids is not None and len(ids) != len(gallery):
            raise ValueError(f"ids: {len(ids)} individuals for {len(gallery)} gallery photos")
        self.individual = None
        if cfg.search.normaliser == "other_individual":
            self.individual = (np.arange(len(gallery), dtype=np.int64) if ids is None else
                               np.unique(np.asarray(ids, dtype=str), return_inverse=True)[1].astype(np.int64))
        t0 = time.perf_counter()
        self.selector = selector
        self.gallery = gallery
        self.select_steps: dict = {}
        if selector is not None and selector.active:
            self.gallery = selector.select(gallery, keys)
        self.select_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.index = DescriptorIndex(self.gallery, cfg.search, progress=progress)
        self.index_seconds = time.perf_counter() - t0

    @classmethod
    def build(cls, cfg: KeypointConfig, gallery: Sequence[Features], ids: Sequence[str] | None = None,
              keys: Sequence | None = None, progress: bool = False) -> "KeypointMatcher":
        """The matcher of ``gallery`` with the keypoint selection ``cfg.select`` asks for, its selector fitted here
        (:meth:`KeypointSelector.fit <whale.keypoints.selection.KeypointSelector.fit>` on the gallery matched
        against itself with every keypoint; none without ``ids`` or with ``select.keep: 1``) and kept as
        ``selector`` for other galleries and queries. ``keys``: the gallery photos' keys to the selector (None:
        their indices), by which a later gallery or :meth:`match` gives them again."""
        gallery = list(gallery)
        if cfg.select.keep >= 1 or ids is None:
            return cls(cfg, gallery, ids, progress=progress)
        keys = range(len(gallery)) if keys is None else keys
        t0 = time.perf_counter()
        full = cls(cfg, gallery, ids, progress=progress)  # every keypoint: the labels come from its matches
        steps = {"index": time.perf_counter() - t0}
        selector = KeypointSelector.fit(cfg.select, full, ids, keys, progress)
        steps.update(selector.seconds)
        if selector.active:
            matcher = cls(cfg, gallery, ids, selector=selector, keys=keys, progress=progress)
        else:  # every keypoint stays: the index of every keypoint serves
            matcher, full.selector, full.index_seconds = full, selector, 0.0
        matcher.select_seconds = time.perf_counter() - t0 - matcher.index_seconds
        matcher.select_steps = steps
        return matcher

    def match(self, queries: Sequence[Features], progress: bool = True, leave_out=None,
              on_verified=None, keys: Sequence | None = None) -> MatchResult:
        """Scores of every query photo against every gallery photo (module docstring).

        ``leave_out``: ``[n_q] int``, the gallery photo each query must not find (the query itself when the
        gallery is matched against itself; -1: none): its descriptors are skipped as neighbours. ``on_verified``:
        ``f(query, photo, query_keys, photo_keys)`` with the inlier keypoints of every verified candidate.
        ``keys``: the queries' keys to the selector (None: every query new to it; a photo of the gallery the
        selector learned from, given with its key, keeps its gallery selection).
        """
        with opencv_threads(1):  # one robust fit is small: threads cost more than they give
            return self._match(queries, progress, leave_out, on_verified, keys)

    def _match(self, queries, progress, leave_out, on_verified, keys) -> MatchResult:
        k, cfg_v = self.cfg.search.k, self.cfg.verify
        t0 = time.perf_counter()
        if self.selector is not None and self.selector.active:
            queries = self.selector.select(queries, keys)
        t_select = time.perf_counter() - t0
        nq, ng = len(queries), len(self.gallery)
        evidence = np.zeros((nq, ng), np.float32)
        inliers = np.zeros((nq, ng), np.int32)
        votes = np.zeros((nq, ng), np.float32)
        t_search = t_verify = 0.0
        depth = k + 1 + (self.cfg.search.extra if self.individual is not None else 0)
        bar = progress_bar(range(0, nq, _QUERY_BLOCK), desc=f"matching {nq} photos",
                           enabled=progress and nq > _QUERY_BLOCK)
        for start in bar:
            block = queries[start:start + _QUERY_BLOCK]
            t0 = time.perf_counter()
            counts = [len(f) for f in block]
            desc = np.concatenate([as_float(f.desc) for f in block]) if sum(counts) else np.zeros((0, 128), np.float32)
            if leave_out is None:
                dist, rows = self.index.search(desc, depth)
            else:  # one neighbour more, then the left-out photo's (or the last) dropped
                dist, rows = self.index.search(desc, depth + 1)
                skip = np.repeat(np.asarray(leave_out)[start:start + len(block)], counts)
                own = self.index.owner[np.maximum(rows, 0)] == skip[:, None]
                order = np.argsort(own, axis=1, kind="stable")[:, :depth]
                dist, rows = np.take_along_axis(dist, order, 1), np.take_along_axis(rows, order, 1)
            t1 = time.perf_counter()
            t_search += t1 - t0
            offsets = np.concatenate([[0], np.cumsum(counts)])
            for j, q in enumerate(block):
                i = start + j
                sl = slice(offsets[j], offsets[j + 1])
                v, feat, photo, row, weight = lnbnn_votes(dist[sl], rows[sl], self.index.owner, k, ng,
                                                          self.individual)
                if leave_out is not None and leave_out[i] >= 0:
                    v[leave_out[i]] = 0  # its other keypoints may still be among a descriptor's neighbours
                votes[i] = v
                report = None if on_verified is None else (lambda c, qk, gk, i=i: on_verified(i, c, qk, gk))
                self._verify(q, v, feat, photo, row, weight, evidence[i], inliers[i], cfg_v, report)
            t_verify += time.perf_counter() - t1
        scores = evidence_to_score(evidence, votes, cfg_v)
        return MatchResult(scores, inliers, votes, {"select": t_select, "search": t_search, "verify": t_verify})

    def _verify(self, q: Features, v, feat, photo, row, weight, evidence_row, inlier_row, cfg: VerifyConfig,
                report=None) -> None:
        if cfg.shortlist == 0 or not len(photo):
            return
        n = min(cfg.shortlist, int((v > 0).sum()))
        if n == 0:
            return
        cand = np.argpartition(-v, n - 1)[:n] if n < len(v) else np.arange(len(v))
        order = np.argsort(photo, kind="stable")
        sorted_photo = photo[order]
        for c in cand:
            lo, hi = np.searchsorted(sorted_photo, [c, c + 1])
            sel = order[lo:hi]
            if len(sel) < cfg.min_matches:
                continue
            g = self.gallery[c]
            mask = fit_geometry(q.xy[feat[sel]], g.xy[self.index.local[row[sel]]], cfg)
            if mask is None:
                continue
            evidence_row[c] = weight[sel][mask].sum()
            inlier_row[c] = int(mask.sum())
            if report is not None:
                report(int(c), feat[sel][mask], self.index.local[row[sel]][mask])


def pair_matches(fq: Features, fg: Features, cfg: KeypointConfig, ratio: float = 0.85):
    """The verified correspondences of two photos, for showing a person what the matcher saw.

    Mutual nearest neighbours passing Lowe's ratio test, fitted like a candidate (``cfg.verify``).

    Returns:
        ``(q_xy [n, 2], g_xy [n, 2])`` float32 inlier positions in the two original photos (n may be 0).
    """
    none = (np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32))
    if len(fq) < 2 or len(fg) < 2:
        return none
    a, b = as_float(fq.desc), as_float(fg.desc)
    d2 = np.maximum((a * a).sum(1)[:, None] - 2 * a @ b.T + (b * b).sum(1)[None], 0)
    two = np.argpartition(d2, 1, axis=1)[:, :2]
    pd = np.take_along_axis(d2, two, axis=1)
    swap = pd[:, 0] > pd[:, 1]
    best = np.where(swap, two[:, 1], two[:, 0])
    d_best, d_second = np.minimum(pd[:, 0], pd[:, 1]), np.maximum(pd[:, 0], pd[:, 1])
    ok = (d_best < ratio * ratio * d_second) & (d2.argmin(axis=0)[best] == np.arange(len(a)))
    qi = np.flatnonzero(ok)
    mask = fit_geometry(fq.xy[qi], fg.xy[best[qi]], cfg.verify)
    if mask is None:
        return none
    return fq.xy[qi[mask]], fg.xy[best[qi[mask]]]
