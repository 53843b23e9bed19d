"""benchmarks/seeds/box_heads.py --quick --refine: both VGG heads and the refiner (at the shipped margins and at one)
cross-validated on every seed, figures consistent with run.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # 2-3 minutes: the benchmark's whole --quick run
def test_box_heads_quick_reports_both_heads_and_the_refiner_on_each_seed(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds" / "box_heads.py"), "--out", str(tmp_path),
                          "--seeds", "0,1", "--quick", "--refine"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    m = json.loads(lines[-1])["metrics"]
    runs = {(h, s): json.loads((tmp_path / f"{h}_seed{s}" / "run.json").read_text())
            for h in ("dense", "integral") for s in (0, 1)}
    for head in ("dense", "integral"):
        ious = [runs[head, s]["cv"]["vgg"]["mean_iou"] for s in (0, 1)]
        assert m[f"iou_{head}"] == pytest.approx(sum(ious) / 2, abs=1e-4)
        assert all(f"{head} head: cross-validated mean IoU {iou:.4f}" in res.stdout
                   for iou in ious)
    assert m["gain"] == pytest.approx(m["iou_integral"] - m["iou_dense"], abs=2e-4)
    refined = [runs["integral", s]["cv"]["refined"]["mean_iou"] for s in (0, 1)]
    assert m["iou_refined"] == pytest.approx(sum(refined) / 2, abs=1e-4)
    assert m["gain_refined"] == pytest.approx(m["iou_refined"] - m["iou_integral"], abs=2e-4)
    assert "refined" not in runs["dense", 0]["cv"]  # the refiner rides on the last head only
    assert all(f"integral head + refiner: cross-validated mean IoU {iou:.4f}" in res.stdout for iou in refined)
    # the shipped refine_margins: the same refiners also scored at the training margin alone, side by side
    assert m["gain_margins"] == pytest.approx(m["iou_refined"] - m["iou_one_margin"], abs=2e-4)
    assert "integral head + refiner at margin 0.25 alone: cross-validated mean IoU" in res.stdout
    assert m["seeds"] == [0, 1]
    cfg = (tmp_path / "integral_seed1" / "config.yaml").read_text()
    assert "vgg_head: integral" in cfg and "seed: 1" in cfg
