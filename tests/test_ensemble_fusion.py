"""Calibrated fusion in ``whale ensemble``: each run calibrated on its own validation file, runs fused as
probabilities, the threshold a probability; checked against a loop over the pairs."""
import json

import numpy as np
import pytest

from whale import NEW_WHALE
from whale.core.errors import ConfigError
from whale.ensemble.combine import average_score_files
from whale.ensemble.fusion import read_fusion
from whale.metrics import map_at_k
from whale.ranking import predict_top5
from whale.ranking.pairprob import PairCalibration
from whale.ranking.stored import read_threshold
from whale.submission import check_submission

from test_ensemble import make_run, run_ensemble, run_main


def two_kinds(root, rng, n_val=120, n_test=40, n_ids=15, per_id=3):
    """Two runs scoring one fold: ``net`` a noisy probability, ``kp`` evidence 1000x smaller, exactly 0 for most
    pairs and high for a few same-whale pairs (the keypoint matcher's kind). Returns the runs and their val
    matrices with the truth."""
    gids = np.repeat([f"w{i}" for i in range(n_ids)], per_id)
    gallery = [f"g{i}.jpg" for i in range(len(gids))]

    def kinds(n, prefix):
        truth = np.where(rng.random(n) < 0.3, NEW_WHALE, np.array([f"w{i}" for i in rng.integers(0, n_ids, n)]))
        same = truth[:, None] == gids[None, :]
        net = np.clip(rng.normal(np.where(same, 0.62, 0.45), 0.12), 0, 1).astype(np.float32)
        hit = rng.random(same.shape) < np.where(same, 0.5, 0.02)
        kp = np.where(hit, rng.uniform(1e-4, 1e-3, same.shape) * np.where(same, 1.0, 0.5), 0).astype(np.float32)
        return truth, net, kp, [f"{prefix}{i}.jpg" for i in range(n)]

    vt, vnet, vkp, vq = kinds(n_val, "v")
    tt, tnet, tkp, tq = kinds(n_test, "t")
    net = make_run(root, "net", (tnet, tq, gallery, gids), (vnet, vq, gallery, gids, vt))
    kp = make_run(root, "kp", (tkp, tq, gallery, gids), (vkp, vq, gallery, gids, vt))
    return [net, kp], (vnet, vkp), vt, gids


def loop_fused(mats, truth, gids, rule):
    """The fused validation probabilities pair by pair, from each run's own calibration."""
    cals = [PairCalibration.fit(m, truth, gids) for m in mats]
    prior = np.mean([c.base_rate for c in cals])
    out = np.zeros(mats[0].shape)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            ps = [float(c.transform(np.float32([m[i, j]]))[0]) for c, m in zip(cals, mats)]
            if rule == "mean":
                out[i, j] = np.mean(ps)
            else:
                z = np.log(prior / (1 - prior)) + sum(
                    np.log(p / (1 - p)) - np.log(c.base_rate / (1 - c.base_rate)) for p, c in zip(ps, cals))
                out[i, j] = 1 / (1 + np.exp(-z))
    return out


