"""Positive pairs: inside every id with at least two images, a uniformly random derangement.

No image is paired with itself (the reference code's defect); the derangement is drawn by
rejection sampling of permutations. The caller drops ``new_whale`` (its images are different
whales) before calling.
"""

from __future__ import annotations

import numpy as np

from whale.core.arrays import id_codes


def positive_pairs(ids, rng: np.random.Generator) -> np.ndarray:
    """Positive pairs: a uniform random derangement inside each id with >= 2 images.

    Args:
        ids: ``[n]`` labels of any dtype.
        rng: the generator.

    Returns:
        ``(m, 2)`` int64, ``m`` = number of images whose id holds >= 2 images, sorted by the
        first column. Every such image is first element once and second element once, never
        paired with itself; ids with one image give no pair.
    """
    codes = id_codes(ids)
    if len(codes) == 0:
        return np.empty((0, 2), dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    sizes = np.diff(np.r_[starts, len(codes)])
    parts = []
    for s in np.unique(sizes[sizes >= 2]):
        members = order[starts[sizes == s][:, None] + np.arange(s)]  # [groups, s]
        perm = np.empty(members.shape, dtype=np.int64)
        todo = np.arange(len(members))
        while len(todo):
            # Uniform permutations; keep those without fixed points -> uniform derangements.
            p = np.argsort(rng.random((len(todo), s)), axis=1)
            ok = (p != np.arange(s)).all(axis=1)
            perm[todo[ok]] = p[ok]
            todo = todo[~ok]
        partner = np.take_along_axis(members, perm, axis=1)
        parts.append(np.stack([members.ravel(), partner.ravel()], axis=1))
    if not parts:
        return np.empty((0, 2), dtype=np.int64)
    pairs = np.concatenate(parts).astype(np.int64)
    return pairs[np.argsort(pairs[:, 0], kind="stable")]
