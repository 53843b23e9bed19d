"""benchmarks/speed/scorer_rebuild.py: runs on CPU, scores every head like head.predict, prints its JSON line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_scorer_rebuild_runs_and_checks_every_head_against_predict(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "scorer_rebuild.py"), "--heads", "3",
                          "--n", "40", "--d", "8", "--mid", "4", "--rate-n", "100", "--rate-d", "16"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert sum(line.startswith("head ") and "exact formula: True" in line for line in lines) == 3
    last = json.loads(lines[-1])
    assert last["benchmark"] == "scorer_rebuild"
    m = last["metrics"]
    assert (m["n"], m["d"], m["mid"], m["hidden"]) == (40, 8, 4, 0)
    assert float(m["max_abs_diff"]) < 1e-5
    assert m["first_s"] > 0 and m["later_mean_s"] > 0
    assert m["rate_arguments"] > 0 and m["rate_constants"] > 0
    assert m["rate_ratio_constants"] == pytest.approx(m["rate_constants"] / m["rate_arguments"], rel=1e-2)
