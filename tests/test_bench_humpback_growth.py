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


def test_a_size_by_recipe_runs_the_whole_recipe_and_evaluates_each_submission(tmp_path):
    """``--recipe``: the grown folder through ``whale recipe`` (here two ``whale ensemble`` steps over two matchers'
    score files and a check): each step's seconds and peak memory, each submission ranked by the scores it was made
    from (the fusion kept beside it; one run's own file), the table, and a second call reads the result back."""
    import json
    from types import SimpleNamespace

    from tests.test_bench_humpback_learned import _matcher_files, fake_source as learned_source
    from whale.inference.scorefile import load_score_file

    split, truth, _ = shared.build_split(learned_source(tmp_path / "src"), tmp_path / "split", 0, log=lambda *a: None)
    work = tmp_path / "out" / "x1"
    comp = growth.grow(split, work / "data", 1, log=lambda *a: None)
    for seed, name in enumerate("ab"):
        (work / "recipe" / name).mkdir(parents=True)
        _matcher_files(comp, work / "recipe" / name, seed)
    recipe = tmp_path / "two.yaml"
    recipe.write_text(
        "steps:\n"
        "  - {name: fused, run: 'whale ensemble {out}/a {out}/b --tune --fusion logodds --out {out}/submission.csv "
        "--sample {data}/sample_submission.csv'}\n"
        "  - {name: alone, run: 'whale ensemble {out}/a --tune --out {out}/a.csv --sample {data}/sample_submission.csv'}\n"
        "  - {name: check, run: 'whale submission check {out}/submission.csv --sample {data}/sample_submission.csv'}\n")
    args = SimpleNamespace(out=str(tmp_path / "out"), recipe=str(recipe), cache=None, memory_limit_gb=None,
                           reference=1.5)
    row = growth.measure_recipe(args, split, truth, 1, log=lambda *a: None)
    assert [s["name"] for s in row["steps"]] == ["fused", "alone", "check"]
    assert all(s["status"] == "ran" and s["seconds"] > 0 for s in row["steps"])
    assert row["photos"] == len(pd.read_csv(split / "train.csv")) + len(truth) and row["seconds"] > 0
    alone, fused = row["submissions"]["alone"], row["submissions"]["fused"]
    a = load_score_file(work / "recipe" / "a" / "test.npz")
    assert alone["map5_known_no_new"] == shared.ranking_metrics(a.scores, a.query, a.gallery_ids, truth)["map5_known_no_new"]
    assert 0 <= fused["map5"] <= 1 and 0 <= fused["map5_known_no_new"] <= 1
    assert (work / "recipe" / "submission.calibration.json").is_file()
    text = growth.recipe_table([row])
    assert "`fused` s (peak MB)" in text and "`alone` MAP@5 all; known, ids only" in text
    assert f"{alone['map5']:.3f}; {alone['map5_known_no_new']:.3f}" in text
    assert growth.measure_recipe(args, split, truth, 1, log=lambda *a: None) == json.loads(
        (work / "result.json").read_text())


def test_the_measured_script_reports_a_commands_status_and_its_own_memory(tmp_path, capsys):
    import json

    from benchmarks.speed import measured

    script = "b = bytearray(150 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(0.8)"
    assert measured.main(["--log", str(tmp_path / "log.txt"), "--", sys.executable, "-c", script]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["exit_status"] == 0 and row["peak_own_mb"] > 140 and row["peak_resident_mb"] >= row["peak_own_mb"]
    assert measured.main(["--log", str(tmp_path / "log.txt"), "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
