"""benchmarks/flukes/humpback.py and what the fluke benchmarks share (benchmarks/flukes/shared.py): the split's rules
and checks, its pack, the metrics, and a whole run on a tiny fake source."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes import humpback, shared  # noqa: E402
from whale import NEW_WHALE  # noqa: E402


def fake_source(root: Path, counts=(1, 1, 1, 1, 2, 2, 3, 4), seed=0) -> Path:
    """A humpback-like folder: ``train.csv`` and distinct small JPEGs, ``counts[i]`` photos of individual i."""
    import cv2

    rng = np.random.default_rng(seed)
    (root / "train").mkdir(parents=True)
    rows = []
    for i, n in enumerate(counts):
        for j in range(n):
            name = f"{i:03d}{j:02d}.jpg"
            cv2.imwrite(str(root / "train" / name), rng.integers(0, 255, (24, 40, 3), dtype=np.uint8))
            rows.append((name, f"w_{i:03d}"))
    pd.DataFrame(rows, columns=["Image", "Id"]).to_csv(root / "train.csv", index=False)
    return root


def test_split_follows_the_rules(tmp_path):
    df = shared.read_source(fake_source(tmp_path / "src"))
    train, test = shared.split_flukes(df, seed=0)
    assert len(train) + len(test) == len(df)
    test_ids = [i for _, i in test]
    assert sum(i != NEW_WHALE for i in test_ids) == 4  # one query per individual with >= 2 photos
    assert test_ids.count(NEW_WHALE) == 2  # half of the 4 one-photo individuals
    assert [i for _, i in train].count(NEW_WHALE) == 2  # the other half: unidentified training photos
    known_train = {i for _, i in train if i != NEW_WHALE}
    assert {i for i in test_ids if i != NEW_WHALE} <= known_train
    assert shared.split_flukes(df, 0) == (train, test) and shared.split_flukes(df, 1) != (train, test)


def test_a_query_byte_identical_to_a_train_photo_moves_to_train(tmp_path):
    src = fake_source(tmp_path / "src")
    df = shared.read_source(src)
    train, test = shared.split_flukes(df, seed=0)
    twin = tmp_path / "twin.jpg"
    twin.write_bytes(Path(test[0][0]).read_bytes())
    lines = []
    train2, test2 = shared.check_disjoint(train + [(twin, "w_x")], test, log=lines.append)
    assert len(test2) == len(test) - 1 and test[0] in train2 and "moved to train" in lines[0]


def test_build_split_writes_a_checked_folder(tmp_path):
    comp, truth, individual = shared.build_split(fake_source(tmp_path / "src"), tmp_path / "comp", 0, log=lambda m: None)
    counts = shared.assert_disjoint(comp, truth)
    assert counts["known_queries"] == 4 and counts["new_queries"] == 2 and counts["train"] == 9
    train_ids = set(pd.read_csv(comp / "train.csv")["Id"])
    assert all(individual[n] not in train_ids for n, t in truth.items() if t == NEW_WHALE)
    (comp / "test" / sorted(truth)[0]).write_bytes((comp / "train" / "tr00000.jpg").read_bytes())
    with pytest.raises(ValueError, match="byte-identical"):
        shared.assert_disjoint(comp, truth)


def test_the_pack_materializes_the_split_s_folder_with_its_names_and_ids(tmp_path):
    src = fake_source(tmp_path / "src")
    comp, truth, _ = shared.build_split(src, tmp_path / "comp", 1, log=lambda m: None)
    info = shared.pack(src, tmp_path / "pack", [0, 1], (16, 32), first_part_bytes=2_000, log=lambda m: None)
    assert info["photos"] == 15 and info["bytes"]["part1"] <= 2_000 < info["bytes"]["part1"] + info["bytes"]["part2"]
    tars = shared.tar_parts(tmp_path / "pack")
    assert set(tars) == set(shared.PARTS) and all(v > 0 for v in tars.values())
    there = tmp_path / "there"  # what a device call carries: the two tars alone
    there.mkdir()
    for part in shared.PARTS:
        (there / f"{part}.tar").write_bytes((tmp_path / "pack" / f"{part}.tar").read_bytes())
    shared.untar_parts(there)
    assert shared.pack_seeds(there) == [0, 1]
    folder, packed_truth = shared.materialize(there, 1, tmp_path / "materialized")
    assert packed_truth == truth
    for name in ("train.csv", "test_solution.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(folder / name), pd.read_csv(comp / name))
    assert sorted(p.name for p in (folder / "test").iterdir()) == sorted(truth)
    import cv2

    crop = cv2.imread(str(folder / "train" / "tr00000.jpg"), cv2.IMREAD_UNCHANGED)
    assert crop.shape[:2] == (16, 32)  # the stored crop, not the 24 x 40 photo
    with pytest.raises(FileNotFoundError, match="no split 2 in the pack"):
        shared.materialize(there, 2, tmp_path / "m2")


def test_metrics_by_hand():
    truth = {"a": "w1", "b": "w2", "c": NEW_WHALE}
    pred = {"a": ["w1", NEW_WHALE], "b": [NEW_WHALE, "w3", "w2"], "c": ["w9", NEW_WHALE]}
    m = shared.submission_metrics(pred, truth)
    assert m["map5"] == pytest.approx((1 + 1 / 3 + 1 / 2) / 3)
    assert m["map5_known"] == pytest.approx((1 + 1 / 3) / 2) and m["map5_new"] == pytest.approx(0.5)
    assert m["new_whale_first"] == pytest.approx(1 / 3)
    scores = np.array([[0.9, 0.1, 0.2], [0.1, 0.3, 0.8]], np.float32)
    r = shared.ranking_metrics(scores, np.array(["a", "b"]), np.array(["w1", "w2", "w3"]), truth)
    assert r["top1"] == 0.5 and r["top5"] == 1.0 and r["map5_known_no_new"] == pytest.approx(0.75)


def test_the_known_whales_figures_are_one_ranking_read_three_ways():
    """``ranking_metrics`` (test), ``validation_metrics`` (screens) and ``identification_figures`` (joint screens)
    read the known queries' figures from one ranking (``known_hits``): by hand, a query whose id is second, one whose
    id is first (its whale with one gallery photo), one whose id is nowhere among the five, and a new whale."""
    g_ids = np.array(["w1", "w1", "w2"] + [f"x{i}" for i in range(5)] + [NEW_WHALE])
    q_ids = np.array(["w1", "w2", "w3", NEW_WHALE])
    scores = np.zeros((4, 9), np.float32)
    scores[0, [1, 2]] = 0.6, 0.9                     # w1 second, behind w2
    scores[1, 2] = 0.8                               # w2 first (one gallery photo)
    scores[2, 3:8] = 0.5, 0.4, 0.3, 0.2, 0.1         # w3 is in the gallery under no photo: nowhere among the five
    scores[2, 0] = 0.05
    g_ids[0] = "w3"                                  # w3 has one photo, ranked sixth
    known, hit = shared.known_hits(scores, g_ids, q_ids)
    assert known.tolist() == [True, True, True, False]
    assert hit.tolist() == [[False, True] + [False] * 3, [True] + [False] * 4, [False] * 5]
    assert shared.average_precision5(hit).tolist() == [0.5, 1.0, 0.0]
    v = shared.validation_metrics(scores, g_ids, q_ids)
    assert v["map5_known"] == pytest.approx(0.5) and v["map5_known_single"] == pytest.approx(0.5)
    assert v["top1"] == pytest.approx(1 / 3) and v["top5"] == pytest.approx(2 / 3)
    r = shared.ranking_metrics(scores, np.array(list("abcd")), g_ids, dict(zip("abcd", q_ids)))
    assert r["map5_known_no_new"] == v["map5_known"] and r["map5_one_photo"] == v["map5_known_single"]
    f = shared.identification_figures(scores, g_ids, q_ids, one_photo=np.array([False, True, True, False]))
    assert f["known_ids_only"] == v["map5_known"] and f["one_photo_ids_only"] == pytest.approx(0.5)
    assert f["top5"] == v["top5"] and f["unfound_share"] == pytest.approx(1 / 4)


@pytest.mark.slow
def test_whole_benchmark_on_a_fake_source(tmp_path, monkeypatch):
    src = fake_source(tmp_path / "src", counts=(1,) * 8 + (3,) * 6 + (5,) * 4)
    monkeypatch.setattr(shared.common, "shared_data", lambda *a: src)
    out = tmp_path / "out"
    assert humpback.main(["--out", str(out), "--methods", "keypoints,pixels,all_new_whale",
                          "--seeds", "0"]) == 0
    result = json.loads((out / "results.json").read_text())
    rows = result["rows"]
    assert result["reference_s"] > 0
    assert {r["method"] for r in rows} == {"keypoints", "keypoints, --tune-new-share 0.276", "pixels", "all_new_whale"}
    kp = next(r for r in rows if r["method"] == "keypoints")
    assert 0 <= kp["map5"] <= 1 and "features" in kp["seconds"] and (out / "seed0" / "keypoints.csv").is_file()


@pytest.mark.slow
def test_screen_compares_settings_on_validation_only(tmp_path, monkeypatch):
    src = fake_source(tmp_path / "src", counts=(1,) * 8 + (3,) * 6 + (5,) * 4)
    monkeypatch.setattr(shared.common, "shared_data", lambda *a: src)
    out = tmp_path / "out"
    lines = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: lines.append(" ".join(map(str, a))))
    assert humpback.main(["--out", str(out), "--screen", "", "verify.shortlist=2", "--screen-fuse"]) == 0
    rows = json.loads((out / "screen.json").read_text())
    assert [r["setting"] for r in rows] == ["(the config as it is)", "verify.shortlist=2",
                                             "mean of the 2 settings' scores", "max of the 2 settings' scores"]
    assert all(0 <= r["map5_known"] <= 1 for r in rows)
    assert not (out / "seed0" / "keypoints").exists()  # no test scoring


def test_breakdown_bins_known_queries_by_gallery_photos(tmp_path):
    from benchmarks.flukes import humpback_breakdown as hb

    seed = tmp_path / "seed0"
    (seed / "data").mkdir(parents=True)
    (seed / "data" / "train.csv").write_text("Image,Id\na.jpg,w1\nb.jpg,w2\nc.jpg,w2\nd.jpg,w3\ne.jpg,w3\nf.jpg,w3\n")
    (seed / "data" / "test_solution.csv").write_text("Image,Id\nq1.jpg,w1\nq2.jpg,w2\nq3.jpg,w3\nq4.jpg,new_whale\n")
    (seed / "keypoints.csv").write_text("Image,Id\nq1.jpg,w1 w2\nq2.jpg,w1 w2\nq3.jpg,w1 w2\nq4.jpg,new_whale\n")
    got = hb.breakdown(seed, "keypoints")
    assert got == {"1": (1, 1.0), "2": (1, 0.5), "3-5": (1, 0.0), "6+": (0, 0.0)}
    assert hb.main([str(tmp_path)]) == 0


def test_mirror_screen_draws_validation_from_train_as_the_test_was(tmp_path, monkeypatch):
    src = fake_source(tmp_path / "src", counts=(1,) * 8 + (2,) * 4 + (3,) * 6 + (5,) * 4)
    monkeypatch.setattr(shared.common, "shared_data", lambda *a: src)
    out = tmp_path / "out"
    monkeypatch.setattr("builtins.print", lambda *a, **k: None)
    assert humpback.main(["--out", str(out), "--screen-on", "mirror", "--screen", ""]) == 0
    g_paths, g_ids, q_paths, q_ids = shared.mirror_split(out / "seed0" / "data", 0)
    train = pd.read_csv(out / "seed0" / "data" / "train.csv")
    known = train[train.Id != NEW_WHALE]
    assert sorted(map(str, g_paths + q_paths)) == sorted(str(out / "seed0" / "data" / "train" / n) for n in train.Image)
    assert set(map(str, g_paths)).isdisjoint(map(str, q_paths))
    assert sorted(q_ids[q_ids != NEW_WHALE]) == sorted(w for w, n in known.Id.value_counts().items() if n >= 2)
    assert (q_ids == NEW_WHALE).sum() == (train.Id == NEW_WHALE).sum()
    assert shared.single_photo_queries(g_ids, q_ids).any()  # whales with one gallery photo, as in the test
    row = json.loads((out / "screen.json").read_text())[0]
    assert row["screen_on"] == "mirror" and 0 <= row["map5_known_single"] <= 1
    assert not (out / "seed0" / "keypoints").exists()  # no test scoring



def test_validation_metrics_report_the_share_the_tuned_threshold_puts_new_whale_first_for():
    g_ids = np.array(["a", "a", "b", "c", "d", "e", "f"])  # d, e, f: whales nobody matches (scores 0)
    scores = np.array([[0.1, 0.9, 0.5, 0.0, 0, 0, 0],    # a first
                       [0.8, 0.0, 0.9, 0.1, 0, 0, 0],    # b first, a second: the truth is a
                       [0.2, 0.1, 0.3, 0.05, 0, 0, 0]], np.float32)  # a new whale: its best score is the lowest
    q_ids = np.array(["a", "a", NEW_WHALE])
    m = shared.validation_metrics(scores, g_ids, q_ids)
    assert m["map5_known"] == pytest.approx(0.75) and m["map5_tuned"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert m["new_whale_first"] == pytest.approx(1 / 3)  # the new whale alone


def test_a_seed_s_results_keep_the_rows_of_other_methods_and_replace_a_method_run_again(tmp_path):
    """Runs of other variants into the same --out add to what --report reads; a method run again replaces its row."""
    path = tmp_path / "results.json"
    first = [{"method": "learned a", "map5": 0.1}, {"method": "fusion a", "map5": 0.2}]
    assert humpback.kept_rows(path, first) == first
    path.write_text(json.dumps(first))
    again = [{"method": "learned b", "map5": 0.3}, {"method": "fusion a", "map5": 0.4}]
    assert humpback.kept_rows(path, again) == [{"method": "learned a", "map5": 0.1}] + again
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="results.json"):
        humpback.kept_rows(path, again)
