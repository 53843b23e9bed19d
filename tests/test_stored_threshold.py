"""The tuned new_whale threshold is stored where it is tuned and read, not tuned again (whale.ranking.stored)."""

import argparse
import json

import numpy as np
import pytest

from whale import NEW_WHALE
from whale.core.errors import DataError
from whale.ranking import tune_threshold
from whale.ranking.stored import read_threshold, threshold_arg, write_threshold

from test_ensemble import fold_runs, make_run, run_main, synthetic


def test_write_read_and_the_flag_type(tmp_path):
    path = write_threshold(tmp_path / "t.json", 0.625, map5=0.5, tuned_on="val.npz", scores_hash="ab")
    stored = read_threshold(path)
    assert (stored.threshold, stored.map5, stored.open_label, stored.path) == (0.625, 0.5, NEW_WHALE, path)
    assert threshold_arg("0.7") == 0.7 and threshold_arg(str(path)) == 0.625
    with pytest.raises(argparse.ArgumentTypeError, match="missing.json"):
        threshold_arg(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("text", ["not json", "[0.5]", '{"threshold": "high"}', '{"threshold": NaN}',
                                  '{"map5": 0.5}', '{"threshold": true}'])
def test_a_malformed_file_is_named(tmp_path, text):
    bad = tmp_path / "bad.threshold.json"
    bad.write_text(text)
    with pytest.raises(DataError, match="bad.threshold.json"):
        read_threshold(bad)


def test_ensemble_tune_stores_the_threshold_it_chose_and_threshold_reads_it(tmp_path):
    runs, _ = fold_runs(tmp_path, np.random.default_rng(7))
    out = tmp_path / "sub" / "tuned.csv"
    run_main([*runs, "--tune", "--out", out])
    stored = read_threshold(tmp_path / "sub" / "tuned.threshold.json")
    rows = np.loadtxt(tmp_path / "sub" / "tuned.threshold.csv", delimiter=",", skiprows=1)
    assert stored.threshold == rows[int(np.argmax(rows[:, 1])), 0] and stored.map5 == rows[:, 1].max()
    again = tmp_path / "sub" / "again.csv"
    text = run_main([*runs, "--threshold", tmp_path / "sub" / "tuned.threshold.json", "--out", again])
    assert again.read_text() == out.read_text()
    assert f"threshold {stored.threshold:.6g} (given)" in text


def _run_with_val(tmp_path, rng):
    scores, query, gallery, gids, truth = synthetic(rng, 40)
    run = make_run(tmp_path, "run", (scores[:5], query[:5], gallery, gids), (scores, query, gallery, gids, truth))
    (run / "config.yaml").write_text("name: x\nstages:\n  - {epochs: 1, k: 1.0, lr: 1.0e-3, image_size: 32}\n")
    return run, scores, gids, truth, query, gallery


def test_run_threshold_reads_the_stored_value_and_tunes_only_an_older_run(tmp_path, monkeypatch):
    import whale.ranking
    from whale.explain.match import run_threshold
    from whale.core.files import file_hash

    run, scores, gids, truth, query, gallery = _run_with_val(tmp_path, np.random.default_rng(3))
    val = run / "scores" / "val.npz"
    tuned, best, _ = tune_threshold(scores, gids, truth)
    t_old, how_old = run_threshold(run)  # no threshold.json: an older run, tuned as before
    assert t_old == pytest.approx(tuned) and "tuned on" in how_old

    write_threshold(val.with_name("threshold.json"), 0.4242, map5=best, tuned_on=str(val), scores_hash=file_hash(val))
    calls = []
    monkeypatch.setattr(whale.ranking, "tune_threshold", lambda *a, **k: calls.append(a))
    t, how = run_threshold(run)
    assert t == 0.4242 and "threshold.json" in how and calls == []  # read, not tuned

    with pytest.raises(DataError, match="threshold.json.*another|threshold.json.*open-set"):
        run_threshold(run, open_label="new_individual")
    make_run(tmp_path, "run", (scores[:5], query[:5], gallery, gids), (scores[::-1], query[::-1], gallery, gids,
                                                                     truth[::-1]))  # other bytes
    with pytest.raises(DataError, match="threshold.json: the stored threshold was tuned on other scores"):
        run_threshold(run)
    (run / "scores" / "threshold.json").write_text(json.dumps({"threshold": "x"}))
    with pytest.raises(DataError, match="threshold.json"):
        run_threshold(run)


def test_scoring_a_run_stores_the_threshold_tuned_on_its_val_scores(tmp_path):
    from whale.inference.runs import store_val_threshold
    from whale.inference.scorefile import write_scores

    _, scores, gids, truth, _, _ = _run_with_val(tmp_path, np.random.default_rng(5))
    scores16 = scores.astype(np.float16)
    val = write_scores(tmp_path / "scores" / "val.npz", scores16, [f"q{i}" for i in range(len(truth))],
                       [f"g{i}" for i in range(len(gids))], gids, query_ids=truth)
    stored = read_threshold(store_val_threshold(val, scores16, gids, truth, NEW_WHALE))
    t, best, _ = tune_threshold(scores16.astype(np.float32), gids, truth)
    assert (stored.threshold, stored.map5) == (pytest.approx(t), pytest.approx(best))
    assert stored.path == val.with_name("threshold.json") and stored.tuned_on == str(val)
