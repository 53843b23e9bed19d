"""benchmarks/seeds/seed002.py on a tiny fake flukes folder: selection, folds, the folder read in place, the keypoint
matcher's leave-one-out pairs against a loop of matchers, and a whole run of the training-free rows."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fake_flukes(root: Path, n_ids: int = 25, seed: int = 0) -> Path:
    """``root/train.csv`` + ``root/train/*.jpg``: individuals of 1-5 photos (blobs on a dark fluke), letterboxed on
    white as the 2019 photos are, plus ``new_whale`` photos."""
    import cv2

    rng = np.random.default_rng(seed)
    (root / "train").mkdir(parents=True)
    rows = []
    for i in range(n_ids):
        pattern = rng.integers(0, 96, (6, 2))
        for j in range(1 + i % 5):
            img = np.full((64, 64, 3), 255, np.uint8)
            fluke = np.full((32, 64, 3), 40, np.uint8)
            for x, y in pattern:
                cv2.circle(fluke, (int(x % 60) + 2, int(y % 28) + 2), 3, (230, 230, 230), -1)
            fluke = np.clip(fluke + rng.normal(0, 12, fluke.shape), 0, 255).astype(np.uint8)
            img[16:48] = fluke
            name = f"{i:03d}{j}.jpg"
            cv2.imwrite(str(root / "train" / name), img)
            rows.append((name, f"w_{i:03d}"))
    for j in range(3):
        cv2.imwrite(str(root / "train" / f"new{j}.jpg"), rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
        rows.append((f"new{j}.jpg", "new_whale"))
    pd.DataFrame(rows, columns=["Image", "Id"]).to_csv(root / "train.csv", index=False)
    return root


def test_selection_keeps_individuals_with_three_photos_and_folds_are_complementary(tmp_path):
    from benchmarks.seeds.seed002 import identity_folds, read_photos

    df = read_photos(fake_flukes(tmp_path / "src"))
    counts = df["Id"].value_counts()
    assert counts.min() >= 3 and "new_whale" not in set(df["Id"])
    assert set(counts.index) == {f"w_{i:03d}" for i in range(25) if 1 + i % 5 >= 3}
    folds = identity_folds(df["Id"], 5, seed=0)
    assert set(folds) == set(df["Id"]) and set(folds.values()) == set(range(5))
    sizes = np.bincount(list(folds.values()))
    assert sizes.max() - sizes.min() <= 1  # dealt round-robin
    assert folds == identity_folds(df["Id"], 5, seed=0) and folds != identity_folds(df["Id"], 5, seed=1)


def test_training_folder_reads_the_photos_in_place(tmp_path):
    from benchmarks.seeds.seed002 import content_boxes, read_photos, training_folder
    from whale.data import load_competition

    src = fake_flukes(tmp_path / "src")
    df = read_photos(src)
    boxes = dict(zip(df["Image"], content_boxes(list(df["path"]), tmp_path / "boxes.csv")))
    assert all(b[1] >= 14 and b[3] <= 50 and b[2] - b[0] >= 60 for b in boxes.values())  # the white bands cut
    assert content_boxes(list(df["path"]), tmp_path / "boxes.csv") == list(boxes.values())  # read back
    train = df[df["Id"] != df["Id"].iloc[0]]
    folder = training_folder(tmp_path / "run" / "data", src, train, boxes)
    assert (folder / "train").is_symlink() and (folder / "train").resolve() == (src / "train").resolve()
    comp = load_competition(folder)
    assert sorted(comp.train["Image"]) == sorted(train["Image"]) and df["Id"].iloc[0] not in set(comp.train["Id"])
    assert comp.boxes[train["Image"].iloc[0]] == boxes[train["Image"].iloc[0]]


def _features(rng, n_photos: int, dup: bool = True):
    from whale.keypoints import Features

    base = rng.random((6, 128)).astype(np.float32)
    out = []
    for i in range(n_photos):
        desc = base[rng.integers(0, 6, 14)] + rng.normal(0, 0.2, (14, 128)).astype(np.float32)
        xy = rng.random((14, 2)).astype(np.float32) * 100
        if dup:  # upright duplicated keypoints: one place, identical descriptors (SIFT's orientations, then fixed)
            desc[7:10], xy[7:10] = desc[0:3], xy[0:3]
        desc = np.clip(desc / np.linalg.norm(desc, axis=1, keepdims=True) * 512 + 0.5, 0, 255).astype(np.uint8)
        out.append(Features(xy, np.zeros((14, 2), np.float32), desc, (100, 100)))
    return out


@pytest.mark.parametrize("shortlist", [0, 3])
def test_leave_one_out_scores_equal_a_matcher_built_without_each_photo(shortlist):
    """Each row: what a matcher whose gallery is every other photo gives (exact index), duplicates included."""
    from benchmarks.seeds.seed002 import leave_one_out_scores
    from whale.keypoints import KeypointMatcher
    from whale.keypoints.config import load_keypoint_config
    from whale.config.overrides import overrides

    cfg = load_keypoint_config(ROOT / "configs" / "keypoints.yaml",
                               overrides(["search.index=exact", f"verify.shortlist={shortlist}", "verify.min_matches=4"]))
    feats = _features(np.random.default_rng(5), 9)
    got = leave_one_out_scores(cfg, feats)
    for i in range(len(feats)):
        others = [j for j in range(len(feats)) if j != i]
        want = KeypointMatcher(cfg, [feats[j] for j in others]).match([feats[i]], progress=False).scores[0]
        np.testing.assert_allclose(got[i, others], want, rtol=1e-6, atol=1e-7)
        assert got[i, i] == 0.0
    assert (got > 0).sum() > len(feats)  # not a trivial all-zero case


def test_cached_pair_scores_are_read_back_only_for_the_same_photos(tmp_path):
    from benchmarks.seeds.seed002 import cached_pair_scores

    calls = []

    def compute():
        calls.append(1)
        return np.arange(9, dtype=np.float32).reshape(3, 3) + len(calls)

    path = tmp_path / "fold0" / "pairs.npz"
    first, cached = cached_pair_scores(path, ["a", "b", "c"], compute)
    assert not cached and len(calls) == 1
    again, cached = cached_pair_scores(path, ["a", "b", "c"], compute)
    assert cached and len(calls) == 1 and (again == first).all()
    other, cached = cached_pair_scores(path, ["a", "b", "d"], compute)  # other photos: matched again
    assert not cached and len(calls) == 2 and (other == first + 1).all()
    assert cached_pair_scores(None, ["a"], lambda: np.zeros((1, 1)))[1] is False


def test_pixels_and_keypoints_rows_on_five_folds(tmp_path, capsys):
    from benchmarks.seeds.seed002 import main

    src = fake_flukes(tmp_path / "src")
    out = tmp_path / "out"
    assert main(["--out", str(out), "--source", str(src), "--methods", "pixels,keypoints", "--redraws", "2"]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert sorted((r["fold"], r["method"]) for r in rows) == sorted(
        (f, m) for f in range(5) for m in ("pixels", "keypoints"))
    for r in rows:
        n = r["test_photos"]
        assert r["pairs"] == n * (n - 1) // 2  # every pair of the test fold
        assert 0 <= r["top1"] <= r["top5"] <= r["top10"] <= 1 and 0 <= r["auc"] <= 1
    total = sum(1 + i % 5 for i in range(25) if 1 + i % 5 >= 3)
    assert all(r["train_photos"] + r["test_photos"] == total for r in rows)
    text = capsys.readouterr().out
    assert "| paper, Table II" in text and "| pixels | 5 (0,1,2,3,4) |" in text
    assert json.loads(text.strip().splitlines()[-1])["benchmark"] == "seed002"
    # a second call resumes: nothing is measured again
    assert main(["--out", str(out), "--source", str(src), "--methods", "pixels", "--redraws", "2"]) == 0
    assert len(json.loads((out / "results.json").read_text())["rows"]) == 10
    capsys.readouterr()
    assert main(["--out", str(out), "--report"]) == 0  # the tables of the kept rows, no source needed
    tables = "\n".join(capsys.readouterr().out.splitlines()[1:-1])
    assert "| pixels | 5 (0,1,2,3,4) |" in tables and tables in text  # as the measuring run printed them
    assert not list(out.rglob("*.jpg"))  # read in place: no photo copied
    # the kept keypoint pair scores give the rows' TPR and AUC again, fold by fold
    capsys.readouterr()
    assert main(["--out", str(out), "--source", str(src), "--pairs-report"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    kp = [r for r in rows if r["method"] == "keypoints"]
    assert report["auc_mean"] == pytest.approx(np.mean([r["auc"] for r in kp]), abs=1e-4)
    assert report["tpr_at_far_mean"] == pytest.approx(np.mean([r["tpr_at_far"] for r in kp]), abs=1e-4)


def test_learned_rows_differ_only_in_their_k_schedule():
    from benchmarks.seeds.seed002 import learned_config
    from whale.config import load_config
    from whale.config.overrides import overrides

    path = ROOT / "configs" / "seed002.yaml"
    plain = load_config(path)
    random, mined = learned_config(path, None, "random"), learned_config(path, None, "adversarial")
    assert [s.k for s in random.stages] == [1000.0] * len(plain.stages) and mined == plain
    arcface = ROOT / "configs" / "flukes_lite0_cpu.yaml"  # the `learned` row: any identity config as written
    assert learned_config(arcface, None, "config") == load_config(arcface)
    assert plain.objective.name == "triplet" and not plain.objective["normalize"] and plain.objective["embedding"] == 256
    assert (plain.batch.ids, plain.batch.per_id) == (15, 3)  # the paper's whale batches
    assert [s.epochs for s in random.stages] == [s.epochs for s in plain.stages]
    assert learned_config(path, overrides(["stages[0].epochs=1"]), "random").stages[0].epochs == 1
    with pytest.raises(ValueError, match="identity objective"):
        learned_config(path, overrides(["objective=head", "batch=null"]), "random")


@pytest.mark.slow
def test_learned_row_trains_on_four_folds_and_is_measured_on_the_fifth(tmp_path):
    from benchmarks.seeds.seed002 import identity_folds, main, read_photos

    src = fake_flukes(tmp_path / "src")
    out = tmp_path / "out"
    tiny = ["--set", "model.branch=tiny", "--set", "workers=1"] + [
        a for i in range(3) for a in ("--set", f"stages[{i}].epochs=1", "--set", f"stages[{i}].image_size=32")]
    assert main(["--out", str(out), "--source", str(src), "--methods", "triplet", "--folds", "1", "--redraws", "2",
                 *tiny]) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["method"] == "triplet" and row["epochs"] == "3/3" and 0 <= row["top1"] <= row["top10"] <= 1
    data = out / "fold1" / "data"
    assert (data / "train").is_symlink() and not list(out.rglob("*.jpg"))  # read in place
    train = pd.read_csv(data / "train.csv")
    folds = identity_folds(read_photos(src)["Id"])
    assert set(train["Id"]) == {i for i, f in folds.items() if f != 1}  # the four other folds, all of them
    assert row["train_photos"] == len(train) and row["test_individuals"] == 3


def test_a_pack_is_a_source_of_the_same_photos_folds_and_content(tmp_path, capsys):
    """--pack writes the selected photos' content crops (white bands cut) and their train.csv: read back as a
    --source it gives the same individuals, photos and folds, and each photo is its content at the same size."""
    from benchmarks.seeds.seed002 import identity_folds, main, read_photos
    from whale.data.images import load_image

    src = fake_flukes(tmp_path / "src")
    assert main(["--out", str(tmp_path / "out"), "--source", str(src), "--pack", str(tmp_path / "pack"),
                 "--pack-quality", "90"]) == 0
    assert "photos (" in capsys.readouterr().out
    a, b = read_photos(src), read_photos(tmp_path / "pack")
    assert list(a["Image"]) == list(b["Image"]) and list(a["Id"]) == list(b["Id"])
    assert identity_folds(a["Id"]) == identity_folds(b["Id"])
    assert not (tmp_path / "pack" / "train" / "new0.jpg").exists()  # the selection only
    original, packed = load_image(a["path"][0]), load_image(b["path"][0])
    assert packed.shape == (32, 64, 3) and original.shape == (64, 64, 3)  # the fluke band of the 64 x 64 photo
    assert np.abs(packed.astype(int) - original[16:48].astype(int)).mean() < 6  # JPEG's loss only


@pytest.mark.slow
def test_a_time_budget_stops_the_training_and_measures_the_model_as_trained(tmp_path):
    """--time-budget: the trainer's deadline stops a schedule far longer than the budget, and the row is the model
    of checkpoint ``last`` (no ``best`` is written by a run that did not finish)."""
    from benchmarks.seeds.seed002 import main

    src = fake_flukes(tmp_path / "src")
    out = tmp_path / "out"
    tiny = ["--set", "model.branch=tiny", "--set", "workers=1"] + [
        a for i in range(3) for a in ("--set", f"stages[{i}].epochs=500", "--set", f"stages[{i}].image_size=32")]
    assert main(["--out", str(out), "--source", str(src), "--methods", "triplet", "--folds", "2", "--redraws", "1",
                 "--time-budget", "20", *tiny]) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    done, total = map(int, row["epochs"].split("/"))
    assert 1 <= done < total == 1500 and row["finished"] is False and row["checkpoint"] == "last"
    assert row["train_budget_s"] == 20 and row["train_s"] < 60 and 0 <= row["top1"] <= row["top10"] <= 1 and 0 <= row["auc"] <= 1
    assert not (out / "fold2" / "random" / "checkpoints" / "best.json").exists()
    with pytest.raises(RuntimeError, match="before the first epoch"):
        main(["--out", str(tmp_path / "out2"), "--source", str(src), "--methods", "triplet", "--folds", "2",
              "--time-budget", "0.001", *tiny])
