"""benchmarks/flukes/mined_pairs.py: a run's mined negatives read back against its own training photos, and looked at
without the network (near copies, geometric inliers against random different-id pairs)."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes import mined_pairs, shared  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_draw_pairs_keeps_to_its_kind():
    ids = np.array(["a", "a", "b", "b", "b", "c"])
    rng = np.random.default_rng(0)
    other = mined_pairs.draw_pairs(ids, 50, False, rng)
    same = mined_pairs.draw_pairs(ids, 50, True, rng)
    assert other.shape == same.shape == (50, 2)
    assert (ids[other[:, 0]] != ids[other[:, 1]]).all()
    assert (ids[same[:, 0]] == ids[same[:, 1]]).all() and (same[:, 0] != same[:, 1]).all()
    with pytest.raises(ValueError, match="no id has two photos"):
        mined_pairs.draw_pairs(np.array(["a", "b"]), 3, True, rng)


def test_inlier_threshold_lets_the_share_of_random_pairs_above_it():
    random = np.arange(1000)  # 0..999: 1% above 989
    t = mined_pairs.inlier_threshold(random, 0.01)
    assert t == 989 and (random > t).mean() == pytest.approx(0.01)
    assert mined_pairs.inlier_threshold(np.array([0, 0, 0, 7]), 0.25) == 0


def test_hash_bits_apart_counts_bits_pair_by_pair():
    a = np.array([0, 0b1011, 2**63], np.uint64)
    b = np.array([0, 0b0001, 0], np.uint64)
    assert mined_pairs.hash_bits_apart(a, b).tolist() == [0, 2, 1]


def _mined_run(tmp_path: Path, same_id: bool = False) -> Path:
    """A run folder as ``whale train`` leaves it under the miner: config, run.json, one mined block."""
    from tests.test_bench_humpback_learned import fake_source
    from whale.config import load_config
    from whale.training.foldjob import load_fold
    from whale.training.minedfiles import save_mined, training_key

    comp, _, _ = shared.build_split(fake_source(tmp_path / "src"), tmp_path / "data", 0, log=lambda m: None)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copyfile(ROOT / "configs" / "demo.yaml", run / "config.yaml")
    (run / "run.json").write_text(json.dumps({"data": str(comp), "fold": 0}))
    images = load_fold(load_config(run / "config.yaml"), comp, 0, log=lambda *_: None).data.pairs
    ids = np.asarray(images.ids, str)
    pairs = mined_pairs.draw_pairs(ids, len(ids), same_id, np.random.default_rng(1))
    save_mined(run / "checkpoints", 4, [pairs, pairs[::-1]], training_key(images))
    (run / "log.csv").write_text("epoch,k\n4,1.0\n5,0.5\n")
    return run


def test_a_run_is_measured_end_to_end(tmp_path, capsys):
    run = _mined_run(tmp_path)
    assert mined_pairs.block_k(run, 4) == 0.5
    out = tmp_path / "out"
    assert mined_pairs.main(["--run", str(run), "--sample", "6", "--cache", str(tmp_path / "kp"),
                             "--out", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())[0]
    assert res["block"] == 4 and res["k"] == 0.5
    for kind in mined_pairs.KINDS:
        row = res["rows"][kind]
        assert row["verified"] == 6 and row["pairs"] == res["photos"]
        assert 0 <= row["above_share"] <= 1 and 0 <= row["near_copy_share"] <= 1
    assert res["rows"]["random"]["above_share"] <= 1 / 6 + 1e-9  # the threshold lets ~1% of random pairs pass
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["benchmark"] == "mined_pairs" and "run0_mined_above_share" in last["metrics"]


def test_a_block_not_kept_and_same_id_negatives_are_refused_by_name(tmp_path):
    run = _mined_run(tmp_path, same_id=True)
    with pytest.raises(SystemExit, match="no mined negatives of block 8 .kept: mined-e0004.npz"):
        mined_pairs.main(["--run", str(run), "--block", "8"])
    with pytest.raises(SystemExit, match="same-id pairs"):
        mined_pairs.main(["--run", str(run), "--cache", str(tmp_path / "kp"), "--quiet"])


def test_a_run_whose_data_changed_is_refused(tmp_path):
    from whale.training.minedfiles import save_mined

    run = _mined_run(tmp_path)
    save_mined(run / "checkpoints", 4, [np.array([[0, 1]])], "0123456789abcdef")
    with pytest.raises(SystemExit, match="other photos than fold 0"):
        mined_pairs.main(["--run", str(run), "--cache", str(tmp_path / "kp"), "--quiet"])
