"""benchmarks/speed/verify_threads.py: every thread count timed on real flukes, each giving one thread's output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLUKES = ROOT.parent / "shared" / "data" / "humpback"


@pytest.mark.skipif(not (FLUKES / "train.csv").is_file(), reason="the shared flukes are not beside this checkout")
def test_the_benchmark_times_each_thread_count_and_checks_its_output_against_one_thread(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "verify_threads.py"), "--gallery", "24",
                          "--queries", "8", "--threads", "1,2", "--repeats", "1", "--cache", str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["benchmark"] == "verify_threads" and last["gallery"] == 24 and last["queries"] == 8
    assert last["pairs_described"] > 0 and last["machine_reference_s"] > 0
    one, two = last["threads"]["1"], last["threads"]["2"]
    assert one["ratio_to_baseline"] == 1.0 and one["same_as_baseline"] and two["same_as_baseline"]
    assert two["seconds"] > 0 and abs(two["ratio_to_baseline"] - one["seconds"] / two["seconds"]) < 0.02
