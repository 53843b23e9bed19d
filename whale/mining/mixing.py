"""A remedy for when hard negatives hurt: some of an epoch's mined negatives swapped for random ones.

Algorithm 1 gives every image one negative partner per epoch, the harder the smaller K. With a
model that does not rank well yet, or on ids whose confusions do not carry over, the hardest
partners can be noise. ``negatives_mix: s`` in a config keeps Algorithm 1 and replaces a share
``s`` of each epoch's negative pairs (chosen uniformly) by a partner of a different id drawn
uniformly, so an epoch trains on hard and random negatives together. ``s = 0`` is the paper.
"""
from __future__ import annotations

import numpy as np

from whale.core.arrays import id_codes


def mix_random_negatives(negatives: np.ndarray, ids, share: float, rng: np.random.Generator) -> np.ndarray:
    """``negatives`` with ``round(share * q)`` rows' partners replaced by random different-id images.

    Args:
        negatives: ``(q, 2)`` int pairs of image indices with different ids (one epoch of mining).
        ids: ``[n]`` labels of the images the indices refer to (at least two distinct ids).
        share: in ``[0, 1]``; 0 returns a copy of ``negatives``.
        rng: draws which rows change and their new partners.

    Returns:
        ``(q, 2)`` int64: the first column unchanged; in the chosen rows the second column is a
        uniformly random index whose id differs from the first column's.

    Raises:
        ValueError: ``share`` outside ``[0, 1]``, a badly shaped ``negatives``, or one id only.
    """
    if not 0.0 <= float(share) <= 1.0:
        raise ValueError(f"share: expected a number in [0, 1], received {share!r}")
    neg = np.array(negatives, dtype=np.int64, copy=True)
    if neg.ndim != 2 or neg.shape[1] != 2:
        raise ValueError(f"negatives: expected shape (q, 2), received {neg.shape}")
    codes = id_codes(ids)
    if len(np.unique(codes)) < 2:
        raise ValueError("ids: random negatives need at least two distinct ids")
    rows = rng.choice(len(neg), size=int(round(share * len(neg))), replace=False)
    for r in rows:  # rejection sampling: the partner's id must differ (expected < 2 draws)
        while True:
            j = int(rng.integers(len(codes)))
            if codes[j] != codes[neg[r, 0]]:
                neg[r, 1] = j
                break
    return neg
