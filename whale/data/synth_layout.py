"""The synthetic competition's layout: how many images each id gets, and which images go where.

Part of :mod:`whale.data.synth` (no pixels here). The images per id follow the real Kaggle 2019
long tail (:data:`REAL_IMAGES_PER_ID`), scaled to the number of ids by stratified quantiles; the
shares of ``new_whale`` rows in train and test are the real ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whale import NEW_WHALE
from whale.core.errors import WhaleError

# Real Kaggle 2019 train.csv: number of images per known id -> number of ids with that many
# (5,004 ids, 15,697 images; new_whale excluded).
REAL_IMAGES_PER_ID: dict[int, int] = {
    1: 2073, 2: 1285, 3: 568, 4: 273, 5: 172, 6: 136, 7: 86, 8: 76, 9: 62, 10: 46,
    11: 39, 12: 26, 13: 14, 14: 16, 15: 19, 16: 16, 17: 17, 18: 6, 19: 8, 20: 7,
    21: 7, 22: 5, 23: 4, 24: 7, 25: 2, 27: 1, 29: 2, 30: 3, 31: 3, 32: 1,
    33: 1, 34: 2, 35: 1, 36: 1, 37: 3, 40: 3, 45: 2, 47: 1, 48: 1, 49: 1,
    50: 1, 51: 1, 54: 1, 57: 1, 61: 1, 62: 1, 65: 1, 73: 1,
}
# Real shares: 9,664 new_whale train rows per 15,697 known ones; test has 7,960 rows of
# which ~27.6% are new_whale, so ~5,763 known test rows per 15,697 known train rows.
NEW_PER_KNOWN_TRAIN = 9664 / 15697
TEST_KNOWN_PER_KNOWN_TRAIN = 7960 * (1 - 0.276) / 15697
TEST_NEW_SHARE = 0.276


def sample_counts(n_ids: int, rng: np.random.Generator) -> np.ndarray:
    """Draw images-per-id for ``n_ids`` known ids from the real long tail.

    Stratified quantiles: id ``i`` gets the real distribution's quantile at
    ``(i + U(0,1)) / n_ids``, then the counts are shuffled. This keeps the tail shape even for
    a handful of ids (many ids with 1-2 images, a few with many). At least ``min(n_ids, 2)``
    ids get 4 or more images so that the 4-fold rules have something to split.

    Returns: ``int64`` array ``[n_ids]``, every value >= 1.
    """
    if n_ids < 1:
        raise WhaleError(f"sample_counts: expected n_ids >= 1, received {n_ids}")
    values = np.array(sorted(REAL_IMAGES_PER_ID), dtype=np.int64)
    weights = np.array([REAL_IMAGES_PER_ID[v] for v in values], dtype=np.float64)
    cdf = np.cumsum(weights) / weights.sum()
    u = (np.arange(n_ids) + rng.random(n_ids)) / n_ids
    idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(values) - 1)
    counts = values[idx]
    need = min(n_ids, 2)
    order = np.argsort(-counts, kind="stable")
    counts[order[:need]] = np.maximum(counts[order[:need]], 4)
    return rng.permutation(counts)


def unique_hex(rng: np.random.Generator, n: int, digits: int, taken: set[str]) -> list[str]:
    """``n`` distinct lowercase hex strings of ``digits`` digits not in ``taken`` (updated)."""
    out: list[str] = []
    while len(out) < n:
        for v in rng.integers(0, 16**digits, size=n - len(out), dtype=np.int64):
            s = f"{int(v):0{digits}x}"
            if s not in taken:
                taken.add(s)
                out.append(s)
    return out


@dataclass(frozen=True)
class Sighting:
    image: str  # file name, "0a1b2c3d.jpg"
    split: str  # "train" | "test"
    key: str  # 7-hex key of the individual (its pattern seed)
    label: str  # "w_<key>" or NEW_WHALE


def plan_sightings(n_ids: int, rng: np.random.Generator) -> list[Sighting]:
    """Decide every image: its name, split, individual and label (no pixels yet)."""
    counts = sample_counts(n_ids, rng)
    n_known_train = int(counts.sum())
    n_test_known = max(1, int(round(TEST_KNOWN_PER_KNOWN_TRAIN * n_known_train)))
    # Test sightings of known ids go to ids in proportion to their train images (+0.5 so
    # ids with one train image are seen in test too, as in the real data).
    p = (counts + 0.5) / (counts + 0.5).sum()
    test_counts = rng.multinomial(n_test_known, p)
    n_new_train = int(round(NEW_PER_KNOWN_TRAIN * n_known_train))
    n_new_test = max(1, int(round(TEST_NEW_SHARE / (1 - TEST_NEW_SHARE) * n_test_known)))

    taken: set[str] = set()
    keys = unique_hex(rng, n_ids + n_new_train + n_new_test, 7, taken)
    n_images = n_known_train + n_test_known + n_new_train + n_new_test
    names = [f"{h}.jpg" for h in unique_hex(rng, n_images, 8, set())]

    plan: list[Sighting] = []
    it = iter(names)
    for key, n_tr, n_te in zip(keys[:n_ids], counts, test_counts):
        plan += [Sighting(next(it), "train", key, f"w_{key}") for _ in range(int(n_tr))]
        plan += [Sighting(next(it), "test", key, f"w_{key}") for _ in range(int(n_te))]
    for key in keys[n_ids:n_ids + n_new_train]:
        plan.append(Sighting(next(it), "train", key, NEW_WHALE))
    for key in keys[n_ids + n_new_train:]:
        plan.append(Sighting(next(it), "test", key, NEW_WHALE))
    return plan
