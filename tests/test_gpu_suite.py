"""benchmarks/gpu/gpu_suite.py: the budget (a step that does not fit is recorded as skipped, a resumed
suite keeps what was done), the files it writes after each step (suite.json, suite.md, a rates
file that whale.training.plan reads back), and --quick on the CPU so the suite cannot rot between
GPU sessions. benchmarks/gpu/gpu_wheels.py: the pins come from requirements.txt."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gpu import gpu_suite, gpu_wheels  # noqa: E402


class FakeClock:
    """Time moves only when a fake step runs."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _steps():
    S = gpu_suite.Step
    return [S("rates_densenet121_512_bf16", "a rate", "step_rates", 100, 100),
            S("head_matrix", "the head", "step_head_matrix", 50, 50),
            S("mining_exact", "too long for what is left", "step_mining", 400, 400),
            S("objectives", "short enough", "step_objectives", 20, 20)]


def _fake_runner(clock, seconds):
    def run(step, left):
        clock.t += seconds[step.name]
        if step.name == "rates_densenet121_512_bf16":
            return {"status": "done", "device": {"backend": "fake", "device": "no GPU"},
                    "figures": {"rate": {"branch": "densenet121", "image_size": 512, "precision": "mixed_bfloat16",
                                         "batch_size": 32, "workers": 4, "model_pairs_s": 200.0,
                                         "pipeline_pairs_s": 300.0, "end_to_end_pairs_s": 190.0,
                                         "end_to_end_over_model": 0.95, "model_compile_s": 150.0,
                                         "inference_images_s": 500.0}}}
        if step.name == "head_matrix":
            return {"status": "failed", "error": "RuntimeError: out of memory"}
        return {"status": "done", "figures": {"skipped": "nothing to time"}}
    return run


def test_budget_skips_what_does_not_fit_and_resume_keeps_what_was_done(tmp_path, monkeypatch):
    from whale.training.plan import load_rates

    monkeypatch.setattr(gpu_suite, "STEPS", tuple(_steps()))
    args = gpu_suite.parse_args(["--out", str(tmp_path / "o"), "--budget-minutes", "5", "--in-process",
                                 "--mirror", str(tmp_path / "m")])
    clock = FakeClock()
    data = gpu_suite.run_suite(args, runner=_fake_runner(clock, {"rates_densenet121_512_bf16": 120,
                                                                  "head_matrix": 30, "objectives": 5}),
                               clock=clock)
    rows = data["steps"]
    assert rows["rates_densenet121_512_bf16"]["status"] == "done"
    assert rows["head_matrix"]["status"] == "failed" and "out of memory" in rows["head_matrix"]["error"]
    # 300 - 150 = 150 s left: the 400 s step is skipped with its reason, the 20 s one after it still runs.
    assert rows["mining_exact"] == {"title": "too long for what is left", "status": "skipped",
                                    "reason": "estimated 400 s, 150 s left of the budget", "estimate_s": 400}
    assert rows["objectives"]["status"] == "skipped" and rows["objectives"]["reason"] == "nothing to time"
    assert data["spent_s"] == 155.0 and data["calls"][-1]["device"] == "no GPU"
    out = tmp_path / "o"
    assert json.loads((out / "suite.json").read_text()) == data
    md = (out / "suite.md").read_text()
    assert "| mining_exact | skipped | - | 400 | estimated 400 s, 150 s left of the budget |" in md
    assert "| densenet121 | 512 | mixed_bfloat16 | 32 | 4 | 200.0 | 300.0 | 190.0 | 0.950 | met |" in md
    # 5 epochs x 2 x 10,861 pairs / 190 pairs/s = 571.7 s; features 10,861 / 500 = 21.7 s.
    assert "of one 512 px mining interval (572 s" not in md  # no mining step done: no share line
    rates = load_rates(out / "rates.json")
    assert rates == [data["steps"]["rates_densenet121_512_bf16"]["figures"]["rate"]]
    for name in ("suite.json", "suite.md", "rates.json", "suite.log"):
        assert (tmp_path / "m" / name).read_bytes() == (out / name).read_bytes()

    # A second call with --resume: the done step is kept, the others are tried again with what is left.
    args = gpu_suite.parse_args(["--out", str(out), "--budget-minutes", "10", "--in-process", "--resume"])
    ran = []

    def runner(step, left):
        ran.append((step.name, left))
        return {"status": "killed", "error": "stopped"}

    data = gpu_suite.run_suite(args, runner=runner, clock=FakeClock())
    assert [n for n, _ in ran] == ["head_matrix", "mining_exact", "objectives"]
    assert ran[0][1] == 600 - 155.0
    assert data["steps"]["rates_densenet121_512_bf16"]["figures"]["rate"]["model_pairs_s"] == 200.0
    assert len(data["calls"]) == 2 and data["steps"]["objectives"]["status"] == "killed"


