"""benchmarks/speed/trunk_rate.py: the baseline variant timed in its own process, its augmentation and projection."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLUKES = ROOT.parent / "shared" / "data" / "humpback"


@pytest.mark.skipif(not (FLUKES / "train").is_dir(), reason="the shared flukes are not beside this checkout")
def test_the_benchmark_times_the_trunk_per_variant_and_projects_the_baselines_rate():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "trunk_rate.py"), "--batches", "1",
                          "--variants", "tensorflow:float32", "--photos", "1000"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["benchmark"] == "trunk_rate" and last["config"] == "flukes_lite0_cpu_long.yaml"
    (variant, row), = last["rows"].items()
    assert variant == "tensorflow:float32" and row["crops_per_s"] > 0 and row["views"] == 8
    assert row["augment_ms_a_view"] > 0 and last["reference_s"] > 0
    projection = last["projection"]
    assert projection["crops"] == 9000
    assert projection["trunk_minutes"] == pytest.approx(9000 / row["crops_per_s"] / 60)
    assert "1.00x the baseline" in res.stdout
