"""benchmarks/flukes/humpback_misses.py: what a second run holds of the first run's top-5 misses, on two tiny score
files."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.flukes import humpback_misses  # noqa: E402
from whale.inference.scorefile import load_score_file, write_scores  # noqa: E402


def test_misses_counts_and_bound(tmp_path, capsys):
    gallery = [f"g{i}" for i in range(8)]
    gallery_ids = ["a", "b", "c", "d", "e", "f", "g", "new_whale"]
    query, truth = ["q0", "q1", "q2", "q3"], ["a", "g", "f", "new_whale"]
    first = np.zeros((4, 8), np.float32)
    first[0, 0] = 1.0                       # q0: a first, a hit
    first[1, :5] = [5, 4, 3, 2, 1]          # q1: a..e, g outside the top 5: a miss
    first[2, :5] = [5, 4, 3, 2, 1]          # q2: a miss as well
    first[:, 7] = 9.0                       # new_whale's photo never counts as an individual
    second = np.zeros((4, 8), np.float32)
    second[1, 6] = 1.0                      # q1: g first: the second run finds one of the first's misses
    second[0, 0] = 1.0                      # q0: both
    write_scores(tmp_path / "a" / "val.npz", first, query, gallery, gallery_ids, query_ids=truth)
    write_scores(tmp_path / "b" / "scores" / "val.npz", second[::-1], query[::-1], gallery, gallery_ids,
                 query_ids=truth[::-1])  # another query order: matched by name
    m = humpback_misses.misses(load_score_file(tmp_path / "a" / "val.npz"),
                               load_score_file(tmp_path / "b" / "scores" / "val.npz"))
    assert (m["known"], m["first_top5"], m["first_misses"], m["second_finds_of_them"], m["both"]) == (3, 1, 2, 1, 1)
    assert m["map5_bound"] == 1 / 4
    assert humpback_misses.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "the second holds 1 of them (0.500): at most +0.250 MAP@5" in capsys.readouterr().out
