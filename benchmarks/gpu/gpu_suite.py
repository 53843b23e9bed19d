"""Every GPU figure from one command: the measurements a lent GPU session runs, in order of value, within a budget.

A GPU is lent to few sessions (15 device-minutes, machine start included, at most 10 minutes a command, a bare machine
with JAX and no TensorFlow: ``../shared/docs/gpu-notes.md``), so everything it should measure is
here, ready to run without thinking. Each step calls the one implementation of its figure in the
other benchmarks (:mod:`benchmarks.speed.bench_train`, :mod:`benchmarks.speed.bench_scoring`,
:mod:`benchmarks.seeds.omniglot`, the trainer's own miners); nothing is measured twice in two ways.

Steps, in the order they run (see :data:`STEPS`; ``--list`` prints them with their estimates; each family's code
is a file of :mod:`benchmarks.gpu.steps`, this file keeps the runner, the budget and the report):

1. ``rates_*``: training rates, pairs/s, for DenseNet121 at 512 and 384 px, SE-ResNeXt50 at 384 px
   and ConvNet v1 at 768 px (mixed_bfloat16), then DenseNet121 384 px float32: model only,
   input pipeline only, end to end (the trainer), the ratio end to end / model (target >= 0.90),
   the compile seconds; DenseNet121 512 px also times the branch's inference (the mining's
   feature pass). Batch sizes come from each model's config.
2. ``head_matrix``: the exact head matrix of 15,697 x 15,697 images at d = 1024 (target <= 5 s).
3. ``mining_pruned`` / ``mining_exact``: the trainer's miners (``mining: pruned`` and ``exact``)
   on 15,697 images, d = 1024, K = 0.25; the report sets them against one mining interval of
   the 512 px stage (target: mining, features included, <= 10% of it).
4. ``objectives``: the exact score matrix of each embedding objective at 15,697 images (the
   projection once per image, one matrix product per block; seed 004's weighted norms).
5. ``omniglot_seed0``, ``omniglot_seed1``, ``omniglot_seed2``: ``benchmarks/seeds/omniglot.py --gpu``
   (``configs/omniglot_gpu.yaml``), random and adversarial negatives side by side, one seed a
   step: the adversarial one-shot accuracy on unseen characters (target >= 0.92) and the
   miner's multi-seed table (gap mean +- sd over the seeds done).
6. ``homography_<row>``: seed 000's Table I at the paper's scale (``benchmarks/seeds/homography.py --rows ROW
   --seeds 0``: 150 px, 48,000 images per curriculum stage, 20 + 10 epochs), one row a step, seed 0:
   test accuracy at threshold 0.5 beside the paper's, the threshold-free order accuracy of the triplets.
0. ``flukes_lite0``, ``flukes_lite0_head`` (first: the question that holds the project back): EfficientNet-Lite0
   from its ImageNet weights fine-tuned whole on the real flukes at 224 x 448 (:mod:`benchmarks.gpu.gpu_flukes`):
   sub-center ArcFace for 30 epochs on split seeds 0, 1 and 2 at once (a process each sharing the GPU), then the
   paper's head under the paper's schedule on seed 0; each run scored and measured there, its model returned as
   ``flukes_<job>.tgz``. The photos travel as ``.humpback_pack`` (``benchmarks/flukes/humpback_pack.py``), in two
   calls.
7. ``seed002_triplet``: seed 002's Table II protocol on the real flukes at the paper's 224 x 448 input
   (``benchmarks/seeds/seed002.py --config configs/seed002_gpu.yaml --time-budget S``): the triplet row (random
   P x K) on the 5 folds at once, one process a fold sharing the GPU, and beside it fold 0's ``triplet-mined``
   row; each training stops at the same budget and is measured as trained. The photos travel as
   ``.seed002_data`` (``benchmarks/seeds/seed002.py --out RUN --pack .seed002_data`` here, then
   ``carry [".whl", ".seed002_data"]``); without them the step is skipped. The processes' logs, rows and
   epoch logs come back as ``seed002_work.tgz``.

Budget: each step has an estimated cost (H100 seconds, compilation included; ``--quick``: CPU
seconds). A step whose estimate does not fit what is left of ``--budget-minutes`` (all calls
that share ``--out``) or of ``--call-minutes`` (this command; the device kills a command at 10
minutes) is recorded as skipped, with the reason, and the next one is tried. Every step runs in
its own process (GPU memory is freed between steps; a step that overruns the call is killed and
recorded, not the suite), and after each step ``suite.json``, ``suite.md`` and ``rates.json``
are rewritten atomically: a killed suite keeps what it finished. ``--resume`` reruns only the
steps that are not done, so a session's 15 minutes run as one command of 9 and one of 5 on the warm machine.

Output folder (``--out``; ``--mirror DIR`` copies the files there after each step, e.g. the
device's ``$OUT``; at most 8 files come back from the device, so the set is compact):
``suite.json`` (every step: status, seconds, estimate, figures), ``suite.md`` (the same as
tables), ``rates.json`` (the rates file ``run_fold.py --plan --rates FILE`` reads), ``suite.log``.

The device recipe (``--print-setup`` prints it; ``docs/gpu.md`` explains it):

    # here, once: the 12 wheels the GPU machine lacks (~13 MB, into .whl/, git-ignored)
    python benchmarks/gpu/gpu_wheels.py
    # there: one device call per 9 minutes (carry [".whl"]), the same command each time
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \\
      && export PYTHONPATH=/tmp/site KERAS_BACKEND=jax NO_ALBUMENTATIONS_UPDATE=1 \\
      && python3 benchmarks/gpu/gpu_suite.py --out bench_out/gpu_suite --mirror "$OUT" --resume --call-minutes 9

``--quick`` runs every step on tiny shapes (tiny branch, 32 px, a few hundred images, one-epoch
Omniglot stages) in a few minutes on the CPU, under TensorFlow or ``KERAS_BACKEND=jax``;
``tests/test_gpu_suite.py`` runs it so the suite cannot rot between GPU sessions.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The steps, one family a file (none imports Keras at module level: this parent process leaves the GPU to them).
from benchmarks.gpu.steps import (  # noqa: E402
    flukes, head_matrix, homography, mining, objectives, omniglot, rates, seed002)
from benchmarks.gpu.steps.features import KAGGLE_TRAIN_IMAGES  # noqa: E402
from benchmarks.gpu.steps.flukes import FLUKES_HEAD_TRAIN_S, FLUKES_TRAIN_S  # noqa: E402
from benchmarks.gpu.steps.homography import ROWS as HOMOGRAPHY_ROWS  # noqa: E402
from benchmarks.gpu.steps.seed002 import SEED002_TRAIN_S  # noqa: E402

FOLD_PAIR_IMAGES = 10861      # training images of one fold's pairs (docs/kaggle.md's plan)
E2E_TARGET = 0.90             # end to end over model only
HEAD_MATRIX_TARGET_S = 5.0
MINING_SHARE_TARGET = 0.10    # of one mining interval of the 512 px stage
OMNIGLOT_TARGET = 0.92        # Koch et al.'s one-shot accuracy
OUTPUT_FILES = ("suite.json", "suite.md", "rates.json", "suite.log", "seed002_work.tgz")


# ------------------------------------------------------------------------------ the steps
@dataclass(frozen=True)
class Step:
    """One measurement of the suite.

    ``estimate_s``: seconds on the H100 with compilation; ``quick_estimate_s``: seconds of the
    ``--quick`` version on 2 CPU cores; ``params`` / ``quick_params``: keyword arguments of
    ``run`` (the name of a ``step_*`` function of :mod:`benchmarks.gpu.steps`, a key of :data:`RUNNERS`)
    in the full and the quick run.
    """

    name: str
    title: str
    run: str
    estimate_s: float
    quick_estimate_s: float
    params: dict = field(default_factory=dict)
    quick_params: dict = field(default_factory=dict)

    def kwargs(self, quick: bool) -> dict:
        return {**self.params, **(self.quick_params if quick else {})}

    def estimate(self, quick: bool) -> float:
        return self.quick_estimate_s if quick else self.estimate_s


def _rates_step(branch: str, size: int, precision: str, config: str, estimate_s: float,
                inference: bool = False) -> Step:
    short = {"mixed_bfloat16": "bf16", "float32": "f32"}[precision]
    return Step(f"rates_{branch}_{size}_{short}", f"training rates, {branch} {size} px {precision}", "step_rates",
                estimate_s, 25.0,
                dict(branch=branch, size=size, precision=precision, config=config, inference=inference),
                dict(branch="tiny", size=32, quick=True))


STEPS = (
    # The learned path on real flukes from ImageNet weights: first, as the question that holds the project back.
    # ArcFace on the 3 split seeds at once (30 epochs; the trainer stops at FLUKES_TRAIN_S), then each run scores
    # ~7,300 photos and is measured; the paper's head on split 0 where a session has time left.
    Step("flukes_lite0", "EfficientNet-Lite0 (ImageNet) fine-tuned on real flukes, 224 x 448: ArcFace, 30 epochs, "
         "split seeds 0-2 at once", "step_flukes", FLUKES_TRAIN_S + 130, 240, dict(train_s=FLUKES_TRAIN_S),
         dict(quick=True)),
    Step("flukes_lite0_head", "EfficientNet-Lite0 on real flukes: the paper's head and schedule on split 0",
         "step_flukes", FLUKES_HEAD_TRAIN_S + 150, 240, dict(train_s=FLUKES_HEAD_TRAIN_S, part="head"),
         dict(quick=True)),
    # DenseNet121 at 512 px is the stage that costs most hours (docs/kaggle.md): measured first.
    # Estimates: the H100's seconds of 2026-11-26 (docs/gpu.md, "Results") where a step ran: 403 s
    # here (model compile 145 s), 19 s for the head matrix, 60 s for pruned mining; the others from
    # gpu-notes' compile times, ~60 s for the inference functions, then the timed steps and epochs.
    _rates_step("densenet121", 512, "mixed_bfloat16", "configs/densenet121.yaml", 420, inference=True),
    Step("head_matrix", "exact head matrix, 15,697 images, d = 1024", "step_head_matrix", 30, 8,
         dict(n=KAGGLE_TRAIN_IMAGES, d=1024), dict(n=600, d=64)),
    Step("mining_pruned", "pruned mining (mining: pruned), 15,697 images, d = 1024, K = 0.25, 5 epochs",
         "step_mining", 75, 10, dict(mode="pruned", n=KAGGLE_TRAIN_IMAGES, d=1024, epochs=5),
         dict(n=300, d=64, epochs=2)),
    _rates_step("densenet121", 384, "mixed_bfloat16", "configs/densenet121.yaml", 400),
    _rates_step("seresnext50", 384, "mixed_bfloat16", "configs/seresnext50.yaml", 300),
    _rates_step("convnet_v1", 768, "mixed_bfloat16", "configs/convnet_v1.yaml", 330),
    _rates_step("densenet121", 384, "float32", "configs/densenet121.yaml", 330),
    # Dense lapjv at 15,697 took 121 s per epoch on uniform random costs (gpu-notes); the suite's one
    # epoch on the head's scores was still running after 252 s (2026-11-26, killed): one epoch only.
    Step("mining_exact", "exact mining (mining: exact), 15,697 images, d = 1024, K = 0.25, 1 epoch",
         "step_mining", 480, 10, dict(mode="exact", n=KAGGLE_TRAIN_IMAGES, d=1024, epochs=1),
         dict(n=300, d=64, epochs=1)),
    # 24 s on an H200 (2026-11-27).
    Step("objectives", "exact score matrix of each embedding objective, 15,697 images, d = 1024", "step_objectives",
         40, 20, dict(n=KAGGLE_TRAIN_IMAGES, d=1024), dict(n=600, d=64)),
    # One seed a step, both methods at once (two processes sharing the GPU): ~7 minutes each.
    *(Step(f"omniglot_seed{s}", f"Omniglot one-shot, configs/omniglot_gpu.yaml, seed {s}, random and adversarial",
           "step_omniglot", 450, 150, dict(seed=s), dict(quick=True)) for s in (0, 1, 2)),
    # Table I (seed 000) at the paper's scale, ~22,500 steps a row: 254 s (triplet_hinge) and 274 s (siamese_ce)
    # on an H200 (2026-11-27, compilation and the data included); siamese_contrastive was killed at 242 s.
    *(Step(f"homography_{row}", f"Table I row {row}, the paper's scale, seed 0", "step_homography", 290, 20,
           dict(row=row), dict(quick=True)) for row in HOMOGRAPHY_ROWS),
    # 6 trainings sharing the GPU for SEED002_TRAIN_S each, then each embeds 5,706 photos and scores 10 draws:
    # 316 s for a 300 s budget on an H200 (2026-11-27, 7 processes; the trainer stops ~50 s early, its margin).
    Step("seed002_triplet", "seed 002's Table II protocol on real flukes, 224 x 448, 5 folds at once",
         "step_seed002", SEED002_TRAIN_S + 90, 90, dict(train_s=SEED002_TRAIN_S), dict(quick=True)),
)
"""The suite, in order of value."""

RUNNERS = {f.__name__: f for f in (
    rates.step_rates, head_matrix.step_head_matrix, mining.step_mining, objectives.step_objectives,
    omniglot.step_omniglot, homography.step_homography, seed002.step_seed002, flukes.step_flukes)}
"""Each step's function by its name (a :class:`Step`'s ``run``)."""


# ------------------------------------------------------------------------------ the runner
def device() -> dict:
    """Backend and device of this process (imports Keras)."""
    import keras

    from benchmarks.speed.bench_train import _device

    backend = keras.backend.backend()
    return {"backend": backend, "device": _device(backend), "keras": keras.__version__}


def run_one(name: str, ctx) -> dict:
    """Run step ``name`` here; its figures (a ``skipped`` key: it decided not to measure)."""
    step = next(s for s in STEPS if s.name == name)
    return RUNNERS[step.run](ctx, **step.kwargs(ctx.quick))


class Suite:
    """The results of one output folder: load, update one step at a time, write atomically."""

    def __init__(self, args):
        self.args, self.out = args, Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / "suite.json"
        previous = json.loads(self.path.read_text()) if args.resume and self.path.exists() else None
        if previous and previous.get("quick") != args.quick:
            raise SystemExit(f"{self.path}: written by a {'--quick' if previous.get('quick') else 'full'} run; "
                             f"--resume needs the same mode (or another --out)")
        self.data = previous or {"suite": "gpu_suite", "quick": args.quick, "budget_s": args.budget_minutes * 60,
                                 "spent_s": 0.0, "calls": [], "steps": {}}
        self.data["budget_s"] = args.budget_minutes * 60
        self.spent_before = float(self.data["spent_s"])

    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(line, flush=True)
        with open(self.out / "suite.log", "a") as f:
            f.write(line + "\n")
        if self.args.mirror:
            Path(self.args.mirror).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.out / "suite.log", Path(self.args.mirror) / "suite.log")

    def record(self, name: str, row: dict, spent_now: float) -> None:
        self.data["steps"][name] = row
        self.data["spent_s"] = round(self.spent_before + spent_now, 1)
        self.write()

    def write(self) -> None:
        from whale.core.files import write_json_atomic, write_text_atomic

        write_json_atomic(self.path, self.data)
        write_text_atomic(self.out / "suite.md", markdown(self.data))
        rates = [r["figures"]["rate"] for r in self.ordered() if r["status"] == "done" and "rate" in r["figures"]]
        if rates:
            call = self.data["calls"][-1] if self.data["calls"] else {}
            write_json_atomic(self.out / "rates.json", {
                "benchmark": "gpu_suite", "device": call.get("device", "?"), "backend": call.get("backend", "?"),
                "source": "benchmarks/gpu/gpu_suite.py" + (" --quick (tiny shapes: not rates of the named models)"
                                                        if self.args.quick else ""),
                "rates": rates})
        if self.args.mirror:
            mirror = Path(self.args.mirror)
            mirror.mkdir(parents=True, exist_ok=True)
            for path in [self.out / name for name in OUTPUT_FILES] + sorted(self.out.glob("flukes_*.tgz")):
                if path.exists():
                    shutil.copyfile(path, mirror / path.name)

    def ordered(self) -> list[dict]:
        return [{"name": s.name, **self.data["steps"][s.name]} for s in STEPS if s.name in self.data["steps"]]


def run_suite(args, steps=None, runner=None, clock=time.perf_counter) -> dict:
    """Run ``steps`` (default the selected :data:`STEPS`) in order within the budget; returns suite.json's dict.

    ``runner(step, timeout_s) -> dict``: how a step runs (default its own process,
    :func:`_run_isolated`, or this process with ``--in-process``), returning ``status`` (done,
    failed, killed), ``figures`` and optionally ``error`` and ``device``. A step is skipped when
    its estimate exceeds what is left of the budget or of this call.
    """
    suite = Suite(args)
    steps = list(selected(args) if steps is None else steps)
    t0 = clock()
    info = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:]}
    if runner is None and args.in_process:
        info.update(device())
    runner = runner or (_run_here if args.in_process else _run_isolated)
    suite.data["calls"].append(info)
    suite.log(f"gpu_suite: {len(steps)} steps, budget {args.budget_minutes:g} min "
              f"({suite.spent_before / 60:.1f} spent before), this call {args.call_minutes:g} min, out {suite.out}")
    for step in steps:
        old = suite.data["steps"].get(step.name)
        if old and old["status"] == "done":
            suite.log(f"{step.name}: done in an earlier call, kept")
            continue
        elapsed = clock() - t0
        left = min(suite.data["budget_s"] - suite.spent_before - elapsed, args.call_minutes * 60 - elapsed)
        estimate = step.estimate(args.quick)
        if estimate > left:
            reason = f"estimated {estimate:.0f} s, {max(left, 0):.0f} s left of the budget"
            suite.record(step.name, {"title": step.title, "status": "skipped", "reason": reason,
                                     "estimate_s": estimate}, elapsed)
            suite.log(f"{step.name}: skipped ({reason})")
            continue
        suite.log(f"{step.name}: {step.title} (estimated {estimate:.0f} s, {left:.0f} s left)")
        s0 = clock()
        res = runner(step, left)
        status, figures, error = res["status"], res.get("figures", {}), res.get("error")
        if res.get("device") and "device" not in suite.data["calls"][-1]:
            suite.data["calls"][-1].update(res["device"])
        row = {"title": step.title, "status": status, "seconds": round(clock() - s0, 1), "estimate_s": estimate,
               "figures": figures}
        if error:
            row["error"] = error
        if status == "done" and figures.get("skipped"):
            row.update(status="skipped", reason=figures.pop("skipped"))
        suite.record(step.name, row, clock() - t0)
        suite.log(f"{step.name}: {row['status']} in {row['seconds']:.0f} s "
                  f"{json.dumps(figures)[:400] if figures else row.get('reason', error or '')}")
    suite.log(f"gpu_suite: {sum(r['status'] == 'done' for r in suite.ordered())} of {len(STEPS)} steps done; "
              f"{suite.out / 'suite.md'}")
    return suite.data


def _run_here(step: Step, timeout_s: float):
    ctx = _context(_ARGS)
    try:
        return {"status": "done", "figures": run_one(step.name, ctx)}
    except Exception as err:  # a failing step is recorded; the suite goes on with the next
        import traceback

        traceback.print_exc()
        return {"status": "failed", "error": f"{type(err).__name__}: {err}"}


def _run_isolated(step: Step, timeout_s: float):
    """The step in a child process (``--step NAME``), killed after ``timeout_s`` seconds."""
    args = _ARGS
    result = Path(args.out) / ".step.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, "-u", str(Path(__file__).resolve()), "--step", step.name, "--step-result", str(result),
           "--out", str(args.out), "--workers", str(args.workers)] + (["--quick", "--isolate"] if args.quick else [])
    with open(Path(args.out) / "suite.log", "a") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            return {"status": "killed", "error": f"stopped at the call's limit ({timeout_s:.0f} s left when it started)"}
    if not result.exists():
        return {"status": "failed", "error": f"exit {proc.returncode} without a result (see suite.log)"}
    res = json.loads(result.read_text())
    result.unlink()
    return res


def _context(args):
    work = Path(args.out) / "work"
    work.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(quick=args.quick, workers=args.workers, work=work)


def selected(args) -> list[Step]:
    names = [s.name for s in STEPS]
    only = [n for n in (args.only or "").split(",") if n]
    skip = [n for n in (args.skip or "").split(",") if n]
    unknown = sorted(set(only + skip) - set(names))
    if unknown:
        raise SystemExit(f"--only/--skip: unknown steps {unknown}; the steps are {names}")
    return [s for s in STEPS if (not only or s.name in only) and s.name not in skip]


# ------------------------------------------------------------------------------ the report
def _cell(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.3f}" if isinstance(v, float) and abs(v) < 10 else (f"{v:,.1f}" if isinstance(v, float) else str(v))


def _table(header: list[str], rows: list[list]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
            + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows])


def markdown(data: dict) -> str:
    """suite.md: the steps, then the rates, mining and Omniglot tables of what was measured."""
    steps = [{"name": s.name, **data["steps"][s.name]} for s in STEPS if s.name in data["steps"]]
    done = {r["name"]: r["figures"] for r in steps if r["status"] == "done"}
    call = data["calls"][-1] if data["calls"] else {}
    lines = [f"# GPU suite{' (--quick: tiny shapes, CPU figures that mean nothing)' if data['quick'] else ''}", "",
             f"{call.get('device', '?')}, backend {call.get('backend', '?')}, Keras {call.get('keras', '?')}; "
             f"{len(data['calls'])} call(s), {data['spent_s'] / 60:.1f} of {data['budget_s'] / 60:.1f} minutes spent.",
             "", "## Steps", ""]
    lines += _table(["step", "status", "seconds", "estimate s", "what / why not"],
                    [[r["name"], r["status"], None if r.get("seconds") is None else f"{r['seconds']:.0f}",
                      f"{r['estimate_s']:.0f}",
                      r.get("reason") or r.get("error") or r["title"]] for r in steps])
    rates = [f["rate"] for f in done.values() if "rate" in f]
    if rates:
        lines += ["", f"## Training rates (pairs/s; target end to end / model >= {E2E_TARGET:.2f})", ""]
        lines += _table(["branch", "px", "precision", "batch", "workers", "model", "pipeline", "end to end",
                         "e2e / model", "target", "compile s", "inference img/s"],
                        [[r["branch"], r["image_size"], r["precision"], r["batch_size"], r["workers"],
                          r["model_pairs_s"], r["pipeline_pairs_s"], r["end_to_end_pairs_s"],
                          r["end_to_end_over_model"], "met" if r["end_to_end_over_model"] >= E2E_TARGET else "NOT met",
                          r["model_compile_s"], r.get("inference_images_s")] for r in rates])
    if "head_matrix" in done:
        h = done["head_matrix"]
        lines += ["", "## Head matrix", "",
                  f"{h['n']:,} x {h['n']:,} at d = {h['d']}: {h['exact_matrix_s']:.2f} s "
                  f"({h['exact_pairs_per_s'] / 1e6:.1f} M pairs/s; compile {h['compile_s']:.1f} s); target <= "
                  f"{HEAD_MATRIX_TARGET_S:g} s: {'met' if h['exact_matrix_s'] <= HEAD_MATRIX_TARGET_S else 'NOT met'}"]
    minings = [done[n] for n in ("mining_pruned", "mining_exact") if n in done]
    if minings:
        lines += ["", "## Mining step", ""] + mining_lines(minings, rates)
    seeds = [done[f"omniglot_seed{s}"] for s in (0, 1, 2) if f"omniglot_seed{s}" in done]
    if seeds:
        lines += ["", f"## Omniglot ({'tiny --quick config' if data['quick'] else 'configs/omniglot_gpu.yaml'}), "
                  f"20-way one-shot on unseen characters; target adversarial >= {OMNIGLOT_TARGET:.2f}", ""]
        keys = ["one_shot_adversarial", "one_shot_random", "one_shot_pixel", "map5_adversarial", "map5_random",
                "miner_gap_one_shot", "miner_gap_map5", "train_s_adversarial", "train_s_random"]
        lines += _table(["seed"] + keys, [[m["seed"]] + [m.get(k) for k in keys] for m in seeds])
        if len(seeds) > 1:
            from benchmarks.common import mean_sd

            for key in ("one_shot_adversarial", "miner_gap_one_shot", "miner_gap_map5"):
                s = mean_sd([m[key] for m in seeds if key in m])
                lines.append(f"\n{key}: {s['mean']:+.3f} +- {s['sd']:.3f} (sd; standard error {s['se']:.3f}, "
                             f"{s['n']} seeds)")
    table_i = [done[f"homography_{row}"] for row in HOMOGRAPHY_ROWS if f"homography_{row}" in done]
    if table_i:
        lines += ["", f"## Seed 000, Table I ({'the tiny --quick scale' if data['quick'] else 'the paper scale'}), "
                  "seed 0: accuracy at threshold 0.5", ""]
        lines += _table(["row", "paper", "ours", "order accuracy", "validation after each stage", "test items",
                         "train s"],
                        [[h["row"], h["paper"], h["test_accuracy"], h["test_order_accuracy"],
                          ", ".join(f"{v:.3f}" for v in h["val_accuracy_per_stage"]), h["test_items"], h["train_s"]]
                         for h in table_i])
    if "seed002_triplet" in done and done["seed002_triplet"].get("rows"):
        f = done["seed002_triplet"]
        lines += ["", f"## Seed 002, Table II protocol on real flukes ({f['photos']:,} photos, {f['individuals']} "
                  f"individuals; each training {f['train_budget_s']:.0f} s, measured as trained)", ""]
        cols = ("top1", "top5", "top10", "tpr_at_far", "auc")
        table = [["paper (Inception-Ft, ImageNet)", "5 splits", "-"] + [f["paper"][k] for k in cols]]
        for name, rows in f["rows"].items():
            table += [[f"{name} {r['method']}", r["fold"], r.get("epochs")] + [r.get(k) for k in cols] for r in rows]
        lines += _table(["row", "fold", "epochs"] + list(cols), table)
        if "small_mean_sd" in f:
            m = f["small_mean_sd"]
            lines.append("\nsmall triplet, mean +- sd over the folds: " + ", ".join(
                f"{k} {m[k]['mean']:.4f} +- {m[k]['sd']:.4f}" for k in cols))
    for step in (s.name for s in STEPS if s.run == "step_flukes"):
        if not (step in done and done[step].get("rows")):
            continue
        f = done[step]
        lines += ["", f"## {step}: real flukes, EfficientNet-Lite0 from ImageNet ({f['pack']['photos']:,} photos "
                  f"packed; each training {f['train_budget_s']:.0f} s; scored on the packed crops)", ""]
        cols = ("map5", "map5_known", "map5_new", "map5_known_no_new", "top1", "top5", "new_whale_first")
        lines += _table(["run", "split seed", "epochs", "train s", "best val MAP@5", *cols],
                        [[name, r["seed"], r["epochs"], r["train_s"], r["best_val_map5"], *(r.get(k) for k in cols)]
                         for name, r in f["rows"].items()])
    return "\n".join(lines) + "\n"


def mining_lines(minings: list[dict], rates: list[dict]) -> list[str]:
    """The mining step against one mining interval of DenseNet121's 512 px stage (5 epochs of 2 x 10,861 pairs)."""
    out = []
    d512 = next((r for r in rates if r["branch"] == "densenet121" and r["image_size"] == 512), None)
    interval_s = features_s = None
    if d512:
        interval_s = 5 * 2 * FOLD_PAIR_IMAGES / d512["end_to_end_pairs_s"]
        if d512.get("inference_images_s"):
            features_s = FOLD_PAIR_IMAGES / d512["inference_images_s"]
    for m in minings:
        per_interval = m["mining_s_per_epoch"] * 5  # a mining solves one assignment per epoch of its interval
        text = (f"- `mining: {m['mode']}`, n = {m['n']:,}, d = {m['d']}, K = {m['k']:g}: {m['mining_s']:.1f} s for "
                f"{m['epochs']} epoch(s) of negatives ({m['mining_s_per_epoch']:.1f} s an epoch, "
                f"{m['pairs_scored']:,} head evaluations, mean mined score {m['mean_mined_score']:.3f})")
        if interval_s:
            total = per_interval + (features_s or 0.0)
            share = total / interval_s
            text += (f"; a 5-epoch mining{' with the feature pass' if features_s else ''} {total:.0f} s = "
                     f"{share:.1%} of one 512 px mining interval ({interval_s:.0f} s at "
                     f"{d512['end_to_end_pairs_s']:.0f} pairs/s end to end): target <= {MINING_SHARE_TARGET:.0%} "
                     f"{'met' if share <= MINING_SHARE_TARGET else 'NOT met'}")
        out.append(text)
    if not interval_s:
        out.append("- (no DenseNet121 512 px rate measured: the share of a mining interval is not computed)")
    return out


