"""Tests for whale.data.synth: file layout, boxes, shares, determinism, long tail, CLI."""
import re

import cv2
import numpy as np
import pandas as pd
import pytest

from whale import NEW_WHALE
from whale.core.errors import WhaleError
from whale.data.synth import _render_fluke, generate, main, REAL_IMAGES_PER_ID, sample_counts

N_IDS, SIZE, SEED = 12, 128, 3


@pytest.fixture(scope="module")
def comp(tmp_path_factory):
    """A small synthetic competition, generated once for the module."""
    return generate(tmp_path_factory.mktemp("synth") / "a", n_ids=N_IDS, seed=SEED, size=SIZE,
                    progress=False)


def _csv(root, name):
    return pd.read_csv(root / name, dtype=str, keep_default_na=False)


def test_files_and_columns(comp):
    assert list(_csv(comp, "train.csv").columns) == ["Image", "Id"]
    assert list(_csv(comp, "test_solution.csv").columns) == ["Image", "Id"]
    assert list(_csv(comp, "sample_submission.csv").columns) == ["Image", "Id"]
    assert list(_csv(comp, "bounding_boxes.csv").columns) == ["Image", "x0", "y0", "x1", "y1"]
    assert (comp / "train").is_dir() and (comp / "test").is_dir()


def test_names_ids_and_splits(comp):
    train, test = _csv(comp, "train.csv"), _csv(comp, "test_solution.csv")
    names = list(train["Image"]) + list(test["Image"])
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[0-9a-f]{8}\.jpg", n) for n in names)
    ids = set(train["Id"]) | set(test["Id"])
    assert all(i == NEW_WHALE or re.fullmatch(r"w_[0-9a-f]{7}", i) for i in ids)
    known = train[train["Id"] != NEW_WHALE]["Id"]
    assert known.nunique() == N_IDS
    # Test ids are either new_whale or ids seen in train.
    assert set(test["Id"]) - {NEW_WHALE} <= set(known)
    assert 0.25 <= len(test) / len(train) <= 0.55  # real data: 7,960 / 25,361 = 0.31
    assert (known.value_counts() >= 4).sum() >= 2


def test_new_whale_shares(comp):
    train, test = _csv(comp, "train.csv"), _csv(comp, "test_solution.csv")
    assert 0.3 <= (train["Id"] == NEW_WHALE).mean() <= 0.45
    assert 0.15 <= (test["Id"] == NEW_WHALE).mean() <= 0.4


def test_images_decode_and_boxes_inside(comp):
    boxes = _csv(comp, "bounding_boxes.csv").set_index("Image").astype(int)
    train, test = _csv(comp, "train.csv"), _csv(comp, "test_solution.csv")
    listed = [("train", n) for n in train["Image"]] + [("test", n) for n in test["Image"]]
    assert set(boxes.index) == {n for _, n in listed}
    for folder, name in listed:
        img = cv2.imread(str(comp / folder / name), cv2.IMREAD_UNCHANGED)
        assert img is not None, name
        assert img.dtype == np.uint8 and img.ndim in (2, 3)
        h, w = img.shape[:2]
        assert w == SIZE and 0.55 * SIZE <= h <= 0.95 * SIZE
        x0, y0, x1, y1 = boxes.loc[name]
        assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h
        assert 0.25 * w <= x1 - x0 <= 0.85 * w


def test_test_solution_and_sample_submission(comp):
    solution, sample = _csv(comp, "test_solution.csv"), _csv(comp, "sample_submission.csv")
    assert sorted(p.name for p in (comp / "test").iterdir()) == sorted(solution["Image"])
    assert sorted(p.name for p in (comp / "train").iterdir()) == sorted(_csv(comp, "train.csv")["Image"])
    assert list(sample["Image"]) == list(solution["Image"])
    for labels in sample["Id"]:
        parts = labels.split()
        assert len(parts) == 5 and parts[0] == NEW_WHALE


