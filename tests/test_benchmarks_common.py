"""benchmarks/common.py: the mini-competition builder, one-shot tasks and report helpers; the harness's seeds (one
process each, benchmarks/harness.py).

Tiny fake images only; no TensorFlow, no shared data.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, harness  # noqa: E402
from whale import NEW_WHALE  # noqa: E402
from whale.data import load_competition, read_solution  # noqa: E402
from whale.core.errors import DataError  # noqa: E402


def _images(folder: Path, n: int, fmt: str = "PNG", suffix: str = ".png") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        p = folder / f"src_{i}{suffix}"
        Image.fromarray(rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)).save(p, format=fmt)
        paths.append(p)
    return paths


def test_build_competition_writes_kaggle_layout(tmp_path):
    src = _images(tmp_path / "src", 7)
    train = [(src[0], "a"), (src[1], "a"), (src[2], "b"), (src[3], NEW_WHALE)]
    test = [(src[4], "a"), (src[5], NEW_WHALE), (src[6], "b")]
    out = common.build_competition(tmp_path / "comp", train, test)

    comp = load_competition(out)
    assert list(comp.train["Id"]) == ["a", "a", "b", NEW_WHALE]
    assert comp.test_images == ["te00000.png", "te00001.png", "te00002.png"]
    sol = pd.read_csv(out / "test_solution.csv")
    assert list(sol["Id"]) == ["a", NEW_WHALE, "b"]
    sample = pd.read_csv(out / "sample_submission.csv")
    assert list(sample["Image"]) == comp.test_images and set(sample["Id"]) == {NEW_WHALE}
    # copies are byte-identical and anonymous (no id in the file name)
    assert (out / "train" / "tr00002.png").read_bytes() == src[2].read_bytes()
    assert all("a" not in n and "b" not in n for n in comp.train["Image"])
    assert read_solution(out, comp.test_images) == dict(zip(sol["Image"], sol["Id"]))
    with pytest.raises(DataError, match=r"test_solution\.csv: no row for test image 'te00009\.png'"):
        read_solution(out, ["te00009.png"])


def test_build_competition_rebuilds_and_renames_suffix(tmp_path):
    src = _images(tmp_path / "src", 3, fmt="JPEG", suffix=".png")  # JPEG despite .png, as the lions
    out = common.build_competition(tmp_path / "comp", [(s, "x") for s in src], [], suffix=".jpg")
    assert sorted(p.name for p in (out / "train").iterdir()) == ["tr00000.jpg", "tr00001.jpg", "tr00002.jpg"]
    out = common.build_competition(tmp_path / "comp", [(src[0], "x")], [(src[1], "x")], suffix=".jpg")
    assert [p.name for p in (out / "train").iterdir()] == ["tr00000.jpg"]  # old copies gone
    assert load_competition(out).test_images == ["te00000.jpg"]


def test_build_competition_rejects_missing_file_and_empty_id(tmp_path):
    src = _images(tmp_path / "src", 1)
    with pytest.raises(ValueError, match="not found"):
        common.build_competition(tmp_path / "c1", [(tmp_path / "nope.png", "a")])
    with pytest.raises(ValueError, match="empty id"):
        common.build_competition(tmp_path / "c2", [(src[0], " ")])


def _grid(n_ids=30, n_groups=5, n_families=2):
    ids = [f"c{i}" for i in range(n_ids) for _ in range(n_groups)]
    groups = [f"d{g}" for _ in range(n_ids) for g in range(n_groups)]
    fams = [f"f{i % n_families}" for i in range(n_ids) for _ in range(n_groups)]
    return np.array(ids), np.array(groups), np.array(fams)


def test_one_shot_tasks_structure():
    ids, groups, fams = _grid()
    tasks = common.one_shot_tasks(ids, groups, n_way=5, n_tasks=12, seed=3, families=fams)
    assert len(tasks) == 12
    for gallery, queries in tasks:
        assert gallery.shape == queries.shape == (5,)
        assert list(ids[gallery]) == list(ids[queries])          # query i belongs with gallery i
        assert len(set(ids[gallery])) == 5                        # distinct ids
        assert len(set(groups[gallery])) == 1 and len(set(groups[queries])) == 1
        assert groups[gallery][0] != groups[queries][0]           # two different drawers
        assert len(set(fams[gallery])) == 1                       # one alphabet per task
    again = common.one_shot_tasks(ids, groups, n_way=5, n_tasks=12, seed=3, families=fams)
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(tasks, again))


def test_one_shot_tasks_falls_back_to_all_families_and_checks_size():
    ids, groups, fams = _grid(n_ids=8, n_families=4)  # 2 ids per family < n_way
    tasks = common.one_shot_tasks(ids, groups, n_way=6, n_tasks=3, seed=0, families=fams)
    assert all(len(set(fams[g])) > 1 for g, _ in tasks)
    with pytest.raises(ValueError, match="share 9 ids"):
        common.one_shot_tasks(ids, groups, n_way=9, n_tasks=1)


def test_one_shot_accuracy_counts_argmax():
    tasks = [(np.arange(3), np.arange(3, 6))]
    perfect = lambda q, g: np.eye(3)  # noqa: E731
    assert common.one_shot_accuracy(perfect, tasks) == 1.0
    one_wrong = lambda q, g: np.array([[1, 0, 0], [0, 1, 0], [0, 2, 1.0]])  # noqa: E731
    assert common.one_shot_accuracy(one_wrong, tasks * 2) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="shape"):
        common.one_shot_accuracy(lambda q, g: np.zeros((2, 3)), tasks)


def test_pixel_method_on_a_mini_competition(tmp_path):
    """Identical copies are found by the pixel baseline: top-1 = 1 on known test images."""
    src = _images(tmp_path / "src", 12)
    train = [(src[i], f"id{i // 3}") for i in range(12)]          # 4 ids x 3 images
    train += [(src[i], NEW_WHALE) for i in (0,)]                   # one new_whale row
    test = [(src[1], "id0"), (src[4], "id1"), (src[7], "id2"), (src[10], "id3")]
    comp = common.build_competition(tmp_path / "comp", train, test)
    res = common.evaluate_competition(common.PixelMethod(size=8, channels=1), comp)
    assert res["top1"] == 1.0 and res["top10"] == 1.0
    assert set(res) == {"val_map5", "threshold", "map5", "top1", "top5", "top10", "new_whale_share"}


def test_evaluate_competition_breaks_top_k_down_by_group(tmp_path):
    """Per group, on hand-made hits and misses: a copy of its own id's image is found, a copy of
    another id's image is not."""
    src = _images(tmp_path / "src", 12)
    train = [(src[i], f"id{i // 3}") for i in range(12)]
    test = [(src[1], "id0"), (src[4], "id1"), (src[7], "id0"), (src[10], "id3"), (src[0], NEW_WHALE)]
    comp = common.build_competition(tmp_path / "comp", train, test)
    groups = {"te00000.png": "a", "te00001.png": "a", "te00002.png": "b", "te00003.png": "b"}
    res = common.evaluate_competition(common.PixelMethod(size=8, channels=1), comp, groups=groups)
    assert res["by_group"]["a"] == {"n": 2, "top1": 1.0, "top5": 1.0, "top10": 1.0}
    assert res["by_group"]["b"]["n"] == 2 and res["by_group"]["b"]["top1"] == 0.5  # te00002 is id2's image
    assert res["top1"] == 0.75