def test_call_limit_and_the_markdown_of_mining_and_omniglot():
    data = {"quick": False, "budget_s": 1500, "spent_s": 600, "calls": [{"device": "H100", "backend": "jax"}],
            "steps": {
                "rates_densenet121_512_bf16": {"title": "r", "status": "done", "seconds": 400, "estimate_s": 480,
                                               "figures": {"rate": {
                                                   "branch": "densenet121", "image_size": 512,
                                                   "precision": "mixed_bfloat16", "batch_size": 32, "workers": 4,
                                                   "model_pairs_s": 200.0, "pipeline_pairs_s": 150.0,
                                                   "end_to_end_pairs_s": 190.0, "end_to_end_over_model": 0.95,
                                                   "model_compile_s": 150.0, "inference_images_s": 500.0}}},
                "mining_pruned": {"title": "m", "status": "done", "seconds": 30, "estimate_s": 120, "figures": {
                    "mode": "pruned", "n": 15697, "d": 1024, "k": 0.25, "epochs": 5, "mining_s": 20.0,
                    "mining_s_per_epoch": 4.0, "pairs_scored": 10, "fallback_pairs": 0, "mean_mined_score": 0.5,
                    "compile_s": 1.0}},
                "omniglot_seed0": {"title": "o", "status": "done", "seconds": 420, "estimate_s": 450,
                                   "figures": {"seed": 0, "one_shot_adversarial": 0.5, "miner_gap_one_shot": 0.04,
                                               "miner_gap_map5": 0.03}},
                "omniglot_seed1": {"title": "o", "status": "done", "seconds": 420, "estimate_s": 450,
                                   "figures": {"seed": 1, "one_shot_adversarial": 0.6, "miner_gap_one_shot": 0.02,
                                               "miner_gap_map5": 0.01}}}}
    md = gpu_suite.markdown(data)
    # 5 x 4 s + 10,861 / 500 = 41.7 s against 5 x 2 x 10,861 / 190 = 571.6 s: 7.3%.
    assert "a 5-epoch mining with the feature pass 42 s = 7.3% of one 512 px mining interval (572 s" in md
    assert "target <= 10% met" in md
    assert "one_shot_adversarial: +0.550 +- 0.071" in md and "miner_gap_one_shot: +0.030 +- 0.014" in md


def test_call_minutes_caps_a_call_below_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_suite, "STEPS", tuple(_steps()))
    args = gpu_suite.parse_args(["--out", str(tmp_path), "--budget-minutes", "25", "--call-minutes", "2",
                                 "--in-process"])
    clock = FakeClock()
    data = gpu_suite.run_suite(args, runner=_fake_runner(clock, {"rates_densenet121_512_bf16": 105}), clock=clock)
    assert [data["steps"][s.name]["status"] for s in _steps()] == ["done", "skipped", "skipped", "skipped"]
    assert data["steps"]["objectives"]["reason"] == "estimated 20 s, 15 s left of the budget"


def test_unknown_step_names_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown steps \\['nope'\\]"):
        gpu_suite.selected(gpu_suite.parse_args(["--out", str(tmp_path), "--only", "nope"]))


