"""Percentile spans of small point sets from one sort, equal bit for bit to NumPy's ``np.percentile``: the keypoint
check describes about a million verified candidates a run, four spans each (:mod:`whale.keypoints.pairstats`), and
a photo's own span is kept with its features (:attr:`whale.keypoints.extract.Features.xy_span`)."""
from __future__ import annotations

import numpy as np


def _percentile(ordered: np.ndarray, q: float) -> np.ndarray:
    """The ``q`` quantile (0-1) of each column of ``ordered`` (``[n, d]``, n >= 1, each column sorted), as
    ``np.percentile(x, 100 * q, axis=0)`` gives it for the unsorted ``x`` (its ``linear`` rule and its rounding:
    the same value, bit for bit, in the array's dtype)."""
    at = (len(ordered) - 1) * q
    lo = int(at)
    if at >= len(ordered) - 1:
        return ordered[-1]
    below, above = ordered[lo], ordered[lo + 1]
    t = at - lo
    step = above - below
    return above - step * (1 - t) if t >= 0.5 else below + step * t


def percentile_span(x: np.ndarray) -> np.ndarray:
    """``[d]``: the 90th minus the 10th percentile of each column of ``x`` (``[n, d]``, n >= 1), equal to
    ``np.percentile(x, 90, axis=0) - np.percentile(x, 10, axis=0)`` from one sort: the check describes about a
    million candidates a run, four spans each, and ``np.percentile``'s own work around a small array is 10-20
    times the sort's (``tests/test_keypoint_check.py`` compares the two on random arrays)."""
    ordered = np.sort(x, axis=0)
    return _percentile(ordered, 0.9) - _percentile(ordered, 0.1)