def test_lion_views_name_each_test_photo_of_a_known_lion(tmp_path):
    from benchmarks.seeds.lions import index_lions, lion_competition, view_of

    assert [view_of(Path(f"Ayo_{v}.png"), "Ayo") for v in ("Left_Face", "Portrait", "Right_ear", "Nose",
                                                            "Whiskers", "Teeth", "Left_Body", "Tail", "Paw")] == \
        ["face", "face", "ear", "nose", "whiskers", "teeth", "body", "body", "other"]
    assert view_of(Path("Earl_Nose.png"), "Earl") == "nose"  # the name's own letters do not count
    rng = np.random.default_rng(1)
    for part, lion, views in (("train", "Ayo", ("Left_Face", "Nose", "Left_Ear", "Teeth")),
                              ("train", "Earl", ("Portrait", "Whiskers", "Right_Body")),
                              ("val", "Zed", ("Nose", "Portrait"))):
        (tmp_path / "src" / part / lion).mkdir(parents=True)
        for v in views:
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(
                tmp_path / "src" / part / lion / f"{lion}_{v}.png", format="JPEG")
    lions = index_lions(tmp_path / "src")
    comp, views = lion_competition(lions, tmp_path / "comp", seed=0)
    sol = pd.read_csv(comp / "test_solution.csv")
    assert sorted(views) == sorted(sol.loc[sol["Id"] != NEW_WHALE, "Image"]) and len(views) >= 2
    source = {p.read_bytes(): (p, lion) for ls in lions.values() for lion, ps in ls.items() for p in ps}
    for name, view in views.items():
        photo, lion = source[(comp / "test" / name).read_bytes()]
        assert view == view_of(photo, lion)


