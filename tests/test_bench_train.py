"""benchmarks/speed/bench_train.py --quick: runs on CPU, prints the three rates, writes a rates file --plan reads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_train_quick_prints_rates_that_plan_reads(tmp_path):
    from whale.training.plan import load_rates

    out = tmp_path / "rates.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "bench_train.py"), "--quick",
                          "--batchings", "pairs,images", "--out", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["benchmark"] == "bench_train"
    assert [(r["branch"], r["image_size"], r["precision"], r.get("batching")) for r in last["rates"]] == [
        ("tiny", 32, "float32", None), ("tiny", 32, "float32", "images"),
        ("tiny", 32, "mixed_bfloat16", None), ("tiny", 32, "mixed_bfloat16", "images")]
    for pairs, images in (last["rates"][0:2], last["rates"][2:4]):
        assert images["end_to_end_over_pairs"] == pytest.approx(
            images["end_to_end_pairs_s"] / pairs["end_to_end_pairs_s"], abs=1e-3)
        assert f"batching images / pairs, end to end: {images['end_to_end_over_pairs']:.2f}x" in res.stdout
    for r in last["rates"]:
        assert r["model_pairs_s"] > 0 and r["pipeline_pairs_s"] > 0 and r["end_to_end_pairs_s"] > 0
        assert r["end_to_end_over_model"] == pytest.approx(r["end_to_end_pairs_s"] / r["model_pairs_s"], abs=1e-3)
    assert load_rates(out) == last["rates"]
