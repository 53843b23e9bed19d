"""benchmarks/flukes/humpback_fuse.py: runs fused on each split seed by the user's `whale ensemble`, the submission's
and the fused ranking's figures, the mean over seeds and the gains paired by seed."""
import json

import numpy as np
import pandas as pd
import pytest

from benchmarks.flukes.humpback_fuse import main
from tests.test_ensemble import make_run, synthetic


def split(root, seed: int, rng) -> None:
    """Split seed ``seed``: two runs (``a`` and a noisier ``b``) of the same queries and gallery, and its solution."""
    val = synthetic(rng, 80, prefix="v")
    test = synthetic(rng, 60, prefix="t")
    for name, noise in (("a", 0.0), ("b", 0.2)):
        def noisy(t):
            return (np.clip(t[0] + rng.normal(0, noise, t[0].shape), 0, 1).astype(np.float32), *t[1:])
        make_run(root / f"seed{seed}", name, noisy(test)[:4], noisy(val))
    (root / f"seed{seed}" / "data").mkdir(parents=True)
    pd.DataFrame({"Image": test[1], "Id": test[4]}).to_csv(root / f"seed{seed}" / "data" / "test_solution.csv",
                                                          index=False)


def two_photo_split(root, rng) -> None:
    """Split seed 0 whose whales have two gallery photos each (a thinned validation hides one from every known query):
    runs ``a`` and ``b`` of the same scores, and its solution."""
    val = synthetic(rng, 80, per_id=2, prefix="v")
    test = synthetic(rng, 60, per_id=2, prefix="t")
    for name in ("a", "b"):
        make_run(root / "seed0", name, test[:4], val)
    (root / "seed0" / "data").mkdir(parents=True)
    pd.DataFrame({"Image": test[1], "Id": test[4]}).to_csv(root / "seed0" / "data" / "test_solution.csv", index=False)


def test_each_combo_is_a_row_and_its_gain_is_paired_by_seed(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for seed in (0, 1):
        split(tmp_path, seed, rng)
    out = tmp_path / "fused"
    assert main(["--out", str(out), "--seeds", "0,1", "--data", str(tmp_path / "seed{S}" / "data"),
                 "--run", f"a={tmp_path}/seed{{S}}/a", "--run", f"b={tmp_path}/seed{{S}}/b",
                 "--combo", "a", "--combo", "a+b", "--", "--tune"]) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "results.json").read_text())
    assert record["flags"] == ["--tune"] and record["seeds"] == [0, 1]
    for combo in ("a", "a+b"):
        assert len(record["rows"][combo]) == 2
        for row in record["rows"][combo]:
            assert 0 < row["map5"] <= 1 and 0 < row["map5_known_no_new"] <= 1 and 0 < row["val_known_no_new"] <= 1
            assert 0 <= row["new_whale_first"] <= 1
            parts = row["new_first_new"] + row["new_first_missed"] + row["new_first_found"]
            assert parts == pytest.approx(row["new_whale_first"]) and row["new_first_new"] <= row["new_whale_true"]
        assert (out / f"{combo}_seed1.csv").is_file()
    assert "| a | " in printed and "| a+b | " in printed and "Gain over a, paired by seed (0, 1)" in printed
    assert "Where `new_whale` first comes from" in printed and "| known, id not among the five |" in printed
    gains = [r["map5"] - b["map5"] for r, b in zip(record["rows"]["a+b"], record["rows"]["a"])]
    assert f"{gains[0]:+.3f}, {gains[1]:+.3f}" in printed


def test_a_solution_of_another_split_and_a_bad_run_are_refused(tmp_path):
    rng = np.random.default_rng(1)
    split(tmp_path, 0, rng)
    pd.DataFrame({"Image": ["x.jpg"], "Id": ["w1"]}).to_csv(tmp_path / "other.csv", index=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "test_solution.csv").write_bytes((tmp_path / "other.csv").read_bytes())
    with pytest.raises(SystemExit, match="another split"):
        main(["--out", str(tmp_path / "o"), "--seeds", "0", "--data", str(tmp_path / "other"),
              "--run", f"a={tmp_path}/seed{{S}}/a", "--combo", "a"])
    with pytest.raises(SystemExit, match="expected NAME=PATH"):
        main(["--out", str(tmp_path / "o"), "--seeds", "0", "--data", "d", "--run", "a=runs/a", "--combo", "a"])
    with pytest.raises(SystemExit, match="no --run gives: b"):
        main(["--out", str(tmp_path / "o"), "--seeds", "0", "--data", "d", "--run", "a=r{S}", "--combo", "a+b"])


