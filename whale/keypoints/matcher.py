"""The keypoint matcher: LNBNN votes over the whole gallery, geometric verification of the best, scores.

For each query photo (HotSpotter's pipeline, Crall et al. 2013, on RootSIFT):

0. (``select``; ``select.keep: 1`` turns it off) the query and every gallery photo keep only the keypoints that
   a classifier, fitted on the gallery's own verified matches between photos of one individual, expects such a
   match to verify (:mod:`whale.keypoints.selection`; water and captions go);
1. every query descriptor finds its ``k + 1`` nearest gallery descriptors (:mod:`whale.keypoints.index`);
   each of the first ``k`` votes for its photo with the LNBNN weight ``d_(k+1) - d_i`` (a descriptor close
   to one photo and far from the rest is evidence; one seen everywhere, such as water, is not), at most
   one vote per (query descriptor, photo) (:mod:`whale.keypoints.votes`);
2. the ``shortlist`` photos with the most votes are verified: their voting correspondences are fitted
   by a homography, affine or similarity transform (OpenCV USAC MAGSAC++ or RANSAC); the LNBNN weight of
   the inliers is the photo's evidence (:mod:`whale.keypoints.verify`);
3. score = ``t / (t + scale), t = evidence + vote_weight * votes`` in [0, 1): the score files of the
   toolkit (:mod:`whale.inference.scorefile`), so the per-id maximum, the ``new_whale`` threshold and
   the ensemble treat it like a trained run's. The threshold on it is a threshold on verified evidence
   (:mod:`whale.keypoints.scoring`).

With ``check.both_ways``, each gallery photo is also matched against the queries (the queries indexed, steps 1-2
the other way round: the 2019 4th place's transposed score matrix) and the two directions' evidence summed; with a
``check.model``, a classifier fitted on the gallery's own pairs scores each verified candidate from what
verification saw, both ways when asked (:mod:`whale.keypoints.check`, :mod:`whale.keypoints.pairstats`).

This module orchestrates: the three rules are parts (:class:`MatchParts`) built once from the config and
handed to the matcher. The display's correspondences of two photos: :func:`whale.keypoints.pairs.pair_matches`.
The query photos are searched in blocks (FAISS's own threads), and a block's queries voted and verified on
:attr:`KeypointMatcher.threads` threads (OpenCV's robust fits let go of Python's lock), each writing only its own
rows and its described pairs and callbacks taken in query order: any number of threads gives one thread's result.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from whale import NEW_WHALE
from whale.keypoints.check import MatchCheck
from whale.keypoints.config import KeypointConfig
from whale.keypoints.extract import Features, as_float
from whale.keypoints.index import DescriptorIndex
from whale.keypoints.pairstats import NAMES, share_of_best
from whale.keypoints.scoring import EvidenceScore
from whale.keypoints.selection import KeypointSelector, labelled_photos
from whale.keypoints.store import default_workers
from whale.keypoints.verify import GeometricVerifier, opencv_threads
from whale.keypoints.votes import LnbnnVotes
from whale.core.progress import progress_bar

_QUERY_BLOCK = 64  # query photos searched per FAISS call: large enough for its threads, small for memory
_DEEP_ENTRIES = 1 << 21
"""Neighbour entries (descriptors times depth) :func:`search_without` holds per FAISS call: a deeper search takes
fewer descriptors at a time (a photo matched against a gallery holding it, a dense photo's alike keypoints, drives
the depth into the thousands), about 60 MB of distances, rows and order."""


@dataclass
class VerifiedPairs:
    """Every verified (query, gallery photo) candidate of a match and what verification saw of it.

    Attributes:
        index: ``[m, 2] int64`` (query, gallery photo). rows: ``[m, len(pairstats.NAMES)] float32``
            (:func:`whale.keypoints.pairstats.pair_row`, ``evidence_share`` filled in).
    """

    index: np.ndarray
    rows: np.ndarray


@dataclass
class MatchResult:
    """The matcher's output for ``n_q`` queries against ``n_g`` gallery photos.

    Attributes:
        scores: ``[n_q, n_g] float32`` in [0, 1): higher = more evidence of the same individual.
        inliers: ``[n_q, n_g] int32`` verified correspondences (0 where not verified).
        votes: ``[n_q, n_g] float32`` LNBNN vote per gallery photo.
        seconds: ``{"select", "search", "verify"}`` wall time (``select``: the queries' keypoints chosen).
        pairs: the verified candidates described (:class:`VerifiedPairs`), when asked for or a check scored them.
    """

    scores: np.ndarray
    inliers: np.ndarray
    votes: np.ndarray
    seconds: dict
    pairs: VerifiedPairs | None = None


@dataclass(frozen=True)
class MatchParts:
    """The matcher's rules: the LNBNN ``votes``, the geometric ``verifier`` and the ``score`` of the evidence."""

    votes: LnbnnVotes
    verifier: GeometricVerifier
    score: EvidenceScore

    @classmethod
    def of(cls, cfg: KeypointConfig) -> "MatchParts":
        """The parts ``cfg`` describes (``search`` for the votes, ``verify`` for verification and the score)."""
        return cls(LnbnnVotes.of(cfg.search), GeometricVerifier(cfg.verify), EvidenceScore.of(cfg.verify))


class KeypointMatcher:
    """A gallery of photos' features, matched against query photos' features.

    The constructor only indexes the gallery (with ``selector``'s keypoints when one is given); :meth:`build`
    also fits the selector the config asks for.

    Example:
        >>> m = KeypointMatcher.build(cfg, gallery_features, ids)   # doctest: +SKIP
        >>> result = m.match(query_features)                          # result.scores [n_q, n_g]
    """

    def __init__(self, cfg: KeypointConfig, gallery: Sequence[Features], ids: Sequence[str] | None = None,
                 selector: KeypointSelector | None = None, keys: Sequence | None = None, progress: bool = False,
                 parts: MatchParts | None = None, check: MatchCheck | None = None, threads: int | None = None):
        """``ids``: the gallery photos' individuals, for ``search.normaliser: other_individual`` (None: each
        photo counts as an individual of its own). ``selector``: a fitted
        :class:`~whale.keypoints.selection.KeypointSelector` (None: every keypoint kept), applied to this gallery
        as to queries, save the photos it learned from, given with their ``keys`` (one per gallery photo; None:
        every photo new to it), which keep their gallery selection
        (:meth:`~whale.keypoints.selection.KeypointSelector.select`). ``select_seconds``: the wall time of
        selection in all; ``select_steps``: of its steps when :meth:`build` fitted the selector (``index`` of
        every keypoint, ``labels``, ``fit``, ``score``: :attr:`KeypointSelector.seconds`). ``parts``: the rules
        (None: :meth:`MatchParts.of` ``cfg``). ``check``: a fitted :class:`~whale.keypoints.check.MatchCheck`
        that scores the verified candidates (None: the evidence score). ``threads``: query photos verified at once
        (None: every core this process may use; the scores are the same with any number)."""
        self.cfg = cfg
        self.threads = default_workers() if threads is None else int(threads)
        if self.threads < 1:
            raise ValueError(f"threads: expected an integer >= 1, received {threads}")
        self.parts = MatchParts.of(cfg) if parts is None else parts
        self.check = check
        gallery = list(gallery)
        if ids is not None and len(ids) != len(gallery):
            raise ValueError(f"ids: {len(ids)} individuals for {len(gallery)} gallery photos")
        self.individual = self.parts.votes.individuals(ids, len(gallery))
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
              keys: Sequence | None = None, progress: bool = False, open_label: str = NEW_WHALE,
              strict: bool = False) -> "KeypointMatcher":
        """The matcher of ``gallery`` with the keypoint selection ``cfg.select`` asks for, its selector fitted here
        (:meth:`KeypointSelector.fit <whale.keypoints.selection.KeypointSelector.fit>` on the gallery matched
        against itself with every keypoint; none without ``ids`` or with ``select.keep: 1``) and kept as
        ``selector`` for other galleries and queries. ``keys``: the gallery photos' keys to the selector (None:
        their indices), by which a later gallery or :meth:`match` gives them again. ``open_label``: the format's
        label of a gallery photo whose individual is unknown (:attr:`whale.formats.Format.open_label`): the
        selector never pairs it. ``strict``: the check learns from the gallery's photos each left out as
        :meth:`match`'s ``strict`` leaves them (:meth:`fit_check`)."""
        gallery = list(gallery)
        parts = MatchParts.of(cfg)
        if cfg.select.keep >= 1 or ids is None:
            return cls(cfg, gallery, ids, progress=progress, parts=parts).fit_check(ids, open_label, progress, strict)
        keys = range(len(gallery)) if keys is None else keys
        t0 = time.perf_counter()
        if cfg.select.among == "sample":  # the labelled photos' every keypoint, matched against each other
            labelled = labelled_photos(ids, cfg.select.photos, cfg.select.seed, open_label)
            sample = cls(cfg, [gallery[i] for i in labelled], np.asarray(ids, dtype=str)[labelled],
                         progress=progress, parts=parts)
            steps = {"index": time.perf_counter() - t0}
            selector = KeypointSelector.fit(cfg.select, sample, ids, keys, progress, open_label, gallery=gallery)
            del sample
            full = None
        else:
            full = cls(cfg, gallery, ids, progress=progress, parts=parts)  # every keypoint: labels from its matches
            steps = {"index": time.perf_counter() - t0}
            selector = KeypointSelector.fit(cfg.select, full, ids, keys, progress, open_label)
        steps.update(selector.seconds)
        if full is not None and not selector.active:  # every keypoint stays: the index of every keypoint serves
            matcher, full.selector, full.index_seconds = full, selector, 0.0
        else:  # the index of every keypoint (or the sample's) goes before the gallery's selected one is built
            del full
            matcher = cls(cfg, gallery, ids, selector=selector, keys=keys, progress=progress, parts=parts)
        matcher.select_seconds = time.perf_counter() - t0 - matcher.index_seconds
        matcher.select_steps = steps
        return matcher.fit_check(ids, open_label, progress, strict)

    def fit_check(self, ids, open_label: str = NEW_WHALE, progress: bool = False,
                  strict: bool = False) -> "KeypointMatcher":
        """This matcher with the check ``cfg.check`` asks for (:class:`~whale.keypoints.check.MatchCheck`) fitted
        on its gallery (each photo left out as :meth:`match`'s ``strict`` says) and kept as :attr:`check` (none
        without ``ids`` or with ``check.model: none``)."""
        if self.cfg.check.model != "none" and ids is not None:
            self.check = MatchCheck.fit(self.cfg.check, self, ids, open_label, progress, strict)
        return self

    def match(self, queries: Sequence[Features], progress: bool = True, leave_out=None,
              on_verified=None, keys: Sequence | None = None, selected: bool = False,
              describe: bool = False, also: Sequence[np.ndarray] | None = None, strict: bool = False) -> MatchResult:
        """Scores of every query photo against every gallery photo (module docstring).

        ``leave_out``: ``[n_q] int``, the gallery photo each query must not find (the query itself when the
        gallery is matched against itself; -1: none): its descriptors are skipped as neighbours. ``on_verified``:
        ``f(query, photo, query_keys, photo_keys)`` with the inlier keypoints of every verified candidate.
        ``keys``: the queries' keys to the selector (None: every query new to it; a photo of the gallery the
        selector learned from, given with its key, keeps its gallery selection). ``selected``: the queries' keypoints
        are already chosen (this gallery's own photos): none is dropped. ``describe``: also return every verified
        candidate's :class:`VerifiedPairs` (always done when a :attr:`check` scores them). ``also``: per query, ``[c]
        int`` gallery photos verified besides its own vote shortlist (other sources' candidates,
        :mod:`whale.identify`; with ``check.both_ways``, each such photo also verifies that query on the way back).
        ``strict`` (with ``leave_out``): every neighbour of the left-out photo dropped, as if it were not in the
        gallery (:func:`search_without`); without it one neighbour more is searched and one dropped, and a photo's
        other descriptors, many alike in a dense photo, may still fill its neighbour lists and weaken its votes for
        every other photo.
        """
        describe = describe or (self.check is not None and self.check.active)
        with opencv_threads(1):  # one robust fit is small: threads cost more than they give
            return self._match(queries, progress, leave_out, on_verified, keys, selected, describe, also, strict)

    def votes(self, queries: Sequence[Features], progress: bool = True, keys: Sequence | None = None,
              leave_out=None, strict: bool = False) -> np.ndarray:
        """``[n_q, n_g] float32``: each query's LNBNN votes for every gallery photo (its keypoints selected as
        :meth:`match` selects them), nothing verified: a shortlist for the other sources of :mod:`whale.identify`.
        ``leave_out``, ``strict``: as :meth:`match`'s (the gallery's own photos as queries: each one's own photo gets
        no vote)."""
        if self.selector is not None and self.selector.active:
            queries = self.selector.select(queries, keys)
        return _sweep(self.parts, queries, self.gallery, self.index, self.individual, leave_out, None, False, progress,
                      {}, verify=False, strict=strict, threads=self.threads).votes

    def _match(self, queries, progress, leave_out, on_verified, keys, selected, describe, also,
               strict=False) -> MatchResult:
        t0 = time.perf_counter()
        if self.selector is not None and self.selector.active and not selected:
            queries = self.selector.select(queries, keys)
        seconds = {"select": time.perf_counter() - t0}
        way = _sweep(self.parts, queries, self.gallery, self.index, self.individual, leave_out, on_verified, describe,
                     progress, seconds, also=also, strict=strict, threads=self.threads)
        evidence, pairs = way.evidence, way.pairs
        if self.cfg.check.both_ways and leave_out is None and len(queries) and len(self.gallery):
            t0 = time.perf_counter()  # each gallery photo matched against the queries (the transposed matrix)
            back = _sweep(self.parts, self.gallery, queries, DescriptorIndex(queries, self.cfg.search, searched_by=len(self.index)), None, None,
                          None, describe, progress, seconds, threads=self.threads,
                          also=None if also is None else reverse(also, len(self.gallery)))
            seconds["both_ways"] = time.perf_counter() - t0
            evidence = evidence + back.evidence.T
            if describe:
                pairs = two_sided(pairs, transposed(back.pairs))
        elif describe and self.cfg.check.both_ways:  # the gallery's own photos against it: a pair's reverse is a pair
            pairs = two_sided(pairs, transposed(pairs) if leave_out is None else turned(pairs, leave_out))
        scores = self.parts.score(evidence, way.votes)
        if describe and self.check is not None and self.check.active:
            scores = self.check.scores(scores, pairs)
        return MatchResult(scores, way.inliers, way.votes, seconds, pairs)


