"""benchmarks/seeds/homography.py (seed 000, Table I): the accuracy rule, the losses, and a --quick run end to end."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.seeds import homography as bench  # noqa: E402


def test_accuracy_counts_a_triplet_only_when_both_pairs_are_right():
    d = np.array([[0.1, 0.9], [0.6, 0.9], [0.1, 0.4], [0.9, 0.2], [0.5, 0.49]])
    y = np.array([[0, 1], [0, 1], [0, 1], [1, 0], [1, 0]])
    assert bench.accuracy(d, y) == pytest.approx(3 / 5)  # 0.5 itself counts as "different"
    pairs = np.array([0.2, 0.7, 0.5, 0.49])
    assert bench.accuracy(pairs, np.array([0, 1, 0, 1])) == pytest.approx(2 / 4)


def test_losses_match_the_formulas_on_hand_computed_values():
    from keras import ops

    def value(name, y, d):
        return float(ops.convert_to_numpy(bench.loss_function(name)(np.asarray(y, "float32"),
                                                                     np.asarray(d, "float32"))))

    # Contrastive (m = 1): positives 0.5 D^2, negatives 0.5 max(0, 1 - D)^2.
    assert value("contrastive", [[0], [1], [1]], [[0.4], [0.3], [1.5]]) == pytest.approx(
        (0.5 * 0.16 + 0.5 * 0.49 + 0) / 3, rel=1e-5)
    # Cross-entropy on the squashed distance, label 1 = different.
    assert value("cross-entropy", [[0], [1]], [[0.2], [0.7]]) == pytest.approx(
        -(np.log(0.8) + np.log(0.7)) / 2, rel=1e-5)
    # Hinge on squared distances, the positive chosen by the label; MSE against the labels.
    assert value("hinge", [[0, 1], [1, 0]], [[0.5, 1.0], [0.2, 2.0]]) == pytest.approx(
        (max(0, 1 + 0.25 - 1.0) + max(0, 1 + 4.0 - 0.04)) / 2, rel=1e-5)
    assert value("mse", [[0, 1], [1, 0]], [[0.5, 1.0], [0.2, 2.0]]) == pytest.approx(
        (0.25 + 0 + 0.64 + 4.0) / 2, rel=1e-5)
    with pytest.raises(ValueError, match="loss"):
        bench.loss_function("focal")


def test_the_squashed_distance_is_zero_for_equal_embeddings():
    # 2 sigmoid(D) - 1 = tanh(D / 2): 0 at D = 0, 0.5 at D = ln 3.
    from keras import ops

    d = np.array([0.0, np.log(3.0), 20.0], "float32")
    s = ops.convert_to_numpy(2.0 * ops.sigmoid(d) - 1.0)
    np.testing.assert_allclose(s, [0.0, 0.5, 1.0], atol=1e-6)


def test_quick_run_prints_table_one_and_is_deterministic(tmp_path, capsys):
    out = bench.main(["--out", str(tmp_path / "a"), "--quick", "--seeds", "3", "--quiet"])
    assert set(out["summary"]) == set(bench.ROWS)
    for name, s in out["summary"].items():
        assert 0.0 <= s["mean"] <= 1.0 and s["paper"] == bench.ROWS[name][3]
        res = out["per_seed"][0][name]
        assert res["test_items"] == (30 if bench.ROWS[name][0] == "siamese" else 20)
        assert [st["R"] for st in res["stages"]] == [15.0, 25.0]
        assert np.isfinite([st["last_loss"] for st in res["stages"]]).all()
    saved = json.loads((tmp_path / "a" / "results.json").read_text())
    assert saved["summary"]["triplet_hinge"]["mean"] == out["summary"]["triplet_hinge"]["mean"]
    table = (tmp_path / "a" / "table.md").read_text()
    assert "97.14%" in table and "84.17%" in table and table.count("| siamese |") == 2
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["benchmark"] == "homography"
    # The same seed again, one row alone: the same draws, losses and accuracy.
    again = bench.main(["--out", str(tmp_path / "b"), "--quick", "--seeds", "3", "--quiet",
                        "--rows", "triplet_mse"])
    assert again["per_seed"][0]["triplet_mse"]["stages"] == out["per_seed"][0]["triplet_mse"]["stages"]
    assert again["per_seed"][0]["triplet_mse"]["test_accuracy"] == out["per_seed"][0]["triplet_mse"]["test_accuracy"]


def test_bad_flags_say_what_was_expected(tmp_path):
    with pytest.raises(ValueError, match="--rows"):
        bench.main(["--out", str(tmp_path), "--quick", "--rows", "siamese_focal"])
    with pytest.raises(ValueError, match="--epochs-per-stage"):
        bench.main(["--out", str(tmp_path), "--quick", "--epochs-per-stage", "1,2,3"])


def test_order_accuracy_ignores_the_threshold():
    d = np.array([[1.0, 3.0], [2.0, 1.5], [4.0, 0.7]])
    y = np.array([[0, 1], [0, 1], [1, 0]])
    assert bench.order_accuracy(d, y) == pytest.approx(2 / 3)  # accuracy at 0.5 would be 0
    assert bench.accuracy(d, y) == 0.0
    assert bench.order_accuracy(np.array([[0.2], [0.7]]), np.array([0, 1])) is None


def test_distance_report_says_where_the_distances_sit_beside_the_threshold():
    # Triplets [n, 2] with the positive by the label: positives 0.2, 0.6, 0.3; negatives 0.9, 0.4, 0.7.
    d = np.array([[0.2, 0.9], [0.6, 0.4], [0.7, 0.3]])
    y = np.array([[0, 1], [0, 1], [1, 0]])
    r = bench.distance_report(d, y)
    assert r["accuracy"] == pytest.approx(2 / 3) and r["order_accuracy"] == pytest.approx(2 / 3)
    assert r["median"] == {"positive": pytest.approx(0.3), "negative": pytest.approx(0.7)}
    assert r["positive_below"] == pytest.approx(2 / 3) and r["negative_at_or_above"] == pytest.approx(2 / 3)


def test_trace_scores_the_test_set_after_every_epoch_without_changing_the_training(tmp_path):
    plain = bench.main(["--out", str(tmp_path / "a"), "--quick", "--seeds", "1", "--quiet", "--rows", "triplet_hinge"])
    traced = bench.main(["--out", str(tmp_path / "b"), "--quick", "--seeds", "1", "--quiet", "--rows",
                         "triplet_hinge", "--trace"])
    res, res_t = plain["per_seed"][0]["triplet_hinge"], traced["per_seed"][0]["triplet_hinge"]
    assert "trace" not in res and [p["epoch"] for p in res_t["trace"]] == [1, 2]
    assert [p["stage"] for p in res_t["trace"]] == [0, 1]
    assert res_t["stages"] == res["stages"] and res_t["test_accuracy"] == res["test_accuracy"]
    last = res_t["trace"][-1]  # the last epoch's report is the final test figure
    assert last["accuracy"] == res_t["test_accuracy"] and last["positive_below"] == res_t["test_positive_below"]
    assert "| triplet_hinge | 2 |" in (tmp_path / "b" / "table.md").read_text()
