"""benchmarks/flukes/humpback_compare.py: two humpback runs paired by split seed."""
import json

import pytest

from benchmarks.flukes.humpback_compare import compare, main, rows_by_seed


def write_run(root, seeds_values: dict[int, float]):
    for seed, v in seeds_values.items():
        rows = [{"method": "keypoints", "seed": seed, "map5": v, "map5_known": v / 2, "top1": v / 4},
                {"method": "keypoints, --tune-new-share 0.276", "seed": seed, "map5": v + 0.01},
                {"method": "pixels", "seed": seed, "map5": 0.26}]
        (root / f"seed{seed}").mkdir(parents=True)
        (root / f"seed{seed}" / "results.json").write_text(json.dumps(rows))
    return str(root)


def test_paired_differences_over_the_shared_seeds(tmp_path, capsys):
    a = write_run(tmp_path / "a", {0: 0.60, 1: 0.62, 2: 0.64, 3: 0.5})
    b0, b12 = write_run(tmp_path / "b0", {0: 0.63}), write_run(tmp_path / "b12", {1: 0.66, 2: 0.66})
    table = compare(rows_by_seed([a], "keypoints"), rows_by_seed([b0, b12], "keypoints"))
    assert table.splitlines()[0] == "split seeds 0, 1, 2"  # seed 3 is on one side only
    all_row = next(line for line in table.splitlines() if line.startswith("| MAP@5, all queries"))
    assert all_row == "| MAP@5, all queries | 0.620 +- 0.020 | 0.650 +- 0.017 | +0.030 +- 0.010 | +0.030, +0.040, +0.020 |"
    assert "| known | 0.310 +- 0.010 | 0.325 +- 0.009 | +0.015 +- 0.005 |" in table and "ids only" not in table  # absent metric: no row
    main(["--a", a, "--b", b0, "--method", "pixels"])
    assert "+0.000 +- 0.000" in capsys.readouterr().out
    main(["--a", a, "--b", b0, "--share"])
    assert "| MAP@5, all queries | 0.610 +- 0.000 | 0.640 +- 0.000 | +0.030" in capsys.readouterr().out
    main(["--a", a, "--b", b0, "--method-b", "pixels"])  # another method on B's side: pixels minus keypoints
    assert "| MAP@5, all queries | 0.600 +- 0.000 | 0.260 +- 0.000 | -0.340" in capsys.readouterr().out


def test_a_seed_twice_or_a_folder_without_results_is_refused(tmp_path):
    a = write_run(tmp_path / "a", {0: 0.6})
    with pytest.raises(SystemExit, match="found twice"):
        rows_by_seed([a, a], "keypoints")
    with pytest.raises(SystemExit, match="no seed"):
        rows_by_seed([str(tmp_path / "empty")], "keypoints")
    with pytest.raises(SystemExit, match="no split seed in both"):
        compare(rows_by_seed([a], "keypoints"), {})
