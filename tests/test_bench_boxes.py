"""benchmarks/boxes.py --quick: every step runs and the printed figures are the run's own (run.json, the boxes file)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_boxes_benchmark_quick_reports_the_cross_validation_and_both_map_figures(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "boxes.py"), "--out", str(tmp_path),
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