def test_wheels_are_pinned_from_requirements_and_the_setup_names_them(tmp_path):
    req = tmp_path / "r.txt"
    req.write_text("keras==3.15.1\nlap==0.5.13  # comment\n")
    assert gpu_wheels.pinned(req, ("keras", "lap")) == ["keras==3.15.1", "lap==0.5.13"]
    with pytest.raises(ValueError, match="r.txt: expected a 'NAME==VERSION' pin for \\['namex'\\]"):
        gpu_wheels.pinned(req, ("keras", "namex"))
    specs = gpu_wheels.pinned()
    assert len(specs) == len(gpu_wheels.PACKAGES) and all("==" in s for s in specs)
    cmd = gpu_wheels.download_command(tmp_path, specs, python="py")
    assert cmd[:7] == ["py", "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version"]
    assert cmd[-len(specs) - 2:] == ["-d", str(tmp_path), *specs]
    setup = gpu_suite.setup_text()
    assert " ".join(specs) in setup and "--target /tmp/site .whl/*.whl" in setup
    assert "KERAS_BACKEND=jax NO_ALBUMENTATIONS_UPDATE=1" in setup and '--mirror "$OUT" --resume' in setup


def _quick(tmp_path, *extra, timeout=600):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "gpu_suite.py"), "--quick", "--out",
                          str(tmp_path / "out"), *extra], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads((tmp_path / "out" / "suite.json").read_text())


def _check_rates(out: Path, data: dict, names):
    from whale.training.plan import load_rates

    rates = load_rates(out / "rates.json")
    assert rates == [data["steps"][n]["figures"]["rate"] for n in names]
    for r in rates:
        assert r["branch"] == "tiny" and r["image_size"] == 32
        assert r["model_pairs_s"] > 0 and r["pipeline_pairs_s"] > 0 and r["end_to_end_pairs_s"] > 0
        assert r["end_to_end_over_model"] == pytest.approx(r["end_to_end_pairs_s"] / r["model_pairs_s"], abs=1e-3)


@pytest.mark.slow
def test_quick_measures_and_skips_what_does_not_fit(tmp_path):
    """The real steps on tiny shapes (one rate, the head matrix, pruned mining); Omniglot's 150 s
    estimate does not fit a 2-minute budget after them (and the import of Keras) and is recorded as
    skipped. 40-85 s on the shared 2-core machine (load average ~10), hence slow."""
    data = _quick(tmp_path, "--budget-minutes", "2",
                  "--only", "rates_densenet121_384_f32,head_matrix,mining_pruned,objectives,omniglot_seed0")
    steps = data["steps"]
    assert [steps[n]["status"] for n in ("rates_densenet121_384_f32", "head_matrix", "mining_pruned")] == ["done"] * 3
    assert steps["objectives"]["status"] == "done"
    o = steps["objectives"]["figures"]
    assert o["n"] == 600 and o["arcface"]["embedding"] == 512 and o["probabilistic cauchy"]["exact_matrix_s"] > 0
    assert steps["omniglot_seed0"]["status"] == "skipped"
    assert steps["omniglot_seed0"]["reason"].startswith("estimated 150 s, ")
    h = steps["head_matrix"]["figures"]
    assert h["n"] == 600 and h["d"] == 64 and h["exact_matrix_s"] > 0
    m = steps["mining_pruned"]["figures"]
    assert m["mode"] == "pruned" and m["n"] == 300 and m["epochs"] == 2 and m["fallback_pairs"] >= 0
    out = tmp_path / "out"
    _check_rates(out, data, ["rates_densenet121_384_f32"])
    md = (out / "suite.md").read_text()
    assert "| omniglot_seed0 | skipped |" in md and "| tiny | 32 | float32 | 8 |" in md
    assert "600 x 600 at d = 64" in md and "`mining: pruned`, n = 300" in md
    assert "rates_densenet121_384_f32: done" in (out / "suite.log").read_text()