# ------------------------------------------------------------------------------ command line
def setup_text() -> str:
    """The two-step device recipe (``--print-setup``)."""
    from benchmarks.gpu.gpu_wheels import pinned

    wheels = " ".join(pinned())
    return f"""# 1. Here (the user's side), once: the wheels the GPU machine lacks, into .whl/ (git-ignored):
python benchmarks/gpu/gpu_wheels.py
#    = pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
#      --platform manylinux_2_28_x86_64 ... -d .whl {wheels}
# 2. There: the device tool's run, carry [".whl"], this command (up to 9 minutes); repeat it while
#    the machine is warm until suite.md says every step is done or skipped for the budget:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \\
  && export PYTHONPATH=/tmp/site KERAS_BACKEND=jax NO_ALBUMENTATIONS_UPDATE=1 \\
  && python3 benchmarks/gpu/gpu_suite.py --out bench_out/gpu_suite --mirror "$OUT" --resume --call-minutes 9
# The files come back from $OUT: suite.json, suite.md, rates.json, suite.log. Commit rates.json as
# benchmarks/gpu/rates/h100.json and the tables into docs/ (docs/gpu.md says where)."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "bench_out" / "gpu_suite"),
                   help="output folder (suite.json, suite.md, rates.json, suite.log; work/ for data)")
    p.add_argument("--mirror", help="also copy the output files here after each step (the device's $OUT)")
    p.add_argument("--budget-minutes", type=float, default=13.5,
                   help="minutes for the whole suite, over all calls sharing --out (default 13.5: one lent session's "
                        "15 less the machine's start)")
    p.add_argument("--call-minutes", type=float, default=None,
                   help="minutes for this command (default: the budget; 9 on the device, which stops a command at 10)")
    p.add_argument("--resume", action="store_true", help="keep the steps done in --out, run the others")
    p.add_argument("--quick", action="store_true", help="every step on tiny shapes, on the CPU, in a few minutes")
    p.add_argument("--only", help="comma-separated step names")
    p.add_argument("--skip", help="comma-separated step names")
    p.add_argument("--workers", type=int, default=4, help="threads building batches in the rate steps")
    p.add_argument("--in-process", action="store_true",
                   help="run the steps in this process (default with --quick; on a GPU each step gets its own)")
    p.add_argument("--isolate", action="store_true", help="each step in its own process, also with --quick")
    p.add_argument("--list", action="store_true", help="print the steps and their estimates, then stop")
    p.add_argument("--print-setup", action="store_true", help="print the two device calls, then stop")
    p.add_argument("--step", help=argparse.SUPPRESS)
    p.add_argument("--step-result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.call_minutes is None:
        args.call_minutes = args.budget_minutes
    if args.quick and not args.isolate:
        args.in_process = True
    if args.isolate and args.in_process:
        p.error("--isolate and --in-process exclude each other")
    return args


_ARGS = None


def main(argv=None) -> int:
    global _ARGS
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    from whale.command import quiet_unless_debugging

    quiet_unless_debugging()
    args = _ARGS = parse_args(argv)
    # Compiled programs persist across the steps' processes and the session's calls (same shapes, same
    # program: the trainer's compile of a model the model-only step compiled is then a cache hit).
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(args.out) / "work" / "jax_cache"))
    if args.print_setup:
        print(setup_text())
        return 0
    if args.list:
        for s in selected(args):
            print(f"{s.name:<32} {s.estimate(args.quick):6.0f} s  {s.title}")
        return 0
    if args.step:  # a child of _run_isolated
        from whale.core.files import write_json_atomic

        try:
            res = {"status": "done", "figures": run_one(args.step, _context(args)), "device": device()}
        except Exception as err:
            import traceback

            traceback.print_exc()
            res = {"status": "failed", "figures": {}, "error": f"{type(err).__name__}: {err}"}
        write_json_atomic(Path(args.step_result), res)
        return 0
    # Without --in-process the parent never imports Keras: JAX would hold the GPU's memory that the
    # steps' processes need; each child reports the device.
    run_suite(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
