"""benchmarks/seeds/boxes.py: the labels avoid the scored images; --quick runs every step and prints the run's own
figures."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def test_labels_never_include_an_image_whose_bytes_are_in_a_scored_competition(tmp_path):
    from benchmarks.seeds import boxes
    from benchmarks import common
    from whale.data.synth import generate

    lab = generate(tmp_path / "lab", n_ids=12, seed=3, progress=False)
    names = [r["Image"] for r in csv.DictReader(open(lab / "train.csv"))]
    scored = generate(tmp_path / "scored", n_ids=5, seed=4, progress=False)
    planted = names[:6]  # six labelling images written over six of the scored competition's test images
    tests = [r["Image"] for r in csv.DictReader(open(scored / "sample_submission.csv"))]
    for name, target in zip(planted, tests):
        shutil.copy(lab / "train" / name, scored / "test" / target)
    unseen = boxes.competition_digests(scored)
    assert set(common.byte_digests([lab / "train" / m for m in planted])) <= unseen
    out = boxes.label_subset(lab, len(names) - 6, 0, tmp_path / "labels.csv", unseen)
    chosen = [r["Image"] for r in csv.DictReader(open(out))]
    assert len(chosen) == len(names) - 6 and not set(chosen) & set(planted)
    with pytest.raises(SystemExit, match="not in a scored competition"):
        boxes.label_subset(lab, len(names) - 5, 0, tmp_path / "labels2.csv", unseen)


@pytest.mark.slow
def test_boxes_benchmark_quick_reports_the_cross_validation_and_both_map_figures(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds" / "boxes.py"), "--out", str(tmp_path),
                          "--quick", "--labels", "120", "--set", "image_size=32", "--set", "refine_size=32",
                          "--set", "refine_passes=1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])["metrics"]
    meta = json.loads((tmp_path / "box_run" / "run.json").read_text())
    for name in ("vgg", "retinanet", "average", "refined"):
        assert m[f"cv_iou_{name}"] == pytest.approx(meta["cv"][name]["mean_iou"], abs=1e-4)
    assert meta["refine_from"] in ("vgg", "retinanet", "average")
    assert f"refined from {meta['refine_from']}" in res.stdout
    # the machine's speed, probed in the same run under each backend installed (both are, in .venv)
    assert m["backend"] == os.environ.get("KERAS_BACKEND", "tensorflow") and m["probe_img_s_tensorflow"] > 0 and m["probe_img_s_jax"] > 0
    assert f"tensorflow {m['probe_img_s_tensorflow']:.0f} img/s" in res.stdout
    for key in ("test_map_true", "test_map_predicted", "val_map_true", "val_map_predicted"):
        assert 0.0 <= m[key] <= 1.0
    rows = (tmp_path / "predicted_bounding_boxes.csv").read_text().splitlines()
    demo = tmp_path / "demo_data"
    n_images = len((demo / "train.csv").read_text().splitlines()) - 1 + len(list((demo / "test").iterdir()))
    assert rows[0] == "Image,x0,y0,x1,y1" and len(rows) - 1 == n_images
    assert (tmp_path / "demo_data_predicted" / "bounding_boxes.csv").read_text().splitlines() == rows

    # --demo-runs: the same trained run, scored again on the competition its run.json names
    again = tmp_path / "again"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds" / "boxes.py"), "--out", str(again),
                          "--quick", "--labels", "120", "--set", "image_size=32", "--set", "refine_size=32", "--set",
                          "refine_passes=1", "--no-probe", "--demo-runs", str(tmp_path / "demo_run"),
                          str(tmp_path / "demo_run"), "--tta", "shift_left,zoom"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    m2 = json.loads(res.stdout.strip().splitlines()[-1])["metrics"]
    assert [r["run"] for r in m2["runs"]] == [str(tmp_path / "demo_run")] * 4  # each run: plain, then with views
    plain = [r for r in m2["runs"] if r["scoring"] == "plain"]
    tta = [r for r in m2["runs"] if r["scoring"] == "plain+shift_left+zoom"]
    assert len(plain) == len(tta) == 2 and m2["tta"] == ["shift_left", "zoom"]
    assert plain[0]["test_true"] == pytest.approx(m["test_map_true"], abs=1e-4)  # same model, same boxes
    assert m2["test_gap_mean"] == pytest.approx(plain[0]["test_pred"] - plain[0]["test_true"], abs=2e-4)
    assert m2["test_gap_tta_mean"] == pytest.approx(tta[0]["test_pred"] - tta[0]["test_true"], abs=2e-4)
    assert "mean +- sd over the runs (plain)" in res.stdout and "mean +- sd over the runs (tta)" in res.stdout


def test_tta_views_are_checked_against_the_known_views():
    import argparse

    from benchmarks.seeds import boxes

    assert boxes.tta_views("shift_left, zoom") == ("shift_left", "zoom")
    for bad in ("shift_up", "", "zoom,tilt"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected views from shift_left"):
            boxes.tta_views(bad)
