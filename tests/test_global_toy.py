"""benchmarks/seeds/global_toy.py (seed 001's toy experiment): its data, grid, 1-NN rule, and the --quick table."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.seeds import global_toy  # noqa: E402


def test_toy_data_has_two_classes_of_forty_and_four_flipped_labels():
    x, noisy, clean = global_toy.toy_data(3)
    assert x.shape == (80, 2) and x.dtype == np.float32
    assert np.bincount(clean).tolist() == [40, 40] and int((noisy != clean).sum()) == 4
    x2, noisy2, _ = global_toy.toy_data(3)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(noisy, noisy2)
    # each class's points sit on their own side of the Bayes line x + y = 0, nearly all of them
    assert np.mean((x.sum(1) > 0) == clean.astype(bool)) > 0.95


def test_grid_bayes_labels_and_nearest_neighbour():
    pts, bayes = global_toy.grid(5)
    assert pts.shape == (25, 2) and bayes.tolist() == (pts.sum(1) > 0).astype(int).tolist()
    train = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)
    got = global_toy.nearest_labels(np.array([[0.1, 0.2], [0.9, 0.6], [5, 5]], np.float32), train, np.array([7, 9]))
    assert got.tolist() == [7, 9, 9]


@pytest.mark.backend
def test_each_loss_gives_one_row_of_accuracies_and_a_seed_repeats_exactly(backend):
    """Two losses (each costs a compilation); the slow test below runs the whole --quick table."""
    losses = ("global", "tgloss")
    rows, maps = global_toy.run(losses, [0], epochs=3, n_grid=11, log=lambda *_: None)
    assert [r["loss"] for r in rows] == ["1nn-input", *losses]
    for r in rows:
        assert len(r["accs"]) == 1 and 0.0 <= r["accs"][0] <= 1.0 and r["mean"] == r["accs"][0]
    table = global_toy.table(rows, [0]).splitlines()
    assert len(table) == 2 + len(rows) and all(global_toy.LABELS[r["loss"]] in line for r, line in zip(rows, table[2:]))
    labels, _ = global_toy.train_and_label("global", 0, 3, global_toy.grid(11)[0])
    np.testing.assert_array_equal(labels, maps[("global", 0)])


@pytest.mark.slow
@pytest.mark.backend
def test_quick_command_prints_the_table_and_the_json_line(backend, capsys, tmp_path):
    assert global_toy.main(["--quick", "--plot", str(tmp_path / "maps.png")]) == 0
    out = capsys.readouterr().out
    metrics = json.loads(out.strip().splitlines()[-1])["metrics"]
    names = ("1nn-input",) + global_toy.LOSSES
    table = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [line.split(" | ")[0][2:] for line in table] == [global_toy.LABELS[n] for n in names]
    assert all(0.0 <= metrics[f"acc_{n}"] <= 1.0 for n in names)
    assert (tmp_path / "maps.png").stat().st_size > 0


def test_unknown_loss_is_refused(capsys):
    with pytest.raises(SystemExit):
        global_toy.main(["--quick", "--losses", "hinge"])
    err = capsys.readouterr().err
    assert ("expected names from triplet,tgloss,global,semihard,contrastive,global_triplet,tgloss_triplet, "
            "received ['hinge']") in err
