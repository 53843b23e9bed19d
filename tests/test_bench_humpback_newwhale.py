"""benchmarks/flukes/humpback_newwhale.py: every new_whale rule on a run's score files, beside the true share."""
import numpy as np
import pandas as pd

from benchmarks.flukes.humpback_newwhale import main, thinned
from tests.test_ensemble import save, synthetic
from whale import NEW_WHALE


def test_thinning_keeps_one_photo_of_the_own_whale_for_the_share_asked():
    rng = np.random.default_rng(0)
    scores, _, _, gallery_ids, truth = synthetic(rng, 200)
    thin = thinned(scores, gallery_ids, truth, 1.0)
    known = np.flatnonzero(truth != NEW_WHALE)
    kept = [(thin[i, gallery_ids == truth[i]] > 0).sum() for i in known]
    assert kept == [1] * len(known)  # every known query: one of its whale's three photos left
    assert np.array_equal(thin[truth == NEW_WHALE], scores[truth == NEW_WHALE])
    assert np.array_equal(thinned(scores, gallery_ids, truth, 0.0), scores)
    half = thinned(scores, gallery_ids, truth, 0.5)
    changed = (half != scores).any(axis=1)[known].mean()
    assert 0.35 < changed < 0.65


def test_every_rule_is_a_row_with_the_true_share(tmp_path, capsys):
    rng = np.random.default_rng(1)
    for seed in (0, 1):
        seed_dir = tmp_path / f"seed{seed}"
        val = synthetic(rng, 120, prefix="v")
        test = synthetic(rng, 100, prefix="t")
        save(seed_dir / "keypoints" / "val.npz", *val)
        save(seed_dir / "keypoints" / "test.npz", *test[:4])
        (seed_dir / "data").mkdir(parents=True)
        pd.DataFrame({"Image": test[1], "Id": test[4]}).to_csv(seed_dir / "data" / "test_solution.csv", index=False)
    assert main([str(tmp_path), "--thin", "0.5"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 5
    assert any(r.startswith("| true share (--new-whale-fraction") for r in rows)
    assert "50% of known queries thinned" in out and "over split seeds [0, 1]" in out
    true_share = next(r for r in rows if r.startswith("| true share"))
    assert true_share.split(" | ")[4].startswith(out.split("new_whale's true share: ")[1][:5])
    for row in rows:  # new_whale first = new whales + known ones not among the five + known ones pushed down
        first, *parts = (float(cell.split(" +- ")[0]) for cell in row.rstrip(" |").split(" | ")[4:8])
        assert abs(first - sum(parts)) <= 0.002
