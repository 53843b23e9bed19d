"""LNBNN votes: each query descriptor's nearest gallery descriptors vote for their photos (HotSpotter's step 1).

Each of a query descriptor's ``k`` nearest gallery descriptors votes for its photo with the weight
``d_norm - d_i`` (McCann & Lowe 2012): a descriptor close to one photo and far from the rest is evidence, one
seen everywhere, such as water, is not. ``d_norm`` is the ``k+1``-th neighbour's distance, or with
``search.normaliser: other_individual`` HotSpotter's name rule (:func:`normaliser`). At most one vote per
(query descriptor, photo), the strongest. :class:`LnbnnVotes` is the rule built once from the config
(:class:`~whale.keypoints.config.SearchConfig`) and handed to the matcher.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whale.keypoints.config import SearchConfig


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
        owner: ``[N] int32`` gallery photo of each index row. k: voters per descriptor.
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


@dataclass(frozen=True)
class LnbnnVotes:
    """The vote of :func:`lnbnn_votes` with ``k`` voters per descriptor; ``extra`` more neighbours searched for
    the name rule when ``by_individual`` (``search.normaliser: other_individual``), else the ``k+1``-th
    neighbour normalises.

    Example:
        >>> votes = LnbnnVotes.of(cfg.search)                                  # doctest: +SKIP
        >>> v, feat, photo, row, weight = votes(dist, rows, owner, n_gallery, votes.individuals(ids, n_gallery))
    """

    k: int = 4
    extra: int = 4
    by_individual: bool = True

    @classmethod
    def of(cls, cfg: SearchConfig) -> "LnbnnVotes":
        return cls(k=cfg.k, extra=cfg.extra, by_individual=cfg.normaliser == "other_individual")

    def individuals(self, ids: Sequence[str] | None, n_gallery: int) -> np.ndarray | None:
        """``[n_gallery] int64`` individual of each gallery photo for the name rule (``ids`` None: each photo an
        individual of its own), or None when the ``k+1``-th neighbour normalises."""
        if not self.by_individual:
            return None
        if ids is None:
            return np.arange(n_gallery, dtype=np.int64)
        return np.unique(np.asarray(ids, dtype=str), return_inverse=True)[1].astype(np.int64)

    def depth(self, individual: np.ndarray | None) -> int:
        """Neighbours to search per query descriptor: the ``k`` voters, the next one, and ``extra`` more for the
        name rule (``individual`` not None)."""
        return self.k + 1 + (self.extra if individual is not None else 0)

    def __call__(self, dist: np.ndarray, rows: np.ndarray, owner: np.ndarray, n_gallery: int,
                 individual: np.ndarray | None = None):
        """One query photo's votes: :func:`lnbnn_votes` with this rule's ``k``."""
        return lnbnn_votes(dist, rows, owner, self.k, n_gallery, individual)
