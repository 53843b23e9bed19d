"""benchmarks/speed/bench_augment.py: both ways of seeding run and are timed; the former one is deterministic too."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def test_bench_augment_prints_both_timings_and_their_ratio():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "bench_augment.py"), "--images", "20",
                          "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["benchmark"] == "bench_augment" and last["nodes"] == 11  # 1 channel: no ToGray, no HSV
    assert last["ms_shared"] > 0 and last["ms_per_transform"] > 0
    assert abs(last["speedup"] - last["ms_per_transform"] / last["ms_shared"]) < 0.01


def test_the_baseline_is_the_former_augmenter_deterministic_given_the_generator():
    from benchmarks.speed.bench_augment import per_transform_seeding
    from whale.data.augment import Augmenter

    img = np.random.default_rng(3).integers(0, 256, (74, 74, 1), dtype=np.uint8)
    former = per_transform_seeding(Augmenter(64, channels=1))
    a = [former(img, np.random.default_rng(s)) for s in range(4)]
    b = [former(img, np.random.default_rng(s)) for s in range(4)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], a[1])