def test_quick_table_i_row_runs_and_is_tabled(tmp_path):
    """One of seed 000's Table I steps at the homography benchmark's tiny --quick scale (seconds)."""
    from benchmarks.seeds import homography

    assert gpu_suite.HOMOGRAPHY_ROWS == tuple(homography.ROWS)
    data = _quick(tmp_path, "--only", "homography_triplet_hinge", timeout=600)
    row = data["steps"]["homography_triplet_hinge"]
    assert row["status"] == "done", row
    f = row["figures"]
    assert f["row"] == "triplet_hinge" and f["paper"] == 0.9714 and 0 <= f["test_accuracy"] <= 1
    assert len(f["val_accuracy_per_stage"]) == 2 and f["scale"]["size"] == homography.QUICK.size
    md = (tmp_path / "out" / "suite.md").read_text()
    assert "## Seed 000, Table I (the tiny --quick scale)" in md and "| triplet_hinge | 0.971 |" in md


@pytest.mark.slow
def test_quick_isolated_steps_run_in_child_processes(tmp_path):
    """As on the GPU (--isolate): each step in its own process, which reports its device."""
    data = _quick(tmp_path, "--isolate", "--only", "head_matrix,objectives", timeout=600)
    assert [data["steps"][n]["status"] for n in ("head_matrix", "objectives")] == ["done", "done"]
    assert data["steps"]["head_matrix"]["figures"]["n"] == 600
    assert data["calls"][-1]["device"] == "CPU" or data["calls"][-1]["backend"] == "jax"
    assert not (tmp_path / "out" / ".step.json").exists()


@pytest.mark.slow
def test_quick_runs_every_step(tmp_path):
    """The whole --quick (8-13 minutes on the loaded 2-core machine, Omniglot most of it)."""
    data = _quick(tmp_path, "--budget-minutes", "60", timeout=3000)
    steps = data["steps"]
    assert sorted(steps) == sorted(s.name for s in gpu_suite.STEPS)
    for name, row in steps.items():
        assert row["status"] == "done", (name, row)
    _check_rates(tmp_path / "out", data, [s.name for s in gpu_suite.STEPS if s.name.startswith("rates_")])
    for s in (0, 1, 2):
        f = steps[f"omniglot_seed{s}"]["figures"]
        assert f["seed"] == s and 0 <= f["one_shot_adversarial"] <= 1 and 0 <= f["one_shot_random"] <= 1
        assert f["miner_gap_one_shot"] == pytest.approx(f["one_shot_adversarial"] - f["one_shot_random"], abs=1e-3)
    assert "miner_gap_one_shot: " in (tmp_path / "out" / "suite.md").read_text()
    assert all(0 <= steps[f"homography_{r}"]["figures"]["test_accuracy"] <= 1 for r in gpu_suite.HOMOGRAPHY_ROWS)


def test_quick_seed002_step_runs_its_processes_and_is_tabled(tmp_path):
    """Seed 002's step on a pack of 40 individuals of the real flukes: each job in its own process, its rows
    read back and tabled (tiny network, 2 epochs, seconds)."""
    from benchmarks import common

    if common.shared_data("humpback") is None:
        pytest.skip("no ../shared/data/humpback")
    data = _quick(tmp_path, "--only", "seed002_triplet")
    row = data["steps"]["seed002_triplet"]
    assert row["status"] == "done", row
    f = row["figures"]
    assert "failed" not in f and f["individuals"] == 40 and f["paper"]["top10"] == 0.9346
    assert [(r["method"], r["fold"]) for r in f["rows"]["small"]] == [("triplet", 0)]
    assert [(r["method"], r["fold"]) for r in f["rows"]["small_mined"]] == [("triplet-mined", 1)]
    for r in f["rows"]["small"] + f["rows"]["small_mined"]:
        assert r["epochs"] == "2/2" and r["finished"] and 0 <= r["top1"] <= r["top5"] <= r["top10"] <= 1
    assert f["small_mean_sd"]["top10"]["n"] == 1
    md = (tmp_path / "out" / "suite.md").read_text()
    assert "## Seed 002, Table II protocol on real flukes" in md and "| small_mined triplet-mined | 1 | 2/2 |" in md
    import tarfile

    with tarfile.open(tmp_path / "out" / "seed002_work.tgz") as tar:
        names = set(tar.getnames())
    assert {"small/results.json", "small_mined/results.json", "small/fold0/random/log.csv",
            "small_mined/fold1/adversarial/log.csv", "small_fold0_triplet.log"} <= names