def test_the_ranking_figures_are_of_the_runs_weighed_as_the_flags_weigh_them(tmp_path):
    """``--weights`` after ``--`` weighs the fused ranking the ids-only figures are read from, as it weighs the
    submission: all the weight on the clean run ranks better than all of it on the noisy one."""
    rng = np.random.default_rng(2)
    split(tmp_path, 0, rng)
    known = {}
    for weights in (("1", "0"), ("0", "1")):
        out = tmp_path / f"w{''.join(weights)}"
        assert main(["--out", str(out), "--seeds", "0", "--data", str(tmp_path / "seed{S}" / "data"),
                     "--run", f"a={tmp_path}/seed{{S}}/a", "--run", f"b={tmp_path}/seed{{S}}/b",
                     "--combo", "a+b", "--", "--tune", "--fusion", "mean", "--weights", *weights]) == 0
        known[weights] = json.loads((out / "results.json").read_text())["rows"]["a+b"][0]["map5_known_no_new"]
    assert known[("1", "0")] > known[("0", "1")]


def test_with_thin_validation_the_validation_figures_are_of_the_thinned_views(tmp_path):
    """``--thin-validation`` after ``--``: the validation column is read from the views the ensemble tuned on, where
    each known query's own whale keeps one of its two photos (the ranking is harder than on the original)."""
    two_photo_split(tmp_path, np.random.default_rng(3))
    figures = {}
    for thin in ([], ["--thin-validation"]):
        out = tmp_path / f"o{len(thin)}"
        assert main(["--out", str(out), "--seeds", "0", "--data", str(tmp_path / "seed{S}" / "data"),
                     "--run", f"a={tmp_path}/seed{{S}}/a", "--run", f"b={tmp_path}/seed{{S}}/b",
                     "--combo", "a+b", "--", "--tune", "--fusion", "logodds", *thin]) == 0
        figures[len(thin)] = json.loads((out / "results.json").read_text())["rows"]["a+b"][0]["val_known_no_new"]
    assert (tmp_path / "o1" / "a+b_seed0.thinned" / "hidden.json").is_file()
    assert figures[1] < figures[0]


def test_a_joint_run_thinned_by_the_same_draw_is_read_as_it_is(tmp_path):
    """A joint run thinned by the draw the ensemble makes has no view (the ensemble reads it as it is): the figures are
    rebuilt from it, beside the other runs' views."""
    two_photo_split(tmp_path, np.random.default_rng(4))
    argv = ["--seeds", "0", "--data", str(tmp_path / "seed{S}" / "data"), "--run", f"a={tmp_path}/seed{{S}}/a",
            "--run", f"b={tmp_path}/seed{{S}}/b"]
    flags = ["--", "--tune", "--fusion", "logodds", "--thin-validation"]
    assert main(["--out", str(tmp_path / "o"), *argv, "--combo", "a", *flags]) == 0
    drawn = json.loads((tmp_path / "o" / "a_seed0.thinned" / "hidden.json").read_text())["groups"][0]
    joint = tmp_path / "seed0" / "b"  # stands for a joint run thinned by the same draw (its own record)
    (joint / "run.json").write_text(json.dumps({"matcher": "joint", "thinned": {"share": drawn["share"]}}))
    (joint / "thinned").mkdir()
    (joint / "thinned" / "hidden.json").write_text(json.dumps({"seed": 0, "hidden": drawn["hidden"]}))
    assert main(["--out", str(tmp_path / "p"), *argv, "--combo", "a+b", *flags]) == 0
    assert not (tmp_path / "p" / "a+b_seed0.thinned" / "1-b").exists()
    assert 0 < json.loads((tmp_path / "p" / "results.json").read_text())["rows"]["a+b"][0]["val_known_no_new"] <= 1
