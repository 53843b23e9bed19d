"""Step ``seed002_triplet``: seed 002's Table II protocol on the carried flukes, one process a fold sharing the GPU."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu.steps import ROOT

SEED002_DATA = ".seed002_data"  # benchmarks/seeds/seed002.py --pack: the flukes' content crops, carried to the device
SEED002_TRAIN_S = 420.0         # each seed 002 training's budget (the trainer's deadline)


def seed002_jobs(quick: bool) -> list[tuple[str, str, int, list[str]]]:
    """``(name, method, fold, --set overrides)`` of the seed 002 step's processes: the paper's sampler on every
    fold (the Table II row, mean +- sd), and on fold 0 the adversarial miner. (The paper's InceptionV3 from
    scratch, a seventh process on 2026-11-27, trained one epoch in the 300 s budget: not worth its share.)"""
    if quick:
        tiny = ["model.branch=tiny", "workers=1", "stages[0].epochs=1", "stages[1].epochs=1",
                "stages[0].image_size=32", "stages[1].image_size=32"]
        return [("small", "triplet", 0, tiny), ("small_mined", "triplet-mined", 1, tiny)]
    return [("small", "triplet", f, []) for f in range(5)] + [("small_mined", "triplet-mined", 0, [])]


def _seed002_source(ctx) -> Path | None:
    """The photos of the seed 002 step: ``.seed002_data`` (full), or a pack of 40 individuals of
    ``../shared/data/humpback`` made here (``quick``); None when neither exists."""
    from benchmarks import common
    from benchmarks.seeds import seed002

    if not ctx.quick:
        path = ROOT / SEED002_DATA
        return path if (path / "train.csv").is_file() else None
    src = common.shared_data("humpback")
    if src is None or not (src / "train.csv").is_file():
        return None
    dest = ctx.work / "seed002_quick_data"
    if not (dest / "train.csv").is_file():
        df = seed002.read_photos(src)
        df = df[df["Id"].isin(sorted(set(df["Id"]))[:40])].reset_index(drop=True)
        boxes = dict(zip(df["Image"], seed002.content_boxes(list(df["path"]))))
        seed002.pack_photos(df, boxes, dest)
    return dest


def step_seed002(ctx, train_s: float = SEED002_TRAIN_S, quick: bool = False) -> dict:
    """Seed 002's protocol (``benchmarks/seeds/seed002.py``) on the carried flukes: :func:`seed002_jobs`, each in its
    own process with ``--time-budget train_s`` (the GPU shared, its memory not preallocated); every row measured, and
    the triplet row's mean +- sd over the folds done."""
    from benchmarks import common
    from benchmarks.seeds import seed002

    source = _seed002_source(ctx)
    if source is None:
        return {"skipped": f"no {SEED002_DATA}/ (benchmarks/seeds/seed002.py --out RUN --pack {SEED002_DATA}, "
                           "then carry it)"
                if not quick else "no ../shared/data/humpback beside the checkout"}
    work = ctx.work / "seed002"
    df = seed002.read_photos(source)
    boxes = work / "content_boxes.csv"  # computed once here: each process reads its copy, none writes it
    seed002.content_boxes(list(df["path"]), boxes)
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    budget = 60.0 if quick else float(train_s)
    procs = []
    for name, method, fold, sets in seed002_jobs(quick):
        out = work / name
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(boxes, out / "content_boxes.csv")
        cmd = [sys.executable, "-u", str(ROOT / "benchmarks" / "seeds" / "seed002.py"), "--out", str(out),
               "--source", str(source),
               "--config", str(ROOT / "configs" / "seed002_gpu.yaml"), "--methods", method, "--folds", str(fold),
               "--redraws", "1" if quick else "10", "--time-budget", str(budget)]
        cmd += [a for v in sets for a in ("--set", v)]
        log = open(work / f"{name}_fold{fold}_{method}.log", "w")
        procs.append((name, method, fold, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    failed = {}
    for name, method, fold, proc, log in procs:
        rc = common.wait_or_kill(proc, log, budget + (300 if quick else 240))
        if rc != 0:
            tail = Path(log.name).read_text().strip().splitlines()[-3:]
            failed[f"{name} fold {fold} {method}"] = f"exit {rc}: " + " | ".join(tail)[-400:]
    keys = ("top1", "top5", "top10", "tpr_at_far", "auc", "epochs", "finished", "train_s", "seconds",
            "test_photos", "test_individuals")
    rows = {}
    for name in dict.fromkeys(j[0] for j in seed002_jobs(quick)):
        for r in seed002.results(work / name / "results.json").rows():
            rows.setdefault(name, []).append({"fold": r["fold"], "method": r["method"],
                                              **{k: (round(r[k], 4) if isinstance(r[k], float) else r[k])
                                                 for k in keys if k in r}})
    out = {"train_budget_s": budget, "photos": len(df), "individuals": int(df["Id"].nunique()),
           "source": str(source.name), "rows": rows, "paper": {k: v[0] for k, v in seed002.PAPER.items()}}
    random_rows = rows.get("small", [])
    if random_rows:
        out["small_mean_sd"] = {k: {s: round(v, 4) for s, v in common.mean_sd([r[k] for r in random_rows]).items()
                                    if s in ("mean", "sd", "n")} for k in ("top1", "top5", "top10", "tpr_at_far", "auc")}
    if failed:
        out["failed"] = failed
    _pack_work(work, Path(ctx.work).parent / "seed002_work.tgz")
    return out


def _pack_work(work: Path, dest: Path) -> None:
    """The seed 002 processes' logs, rows and epoch logs (``log.csv``) as one file, to come back from the device."""
    import tarfile

    with tarfile.open(dest, "w:gz") as tar:
        for path in sorted([*work.glob("*.log"), *work.glob("*/results.json"), *work.glob("*/fold*/*/log.csv")]):
            tar.add(path, arcname=str(path.relative_to(work)))