def test_seed002_jobs_are_every_fold_of_the_paper_s_row_and_fold_0_of_the_others():
    from benchmarks.gpu.steps.seed002 import seed002_jobs

    jobs = seed002_jobs(quick=False)
    assert [(m, f) for n, m, f, _ in jobs if n == "small"] == [("triplet", f) for f in range(5)]
    assert [(n, m, f, sets) for n, m, f, sets in jobs if n != "small"] == [("small_mined", "triplet-mined", 0, [])]


def test_flukes_steps_train_arcface_on_every_split_seed_at_once_then_the_head():
    """The fine-tune's plan: ArcFace on each split seed in a process of its own, all at once, then the paper's head
    on the first; --quick's pack holds one split seed."""
    from benchmarks.gpu import gpu_flukes

    assert gpu_flukes.jobs((0, 1, 2), "first") == [(f"arcface_s{s}", "arcface", s) for s in (0, 1, 2)]
    assert gpu_flukes.jobs((0, 1, 2), "head") == [("head_s0", "head", 0)]
    assert gpu_flukes.jobs((0,), "first") == [("arcface_s0", "arcface", 0)]
    assert [s.name for s in gpu_suite.STEPS][:2] == ["flukes_lite0", "flukes_lite0_head"]


def test_quick_flukes_steps_train_score_measure_and_return_slim_runs(tmp_path):
    """The pretrained-branch steps on a pack of 30 individuals of the real flukes (tiny network, one epoch a stage,
    seconds): each job in its own process on the packed split, measured as benchmarks/flukes/humpback.py measures,
    and its run returned as flukes_<job>.tgz: the best model without its optimizer, the ArcFace centres zeroed, and a
    slim.json saying so, which benchmarks/flukes/humpback.py --gpu-runs unpacks by split seed."""
    import json
    import tarfile

    import numpy as np

    from benchmarks import common
    from benchmarks.flukes import humpback_runs
    from benchmarks.gpu import gpu_flukes

    if common.shared_data("humpback") is None:
        pytest.skip("no ../shared/data/humpback")
    data = _quick(tmp_path, "--only", "flukes_lite0,flukes_lite0_head", timeout=900)
    for step, job in (("flukes_lite0", "arcface_s0"), ("flukes_lite0_head", "head_s0")):
        row = data["steps"][step]
        assert row["status"] == "done", row
        f = row["figures"]
        assert "failed" not in f and set(f["rows"]) == {job}
        for r in f["rows"].values():
            assert 0 <= r["top1"] <= r["top5"] <= 1 and 0 <= r["map5"] <= 1 and r["epochs"] >= 1
        assert f"## {step}: real flukes, EfficientNet-Lite0" in (tmp_path / "out" / "suite.md").read_text()
    with tarfile.open(tmp_path / "out" / "flukes_arcface_s0.tgz") as tar:
        names = set(tar.getnames())
    assert {"arcface_s0/run.json", "arcface_s0/slim.json", "arcface_s0/checkpoints/best.json"} <= names
    runs = humpback_runs.gpu_runs(tmp_path / "out", 0, tmp_path / "unpacked")
    assert sorted(runs) == ["arcface_s0", "head_s0"] and humpback_runs.gpu_runs(tmp_path / "out", 1, tmp_path) == {}
    assert json.loads((runs["arcface_s0"] / "slim.json").read_text()) == gpu_flukes.SLIM
    from whale.models.checkpoint import read_state
    from whale.models.io import load_model

    import whale.objectives  # noqa: F401 - registers the ArcFace layer

    best = runs["arcface_s0"] / "checkpoints"
    model = load_model(best / read_state(best, "best")["model_file"])
    assert not np.asarray(model.get_layer("arcface").get_weights()[0]).any()
    assert getattr(model, "optimizer", None) is None