@dataclass
class _Way:
    """One direction of a match: evidence, inliers and votes ``[n_q, n_g]`` and the described verified pairs."""

    evidence: np.ndarray
    inliers: np.ndarray
    votes: np.ndarray
    pairs: VerifiedPairs | None


def reverse(also: Sequence[np.ndarray], n_gallery: int) -> list[np.ndarray]:
    """``also`` (per query, ``[c] int`` gallery photos) turned round: per gallery photo, ``[c] int64`` the queries
    that listed it."""
    sizes = [len(a) for a in also]
    query = np.repeat(np.arange(len(also), dtype=np.int64), sizes)
    photo = np.concatenate([np.asarray(a, np.int64) for a in also]) if sum(sizes) else np.zeros(0, np.int64)
    order = np.argsort(photo, kind="stable")
    bounds = np.searchsorted(photo[order], np.arange(n_gallery + 1))
    return [query[order[bounds[g]:bounds[g + 1]]] for g in range(n_gallery)]


def search_without(index: DescriptorIndex, desc: np.ndarray, depth: int, skip: np.ndarray) -> tuple[np.ndarray,
                                                                                                    np.ndarray]:
    """``(dist, rows)`` ``[m, depth]``: the ``depth`` nearest gallery rows of each descriptor of ``desc`` ``[m, w]``
    that are not of gallery photo ``skip`` ``[m]`` (-1: none), as :meth:`DescriptorIndex.search` gives them in a
    gallery without that photo (-1 and ``inf`` where fewer remain). An exact index leaves that photo's rows out of
    its distances (one search, as deep as any); a FAISS one is searched deeper, twice as deep each time, for the
    descriptors whose nearest rows are mostly their own photo's (a dense photo's neighbouring keypoints look alike)."""
    if index.exact:
        return index.search(desc, depth, skip=skip)
    m = len(desc)
    dist = np.full((m, depth), np.inf, np.float32)
    rows = np.full((m, depth), -1, np.int64)
    todo = np.arange(m)
    k = depth + 1
    while len(todo):
        step = max(1, _DEEP_ENTRIES // k)  # each descriptor's search is its own: in parts, the same rows
        left = [part[~_deepest(index, desc, part, k, depth, skip, dist, rows)]
                for part in np.array_split(todo, -(-len(todo) // step))]
        todo = np.concatenate(left)
        k = min(2 * k, len(index))
    return dist, rows


def _deepest(index: DescriptorIndex, desc: np.ndarray, todo: np.ndarray, k: int, depth: int, skip: np.ndarray,
             dist: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """One round of :func:`search_without` for the descriptors ``todo``, searched ``k`` deep: those that found
    ``depth`` rows of other photos (or searched the whole index) written into ``dist`` and ``rows``; returns which
    (``[len(todo)] bool``)."""
    d, r = index.search(desc[todo], k)
    other = (r >= 0) & (index.owner[np.maximum(r, 0)] != skip[todo, None])
    done = (other.sum(axis=1) >= depth) | (k >= len(index))
    order = np.argsort(~other, axis=1, kind="stable")[:, :depth]  # the other photos' rows, nearest first
    keep = np.take_along_axis(other, order, 1)
    dist[todo[done]] = np.where(keep, np.take_along_axis(d, order, 1), np.inf)[done]
    rows[todo[done]] = np.where(keep, np.take_along_axis(r, order, 1), -1)[done]
    return done


def _neighbours(index: DescriptorIndex, desc: np.ndarray, depth: int, skip: np.ndarray | None,
                strict: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(dist, rows)`` ``[m, depth]``: the nearest gallery rows of each of ``desc`` ``[m, w]``, none of gallery photo
    ``skip`` ``[m]`` (the descriptor's left-out photo, -1: none; None: nothing left out); ``strict`` as
    :meth:`KeypointMatcher.match`'s."""
    if skip is None:
        return index.search(desc, depth)
    if strict:  # every neighbour of the left-out photo dropped: as if it were not in the gallery
        return search_without(index, desc, depth, skip)
    dist, rows = index.search(desc, depth + 1)  # one neighbour more, then the left-out photo's (or the last) dropped
    own = index.owner[np.maximum(rows, 0)] == skip[:, None]
    order = np.argsort(own, axis=1, kind="stable")[:, :depth]
    return np.take_along_axis(dist, order, 1), np.take_along_axis(rows, order, 1)


def _sweep(parts: MatchParts, queries, gallery, index: DescriptorIndex, individual, leave_out, on_verified,
           describe: bool, progress: bool, seconds: dict, also=None, verify: bool = True,
           strict: bool = False, threads: int = 1) -> _Way:
    """Votes and verification of every query photo against ``gallery`` (indexed by ``index``), the wall time of
    search and verification added to ``seconds``; the arguments as :meth:`KeypointMatcher.match`'s (``verify``
    False: the votes only; ``threads``: the queries of a searched block voted and verified by this many threads,
    the result the same as by one)."""
    votes_of, verifier = parts.votes, parts.verifier
    nq, ng = len(queries), len(gallery)
    evidence = np.zeros((nq, ng), np.float32)
    inliers = np.zeros((nq, ng), np.int32)
    votes = np.zeros((nq, ng), np.float32)
    t_search = t_verify = 0.0
    described: list[tuple[int, int, np.ndarray]] = []
    depth = votes_of.depth(individual)
    bar = progress_bar(range(0, nq, _QUERY_BLOCK), desc=f"matching {nq} photos", enabled=progress and nq > _QUERY_BLOCK)
    # OpenCV's robust fits let go of Python's lock: a block's queries verified in threads, each writing its own rows
    with ThreadPoolExecutor(threads) if threads > 1 and nq > 1 else contextlib.nullcontext() as pool:
        for start in bar:
            block = queries[start:start + _QUERY_BLOCK]
            t0 = time.perf_counter()
            counts = [len(f) for f in block]
            desc = np.concatenate([as_float(f.desc) for f in block])  # [0, w] when no photo of the block has any
            skip = None if leave_out is None else np.repeat(np.asarray(leave_out)[start:start + len(block)], counts)
            dist, rows = _neighbours(index, desc, depth, skip, strict)
            t1 = time.perf_counter()
            t_search += t1 - t0
            offsets = np.concatenate([[0], np.cumsum(counts)])

            def one(j: int) -> tuple[list | None, list | None]:
                """The block's ``j``-th query voted and verified: its rows of ``votes``, ``evidence`` and ``inliers``
                written (no other query's), its described candidates and ``on_verified`` calls returned in order."""
                i = start + j
                sl = slice(offsets[j], offsets[j + 1])
                v, feat, photo, row, weight = votes_of(dist[sl], rows[sl], index.owner, ng, individual)
                if leave_out is not None and leave_out[i] >= 0:
                    v[leave_out[i]] = 0  # its other keypoints may still be among a descriptor's neighbours
                votes[i] = v
                if not verify:
                    return None, None
                calls: list | None = None if on_verified is None else []
                seen: list | None = [] if describe else None
                verifier.verify(block[j], gallery, index.local, v, feat, photo, row, weight, evidence[i], inliers[i],
                                None if calls is None else (lambda *args: calls.append(args)), seen,
                                None if also is None else also[i])
                return seen, calls

            done = pool.map(one, range(len(block))) if pool is not None else map(one, range(len(block)))
            for j, (seen, calls) in enumerate(done):  # in query order, however the threads ran
                for c, qk, gk in calls or ():
                    on_verified(start + j, c, qk, gk)
                if seen:
                    table = share_of_best(np.stack([r for _, r in seen]))
                    described.extend((start + j, c, r) for (c, _), r in zip(seen, table))
            t_verify += time.perf_counter() - t1
    seconds["search"] = seconds.get("search", 0.0) + t_search
    seconds["verify"] = seconds.get("verify", 0.0) + t_verify
    pairs = None
    if describe:
        pairs = VerifiedPairs(np.array([(i, c) for i, c, _ in described], np.int64).reshape(-1, 2),
                              np.array([r for _, _, r in described], np.float32).reshape(-1, len(NAMES)))
    return _Way(evidence, inliers, votes, pairs)


def transposed(pairs: VerifiedPairs) -> VerifiedPairs:
    """``pairs`` of a match of the gallery against the queries, indexed (query, gallery photo) as the forward's."""
    return VerifiedPairs(pairs.index[:, ::-1].copy(), pairs.rows)


def turned(pairs: VerifiedPairs, leave_out) -> VerifiedPairs:
    """``pairs`` of a match whose query ``i`` is the gallery's own photo ``leave_out[i]`` (-1: none), read the other
    way round: the row of (query ``i``, photo ``c``) as the reverse direction of (the query that is photo ``c``, photo
    ``leave_out[i]``), for the pairs whose photo is one of the queries. The transpose (:func:`transposed`) when the
    queries are the whole gallery in order; a subset of it (the catalogue's left-out photos,
    :mod:`whale.catalogue.calibration`) keeps its indices within its own queries."""
    leave_out = np.asarray(leave_out, np.int64)
    q, c = pairs.index[:, 0], pairs.index[:, 1]
    size = max(int(leave_out.max(initial=-1)), int(c.max(initial=-1))) + 1
    query_of = np.full(size, -1, np.int64)  # each gallery photo's query, -1: not a query
    own = np.flatnonzero(leave_out >= 0)
    query_of[leave_out[own]] = own
    keep = (query_of[c] >= 0) & (leave_out[q] >= 0)
    return VerifiedPairs(np.stack([query_of[c[keep]], leave_out[q[keep]]], axis=1).reshape(-1, 2),
                         pairs.rows[keep])


def two_sided(forward: VerifiedPairs, backward: VerifiedPairs) -> VerifiedPairs:
    """Every pair verified in either direction, its row the forward's columns then the backward's (zeros where that
    direction did not verify it): ``check.both_ways``'s rows."""
    width = forward.rows.shape[1]
    keys = np.unique(np.concatenate([forward.index, backward.index]), axis=0).reshape(-1, 2)
    rows = np.zeros((len(keys), 2 * width), np.float32)
    at = {tuple(k): n for n, k in enumerate(keys.tolist())}
    for side, part in enumerate((forward, backward)):
        if len(part.index):
            where = np.array([at[tuple(k)] for k in part.index.tolist()], np.int64)
            rows[where, side * width:(side + 1) * width] = part.rows
    return VerifiedPairs(keys.astype(np.int64), rows)