def test_same_seed_same_bytes_other_seed_differs(comp, tmp_path):
    again = generate(tmp_path / "b", n_ids=N_IDS, seed=SEED, size=SIZE, progress=False)
    for name in ("train.csv", "test_solution.csv", "bounding_boxes.csv", "sample_submission.csv"):
        assert (again / name).read_bytes() == (comp / name).read_bytes(), name
    for folder in ("train", "test"):
        for p in (comp / folder).iterdir():
            assert (again / folder / p.name).read_bytes() == p.read_bytes(), p.name
    other = generate(tmp_path / "c", n_ids=N_IDS, seed=SEED + 1, size=SIZE, progress=False)
    assert (other / "train.csv").read_bytes() != (comp / "train.csv").read_bytes()


def test_pattern_is_a_function_of_the_key():
    a, b = _render_fluke("0a1b2c3", 96), _render_fluke("0a1b2c3", 96)
    c = _render_fluke("0a1b2c4", 96)
    assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.alpha, b.alpha)
    assert not np.array_equal(a.rgb, c.rgb)


def test_sample_counts_long_tail():
    counts = sample_counts(2000, np.random.default_rng(0))
    assert counts.dtype == np.int64 and counts.shape == (2000,) and counts.min() >= 1
    assert np.array_equal(counts, sample_counts(2000, np.random.default_rng(0)))
    real_ones = REAL_IMAGES_PER_ID[1] / sum(REAL_IMAGES_PER_ID.values())
    assert abs((counts == 1).mean() - real_ones) < 0.02
    assert (counts <= 2).mean() > 0.6
    assert 0 < (counts >= 20).sum() < 0.05 * len(counts)
    assert counts.max() >= 30
    small = sample_counts(12, np.random.default_rng(1))
    assert (small <= 2).sum() >= 6 and (small >= 4).sum() >= 2
    assert (sample_counts(3, np.random.default_rng(0)) >= 4).sum() >= 2


def test_refuses_non_empty_dir_and_force(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(WhaleError, match=re.escape(str(out))):
        generate(out, n_ids=1, size=64, progress=False)
    assert main(["--out", str(out), "--ids", "1", "--size", "64", "--quiet"]) == 2
    assert main(["--out", str(out), "--ids", "1", "--size", "64", "--quiet", "--force"]) == 0
    assert (out / "train.csv").exists() and (out / "keep.txt").exists()


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "--ids" in capsys.readouterr().out


@pytest.mark.parametrize("size", [32, 64])
def test_small_sizes_generate_with_every_fluke_inside(tmp_path, size):
    # seed 0 at 64 px used to crash (the placement's range crossed when the fluke filled a short frame)
    out = tmp_path / f"s{size}"
    assert main(["--out", str(out), "--ids", "20", "--size", str(size), "--seed", "0", "--quiet"]) == 0
    boxes = _csv(out, "bounding_boxes.csv").set_index("Image").astype(int)
    for folder in ("train", "test"):
        for p in (out / folder).iterdir():
            h, w = cv2.imread(str(p), cv2.IMREAD_UNCHANGED).shape[:2]
            x0, y0, x1, y1 = boxes.loc[p.name]
            assert w == size and 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h, p.name


def test_a_failure_halfway_leaves_no_files_behind(tmp_path, monkeypatch):
    import whale.data.synth as synth

    real, calls = synth._render_sighting, []

    def fails_later(*args):
        calls.append(1)
        if len(calls) > 5:
            raise RuntimeError("a bug halfway through")
        return real(*args)

    monkeypatch.setattr(synth, "_render_sighting", fails_later)
    with pytest.raises(RuntimeError):
        main(["--out", str(tmp_path / "new"), "--ids", "5", "--size", "64", "--quiet"])
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "empty"
    kept.mkdir()
    calls.clear()
    with pytest.raises(RuntimeError):
        main(["--out", str(kept), "--ids", "5", "--size", "64", "--quiet"])
    assert kept.is_dir() and not any(kept.iterdir())