def test_random_negatives_and_quick_config():
    from whale.config import config_from_dict

    cfg = config_from_dict({"name": "x", "stages": [
        {"epochs": 4, "k": 1000.0, "lr": 1e-3, "image_size": 32},
        {"epochs": 6, "k": 1.0, "k_end": 0.1, "lr": 5e-4, "image_size": 32}]})
    rnd = common.random_negatives(cfg)
    assert [(s.epochs, s.k, s.k_end) for s in rnd.stages] == [(4, 1000.0, None), (6, 1000.0, None)]
    assert rnd.total_epochs == cfg.total_epochs and rnd.name == "x-random"
    assert [s.epochs for s in common.quick_config(cfg, 0.2).stages] == [1, 1]
    in_steps = config_from_dict({"name": "y", "stages": [{"steps": 500, "k": 1.0, "lr": 1e-3, "image_size": 32}]})
    assert common.quick_config(in_steps, 0.2).stages[0].steps == 100


def test_synthetic_variant_config_sets_batching_and_scales_the_demo_s_stages():
    from benchmarks.seeds import synthetic
    from whale.config import load_config

    demo = load_config(common.repo_root() / "configs" / "demo.yaml")
    longer = synthetic.variant_config(demo, "images", 1.5)
    assert longer.batching == "images"
    assert [s.epochs for s in longer.stages] == [round(1.5 * s.epochs) for s in demo.stages]
    assert [(s.k, s.k_end, s.lr) for s in longer.stages] == [(s.k, s.k_end, s.lr) for s in demo.stages]
    assert synthetic.variant_config(demo, "pairs").stages == demo.stages


def test_reports():
    table = common.results_table([{"m": "a", "v": 0.5}, {"m": "b", "v": None}], [("m", "M"), ("v", "V")])
    assert table.splitlines() == ["| M | V |", "| --- | --- |", "| a | 0.500 |", "| b | - |"]
    assert "helps" in common.miner_verdict(0.8, 0.7, "x") and "+0.100" in common.miner_verdict(0.8, 0.7, "x")
    assert "hurts" in common.miner_verdict(0.6, 0.7, "x")
    line = json.loads(common.final_json("b", {"acc": 0.123456, "n": 3}, 12.34))
    assert line == {"benchmark": "b", "metrics": {"acc": 0.1235, "n": 3}, "seconds": 12.3}
    assert common.training_budget(0, 0.0) is None


def test_mean_sd_and_seed_table():
    s = common.mean_sd([0.8, 0.9, 1.0])
    assert s["mean"] == pytest.approx(0.9) and s["sd"] == pytest.approx(0.1)
    assert s["se"] == pytest.approx(0.1 / np.sqrt(3)) and s["n"] == 3
    table, summary = common.seed_table([{"seed": 0, "a": 0.5}, {"seed": 1, "a": 0.7}], [("a", "A")])
    assert "| 0 | 0.500 |" in table and "0.600 +- 0.141" in table and summary["a"]["n"] == 2


def test_omniglot_leak_free_drops_shared_alphabets_and_checks_bytes(tmp_path):
    from benchmarks.seeds import omniglot

    def img(name, content):
        p = tmp_path / name
        p.write_bytes(content)
        return p

    train = [{"path": img("t1.png", b"a"), "id": "Greek_c1", "alphabet": "Greek", "drawer": "01"},
             {"path": img("t2.png", b"b"), "id": "Korean_c1", "alphabet": "Korean", "drawer": "01"}]
    evals = [{"path": img("e1.png", b"a"), "id": "Greek_c1", "alphabet": "Greek", "drawer": "01"},
             {"path": img("e2.png", b"c"), "id": "Tagalog_c1", "alphabet": "Tagalog", "drawer": "01"}]
    kept = omniglot.leak_free(train, evals, log=lambda m: None)
    assert [r["id"] for r in kept] == ["Tagalog_c1"]
    evals.append({"path": img("e3.png", b"b"), "id": "Tagalog_c2", "alphabet": "Tagalog", "drawer": "02"})
    with pytest.raises(RuntimeError, match="bytes of a training image"):
        omniglot.leak_free(train, evals, log=lambda m: None)
    evals[-1] = {"path": img("e4.png", b"d"), "id": "Korean_c1", "alphabet": "Tagalog", "drawer": "02"}
    with pytest.raises(RuntimeError, match="evaluation ids are training ids"):
        omniglot.leak_free(train, evals, log=lambda m: None)