@pytest.mark.parametrize("rule", ["logodds", "mean"])
def test_runs_of_two_kinds_are_fused_as_probabilities_and_the_threshold_is_one(tmp_path, rule):
    runs, mats, truth, gids = two_kinds(tmp_path, np.random.default_rng(0))
    out = tmp_path / "sub" / f"{rule}.csv"
    flags = [] if rule == "mean" else ["--fusion", "logodds"]  # mean: the default for two models
    text = run_main([*runs, "--tune", *flags, "--out", out])
    assert check_submission(out) == []
    assert f"fused by: {rule}: calibrated fusion" in text and "implied test share of new_whale at rank 1" in text
    fused = loop_fused(mats, truth, gids, rule)
    rows = np.loadtxt(tmp_path / "sub" / f"{rule}.threshold.csv", delimiter=",", skiprows=1)
    for t, m in rows[::25]:  # MAP@5 per threshold: the fused matrix of the loop, ranked by the paper's rule
        assert m == pytest.approx(map_at_k(predict_top5(fused.astype(np.float32), gids, t), truth, 5), abs=1e-6)
    stored = read_threshold(tmp_path / "sub" / f"{rule}.threshold.json")
    assert stored.scale == "probability" and rule in stored.rule and 0 < stored.threshold < 1
    record = json.loads((tmp_path / "sub" / f"{rule}.calibration.json").read_text())
    assert record["rule"] == rule and [r["run"] for r in record["runs"]] == list(map(str, runs))
    assert PairCalibration.from_dict(record["runs"][1]["calibration"]).n_positive > 0
    # the kept fusion read back fuses the validation files as the ensemble did: the loop's matrix again
    kept = read_fusion(tmp_path / "sub" / f"{rule}.calibration.json")
    again_val = average_score_files([r / "scores" / "val.npz" for r in runs], **kept.maps())
    assert again_val.scores == pytest.approx(fused, abs=1e-5)
    # the raw average cannot see the 1000x smaller run: calibration can
    raw = run_main([*runs, "--tune", "--fusion", "scores", "--out", tmp_path / "raw.csv"])
    assert "fused by: scores: weighted average of the raw scores (--fusion)" in raw
    assert stored.map5 > read_threshold(tmp_path / "raw.threshold.json").map5 + 0.02
    # read back: the stored probability on the same fusion gives the same submission
    again = run_main([*runs, *flags, "--threshold", tmp_path / "sub" / f"{rule}.threshold.json", "--out",
                      tmp_path / "again.csv"])
    assert (tmp_path / "again.csv").read_text() == out.read_text() and "(given)" in again


def test_one_run_ranks_as_before_and_reads_its_threshold_as_a_probability(tmp_path):
    runs, mats, truth, gids = two_kinds(tmp_path, np.random.default_rng(1))
    text = run_main([runs[0], "--tune", "--out", tmp_path / "one.csv"])
    assert "fused by: scores: weighted average of the raw scores (one run)" in text
    stored = read_threshold(tmp_path / "one.threshold.json")
    assert stored.scale == "score"
    cal = PairCalibration.fit(mats[0], truth, gids)
    p = float(cal.transform(np.float64([stored.threshold]))[0])
    assert f"the threshold as a probability: P(same whale) {p:.4g} at score {stored.threshold:.6g}" in text


def test_flags_that_contradict_the_fusion_are_refused(tmp_path):
    runs, *_ = two_kinds(tmp_path, np.random.default_rng(2))
    with pytest.raises(ConfigError, match="--tune-weights searches weights of raw scores"):
        run_ensemble([*runs, "--tune", "--tune-weights", "--fusion", "logodds", "--out", tmp_path / "x.csv"],
                     log=lambda m: None)
    run_main([*runs, "--tune", "--out", tmp_path / "p.csv"])
    with pytest.raises(ConfigError, match=r"p.threshold.json: a threshold on the runs' probability scale, but these "
                                          r"runs are fused by scores"):
        run_ensemble([*runs, "--fusion", "scores", "--threshold", tmp_path / "p.threshold.json", "--out",
                      tmp_path / "y.csv"], log=lambda m: None)
    # --weights keep the raw average unless a calibrated rule is asked for
    text = run_main([*runs, "--tune", "--weights", "1", "3", "--out", tmp_path / "w.csv"])
    assert "fused by: scores" in text
    text = run_main([*runs, "--tune", "--weights", "1", "3", "--fusion", "mean", "--calibration", "logistic",
                     "--out", tmp_path / "wm.csv"])
    assert "fused by: mean" in text and "logistic on" in text


def test_a_kept_fusion_that_is_not_one_is_refused_by_name(tmp_path):
    from whale.core.errors import DataError

    bad = tmp_path / "f.calibration.json"
    for text, match in (("{", "cannot read"), ('{"rule": "max", "runs": []}', "rule one of"),
                        ('{"rule": "mean", "runs": [], "models": 0}', "models"),
                        ('{"rule": "mean", "runs": [{"calibration": {}}], "models": 1}', "runs\\[0\\].calibration")):
        bad.write_text(text)
        with pytest.raises(DataError, match=match):
            read_fusion(bad)
