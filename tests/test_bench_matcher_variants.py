"""benchmarks/flukes/matcher_variants.py: where the known queries' whales are lost (vote, shortlist, verification)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes.matcher_variants import funnel  # noqa: E402
from whale import NEW_WHALE  # noqa: E402


def test_funnel_counts_each_known_query_at_the_last_step_its_whale_reached():
    g_ids = np.array(["a", "a", "b", "c", "d"])
    q_ids = np.array(["a", "b", "c", "d", NEW_WHALE])
    votes = np.array([[0, 5, 9, 8, 0],     # a: its second photo voted, but 2 others have more: off a shortlist of 2
                      [0, 0, 3, 1, 2],     # b: voted, first: shortlisted, not verified
                      [4, 0, 0, 4, 4],     # c: voted, tied at the cut: shortlisted, verified
                      [1, 1, 1, 1, 0],     # d: no vote
                      [9, 9, 9, 9, 9]], np.float32)  # new_whale: not counted
    inliers = np.zeros_like(votes, dtype=np.int32)
    inliers[2, 3] = 12
    got = funnel(votes, inliers, g_ids, q_ids, shortlist=2)
    assert got == {"voted": 0.75, "shortlisted": 0.5, "verified": 0.25}
