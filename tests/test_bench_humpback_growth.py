"""benchmarks/flukes/humpback_growth.py: the grown folder's renditions and labels, and the memory sampler it uses."""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.flukes import shared, humpback_growth as growth  # noqa: E402
from tests.test_bench_humpback import fake_source  # noqa: E402
from whale import NEW_WHALE  # noqa: E402


def test_each_photo_is_added_in_flipped_renditions_as_other_individuals(tmp_path):
    import cv2

    split, truth, _ = shared.build_split(fake_source(tmp_path / "src"), tmp_path / "split", 0, log=lambda *a: None)
    train = pd.read_csv(split / "train.csv")
    grown = growth.grow(split, tmp_path / "x4", 4, log=lambda *a: None)
    rows = pd.read_csv(grown / "train.csv")
    n = len(train) + len(truth)
    assert len(rows) == len(train) + 3 * n  # 4 renditions of every photo: 7,980 -> 31,920 on the real flukes
    assert sorted(p.name for p in (grown / "test").iterdir()) == sorted(truth)  # the queries stay the real ones
    labels = dict(zip(rows["Image"], rows["Id"]))
    for name, individual in zip(train["Image"], train["Id"]):
        stem = Path(name).stem
        for kind, code in growth.RENDITIONS:
            assert labels[f"{kind}_{stem}.jpg"] == (NEW_WHALE if individual == NEW_WHALE else f"{individual}~{kind}")
            got = cv2.imread(str(grown / "train" / f"{kind}_{stem}.jpg")).astype(float)
            want = cv2.flip(cv2.imread(str(split / "train" / name)), code).astype(float)
            assert got.shape == want.shape and np.abs(got - want).mean() < 12  # re-encoded as JPEG
    for name, individual in truth.items():  # a test photo's renditions: its whale's distractors, or new_whale
        assert labels[f"mirror_{Path(name).stem}.jpg"] == (NEW_WHALE if individual == NEW_WHALE else f"{individual}~mirror")
    assert set(rows["Id"]) - {NEW_WHALE} >= {f"{i}~turned" for i in train["Id"] if i != NEW_WHALE}
    two = growth.grow(split, tmp_path / "x2", 2, log=lambda *a: None)
    assert len(pd.read_csv(two / "train.csv")) == len(train) + n
    stamp = (grown / "train.csv").stat().st_mtime_ns
    assert growth.grow(split, tmp_path / "x4", 4) == grown and (grown / "train.csv").stat().st_mtime_ns == stamp


def test_run_measured_reports_the_peak_memory_of_a_child_and_its_workers(tmp_path):
    script = ("import multiprocessing as mp, time\n"
              "def hold(n):\n    b = bytearray(n); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)\n"
              "if __name__ == '__main__':\n    p = mp.get_context('spawn').Process(target=hold, args=(300 << 20,))\n"
              "    p.start(); hold(200 << 20); p.join()\n")
    (tmp_path / "hold.py").write_text(script)  # a file: a spawned worker imports its parent's __main__
    rc, seconds, peak = common.run_measured([sys.executable, str(tmp_path / "hold.py")], tmp_path / "log.txt",
                                            every_s=0.1)
    assert rc == 0 and seconds > 1
    assert peak["anonymous"] > 480 and peak["resident"] >= peak["anonymous"]  # 200 MB here, 300 MB in its worker


def test_a_memory_limit_holds_a_child_under_it_or_kills_it(tmp_path):
    import pytest

    script = tmp_path / "eat.py"
    script.write_text("import sys\nb = bytearray(int(sys.argv[1]) << 20)\nb[::4096] = b'x' * len(b[::4096])\n")
    try:
        roomy = common.MemoryLimit(1)
    except RuntimeError as e:
        pytest.skip(str(e))  # no writable memory cgroup on this machine
    try:
        rc, _, _ = common.run_measured([sys.executable, str(script), "300"], tmp_path / "a.txt", every_s=0.05,
                                       preexec_fn=roomy.preexec)
        assert rc == 0 and roomy.peak_mb() >= 300
    finally:
        roomy.close()
    swap = Path("/proc/swaps").is_file() and len(Path("/proc/swaps").read_text().splitlines()) > 1
    swap_limited = (common.MemoryLimit.V2 / "cgroup.controllers").is_file() or \
        (common.MemoryLimit.V1 / "memory.memsw.limit_in_bytes").is_file()
    if swap and not swap_limited:
        pytest.skip("swap without swap accounting: a child over the limit swaps instead of being killed")
    tight = common.MemoryLimit(0.15)
    try:
        rc, _, _ = common.run_measured([sys.executable, str(script), "300"], tmp_path / "b.txt", every_s=0.05,
                                       preexec_fn=tight.preexec)
        assert rc != 0  # killed: 300 MB do not fit in 150
    finally:
        tight.close()
    assert not tight.path.exists() and not roomy.path.exists()