def test_run_seeds_runs_each_seed_and_reports_failures(tmp_path):
    script = tmp_path / "fake.py"
    script.write_text(
        "import argparse, json\n"
        "p = argparse.ArgumentParser(); p.add_argument('--seed', type=int); p.add_argument('--out')\n"
        "p.add_argument('--scale', type=float)\n"
        "a = p.parse_args()\n"
        "if a.seed == 13: raise SystemExit(3)\n"
        "print('working'); print(json.dumps({'benchmark': 'fake', 'metrics': {'x': a.seed * a.scale}, 'seconds': 1}))\n")
    res = harness.run_seeds(script, ["--scale", "0.5"], [2, 0, 1], tmp_path / "out", jobs=2, log=lambda m: None)
    assert [(r["seed"], r["x"]) for r in res] == [(2, 1.0), (0, 0.0), (1, 0.5)]
    assert (tmp_path / "out" / "seed2.log").read_text().startswith("working")
    # split: one process per (seed, method), merged per seed
    script.write_text(script.read_text().replace("p.add_argument('--scale', type=float)\n",
                                                 "p.add_argument('--scale', type=float); p.add_argument('--methods')\n")
                      .replace("{'x': a.seed * a.scale}", "{'x_' + a.methods: a.seed * a.scale}"))
    res = harness.run_seeds(script, ["--scale", "2"], [0, 1], tmp_path / "split", jobs=4, split=["a", "b"],
                           log=lambda m: None)
    assert res == [{"seed": 0, "x_a": 0.0, "x_b": 0.0, "seconds": 1}, {"seed": 1, "x_a": 2.0, "x_b": 2.0, "seconds": 1}]
    assert (tmp_path / "split" / "seed1-b.log").is_file()
    with pytest.raises(RuntimeError, match="seed 13 failed .*seed13.log"):
        harness.run_seeds(script, ["--scale", "1"], [13], tmp_path / "out", log=lambda m: None)


def test_omniglot_several_seeds_summarises(tmp_path, monkeypatch, capsys):
    from benchmarks.seeds import omniglot

    def fake(script, argv, seeds, out, jobs=1, log=print, split=None):
        assert "--seeds" not in argv and "--out" not in argv and "--gpu" in argv
        assert split == ["random", "adversarial"]  # 6 jobs >= 3 seeds x 2 methods: one process each
        keys = [k for k, _ in omniglot.SEED_KEYS if not k.startswith("miner_gap")]
        return [{"seed": s, **{k: 0.1 * (s + 1) for k in keys}} for s in seeds]

    monkeypatch.setattr(harness, "run_seeds", fake)
    assert omniglot.main(["--out", str(tmp_path), "--seeds", "0,1,2", "--jobs", "6", "--gpu"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["metrics"]["one_shot_adversarial_mean"] == pytest.approx(0.2)
    assert last["metrics"]["one_shot_adversarial_sd"] == pytest.approx(0.1)
    assert json.loads((tmp_path / "summary.json").read_text())["summary"]["map5_random"]["n"] == 3


def test_synthetic_several_seeds_summarises(tmp_path, monkeypatch, capsys):
    from benchmarks.seeds import synthetic

    def fake(script, argv, seeds, out, jobs=1, log=print, split=None):
        assert split is None and script.name == "synthetic.py"  # 2 jobs < 3 seeds x 2 methods
        return [{"seed": s, "map5_adversarial": 0.5 + 0.1 * s, "map5_random": 0.5, "map5_pixel": 0.4}
                for s in seeds]

    monkeypatch.setattr(harness, "run_seeds", fake)
    assert synthetic.main(["--out", str(tmp_path), "--seeds", "0,1,2", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "miner gap on map5: +0.100 +- 0.058" in out
    assert json.loads(out.strip().splitlines()[-1])["metrics"]["miner_gap_map5_mean"] == pytest.approx(0.1)


def test_with_boxes_copies_the_competition_with_the_given_boxes_and_refuses_a_file_missing_one(tmp_path):
    from whale.data.synth import generate

    comp = generate(tmp_path / "comp", n_ids=5, seed=4, progress=False)
    boxes = pd.read_csv(comp / "bounding_boxes.csv")
    boxes[["x0", "y0"]] += 3  # "predicted": every box moved by 3 pixels
    boxes.to_csv(tmp_path / "moved.csv", index=False)
    out = common.with_boxes(comp, tmp_path / "moved.csv", tmp_path / "copy")
    moved, orig = load_competition(out), load_competition(comp)
    name = boxes["Image"].iloc[0]
    assert np.allclose(np.asarray(moved.boxes[name])[:2], np.asarray(orig.boxes[name])[:2] + 3)
    assert list(moved.test_images) == list(orig.test_images) and (out / "train").resolve() == (comp / "train").resolve()
    boxes.iloc[1:].to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(ValueError, match=f"no box for 1 of .* e.g. {name}"):
        common.with_boxes(comp, tmp_path / "short.csv", tmp_path / "copy2")
