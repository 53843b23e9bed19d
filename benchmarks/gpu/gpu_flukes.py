"""The GPU suite's steps ``flukes_lite0*``: EfficientNet-Lite0 (ImageNet) fine-tuned whole on the real flukes.

Runs where a GPU is lent (:mod:`benchmarks.gpu.gpu_suite`), on the pack of :mod:`benchmarks.flukes.humpback_pack`
carried as ``.humpback_pack/part1`` and ``.humpback_pack/part2``: sub-center ArcFace
(``configs/flukes_lite0_gpu_arcface.yaml``, 30 epochs) on the three split seeds at once, then the paper's head under
the paper's schedule (``configs/flukes_lite0_gpu.yaml``) on split seed 0 where time is left (:func:`jobs`), each a
``whale train --fold 0`` of its own process sharing the GPU, stopped at the step's time budget (the trainer's
deadline) if its epochs have not ended by then. Every run is scored there as it ends (its ``best`` checkpoint, the
packed photos) and measured as :mod:`benchmarks.flukes.humpback` measures (MAP@5 of ``whale ensemble --tune``'s
submission, the known whales' ranking); its folder comes back as ``flukes_<job>.tgz`` (run.json, config.yaml, log.csv,
the ``best`` model without its optimizer: about 14 MB), so that ``benchmarks/flukes/humpback.py --gpu-runs DIR``
scores it again here on the original photos and fuses it with the keypoint matcher on the CPU.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACK = ".humpback_pack"
CONFIGS = {"head": "configs/flukes_lite0_gpu.yaml", "arcface": "configs/flukes_lite0_gpu_arcface.yaml"}
ON_PACK = ["crop=box", "box_margin=0.0"]
"""The packed photos are the content crops with their margin already."""


def quick_sets(config: str) -> list[str]:
    """The ``--quick`` step's overrides of ``config``: the tiny branch, random, at 32 x 64, one epoch a stage."""
    from whale.config import load_config

    stages = len(load_config(ROOT / config).stages)
    return ["model.weights=null", "model.branch=tiny", "workers=1", "precision=float32"] + [
        f"stages[{i}].{k}" for i in range(stages) for k in ("image_size=32", "epochs=1")]


def jobs(seeds=(0, 1, 2), part: str = "first") -> list[tuple[str, str, int]]:
    """``(name, objective, split seed)`` of a step's trainings: ``first``, sub-center ArcFace (the objective chosen
    on the CPU trunk: docs/humpback.md, "The paper's head and miner on the same trunk") on every split seed at once,
    one process each (a process's input pipeline, not the GPU, set an epoch's pace: seven processes at once each
    kept 14-18 s an epoch of seed 002's folds, docs/gpu.md); ``head``, the paper's head under the paper's schedule
    on the first split seed, where a session has time left (``seeds``: the pack's; ``--quick``'s holds one)."""
    if part == "head":
        return [(f"head_s{seeds[0]}", "head", seeds[0])]
    return [(f"arcface_s{s}", "arcface", s) for s in seeds]


def quick_pack(work: Path) -> Path | None:
    """A pack of 30 individuals of ``../shared/data/humpback`` at 32 x 64 (the ``--quick`` step's)."""
    from benchmarks import common
    from benchmarks.flukes import shared

    src = common.shared_data("humpback")
    if src is None:
        return None
    dest = work / "humpback_quick_pack"
    if not (dest / "part2" / "pack.json").is_file():
        tiny = work / "humpback_quick_source"
        (tiny / "train").mkdir(parents=True, exist_ok=True)
        import pandas as pd

        df = pd.read_csv(src / "train.csv")
        keep = df[df["Id"].isin(sorted(set(df["Id"]))[:30])]
        for name in keep["Image"]:
            if not (tiny / "train" / name).exists():
                shutil.copyfile(src / "train" / name, tiny / "train" / name)
        keep.to_csv(tiny / "train.csv", index=False)
        shared.pack(tiny, dest, [0], (37, 74), first_part_bytes=20_000, log=lambda *_: None)
    return dest


def step(ctx, train_s: float, quick: bool = False, part: str = "first") -> dict:
    """Train :func:`jobs` of ``part`` at once on the pack, each with ``--time-budget train_s`` (the trainer stops
    before an epoch that would overrun it; ``quick``: 60 s); their figures."""
    from benchmarks import common
    from benchmarks.flukes import shared

    pack = quick_pack(ctx.work) if quick else ROOT / PACK
    if pack is not None:
        shared.untar_parts(pack)
    if pack is None or not (pack / "part2" / "pack.json").is_file() or not any((pack / "part1" / "photos").glob("*")):
        return {"skipped": f"no {PACK}/part1 and part2 (benchmarks/flukes/humpback_pack.py --out {PACK}, "
                           "then carry both)"
                if not quick else "no ../shared/data/humpback beside the checkout"}
    work = ctx.work / "flukes"
    seeds = shared.pack_seeds(pack)
    todo = jobs(seeds, part)
    truth = {}
    for seed in dict.fromkeys(s for _, _, s in todo):
        _, truth[seed] = shared.materialize(pack, seed, work / f"seed{seed}" / "data")
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "PYTHONUNBUFFERED": "1"}
    budget = 60.0 if quick else float(train_s)
    procs = []
    for name, objective, seed in todo:
        run = work / name
        shutil.rmtree(run, ignore_errors=True)
        cmd = [sys.executable, "-m", "whale", "train", "--config", str(ROOT / CONFIGS[objective]), "--fold", "0",
               "--data", str(work / f"seed{seed}" / "data"), "--out", str(run), "--time-budget", str(budget),
               "--verbose", "0"]
        cmd += [a for v in ON_PACK + (quick_sets(CONFIGS[objective]) if quick else []) for a in ("--set", v)]
        log = open(work / f"{name}.log", "w")
        procs.append((name, objective, seed, run, cmd, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                                        env=env, cwd=ROOT), log))
    rows, failed = {}, {}
    for name, objective, seed, run, cmd, proc, log in procs:
        rc = common.wait_or_kill(proc, log, budget + (300 if quick else 150))
        if rc == 3:  # paused at the budget: score the best checkpoint as it is
            rc = subprocess.run(cmd[:cmd.index("--time-budget")] + ["--score-only"] + cmd[cmd.index("--verbose"):],
                                stdout=open(work / f"{name}.log", "a"), stderr=subprocess.STDOUT, env=env,
                                cwd=ROOT).returncode
        if rc != 0:
            tail = (work / f"{name}.log").read_text().strip().splitlines()[-3:]
            failed[name] = f"exit {rc}: " + " | ".join(tail)[-400:]
            continue
        rows[name] = {"objective": objective, "seed": seed, **measure(run, work / f"seed{seed}" / "data",
                                                                        truth[seed], work)}
        _pack_run(run, Path(ctx.work).parent / f"flukes_{name}.tgz")
    out = {"train_budget_s": budget, "pack": json.loads((pack / "part2" / "pack.json").read_text()), "rows": rows}
    if failed:
        out["failed"] = failed
    arc = [r for r in rows.values() if r["objective"] == "arcface"]
    if arc:
        out["arcface_mean_sd"] = {k: {s: round(v, 4) for s, v in common.mean_sd([r[k] for r in arc]).items()
                                      if s in ("mean", "sd", "n")}
                                  for k in ("map5", "map5_known_no_new", "top1", "top5")}
    return out


def measure(run: Path, comp: Path, truth: dict[str, str], work: Path) -> dict:
    """A scored run as :mod:`benchmarks.flukes.humpback` reports it: the ensemble's submission and the known whales'
    ranking, with the run's epochs, best validation MAP@5 and training seconds."""
    import csv

    from benchmarks.flukes.shared import ensemble_and_check, ranking_metrics, read_submission, submission_metrics
    from whale.inference.scorefile import load_score_file

    sub = work / f"{run.name}.csv"
    ensemble_and_check([run], sub, comp, work, log=lambda *_: None)
    test = load_score_file(run / "scores" / "test.npz")
    row = {**submission_metrics(read_submission(sub), truth),
           **ranking_metrics(test.scores, test.query, test.gallery_ids, truth)}
    epochs = list(csv.DictReader(open(run / "log.csv")))
    row.update(epochs=len(epochs), train_s=round(sum(float(e["epoch_s"]) for e in epochs), 1),
               best_val_map5=max((float(e["val_map5"]) for e in epochs if e["val_map5"]), default=None))
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}


SLIM = {"optimizer": "dropped", "weights": "rounded to float16 precision (stored as float32)",
        "zeroed": "the ArcFace class centres (training's classifier: scoring reads the embedding)"}
"""What :func:`_pack_run` changes of a run's ``best`` model to make it travel (three runs' files must come back in
64 MiB): nothing that scoring reads, bar the rounding (the GPU computed in bfloat16, coarser still)."""


def _pack_run(run: Path, dest: Path) -> None:
    """``run``'s record and its ``best`` model made small (:data:`SLIM`; recorded as ``slim.json``) as one file."""
    import numpy as np

    import whale.objectives  # noqa: F401 - registers the objectives' layers, so the model loads
    from whale.models.checkpoint import read_state, save_checkpoint
    from whale.models.io import load_model

    slim = run.parent / f"{run.name}_slim" / run.name
    shutil.rmtree(slim.parent, ignore_errors=True)
    slim.mkdir(parents=True)
    for name in ("run.json", "config.yaml", "log.csv", "done.json", "data_images.json"):
        if (run / name).is_file():
            shutil.copyfile(run / name, slim / name)
    state = read_state(run / "checkpoints", "best")
    model = load_model(run / "checkpoints" / state.pop("model_file"), compile=False)  # no optimizer state
    for w in model.weights:
        value = np.asarray(w.numpy(), np.float32)
        w.assign(np.zeros_like(value) if w.path.startswith("arcface/") else
                 np.clip(value, -65000, 65000).astype(np.float16).astype(np.float32))
    save_checkpoint(model, slim / "checkpoints", "best", state)
    (slim / "slim.json").write_text(json.dumps(SLIM, indent=2))
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(slim, arcname=run.name)


def unpack_runs(folder: Path, dest: Path) -> dict[str, Path]:
    """The ``flukes_<job>.tgz`` files of ``folder`` unpacked under ``dest``: ``{job: dest/job}``.

    Each file unpacks into its own job's folder, whatever the run folder inside it is called: a resumed job
    (``flukes_arcface_s0_resumed.tgz`` holds ``arcface_s0/``) never lands on the run it resumed. A folder already
    unpacked from the same file is kept as it is (with the score files written into it since).
    """
    runs = {}
    for tgz in sorted(Path(folder).glob("flukes_*.tgz")):
        job = tgz.stem[len("flukes_"):]
        stamp = f"{tgz.resolve()} {tgz.stat().st_size} {tgz.stat().st_mtime_ns}"
        mark = Path(dest) / job / ".unpacked-from"
        if mark.is_file() and mark.read_text() == stamp:
            runs[job] = Path(dest) / job
            continue
        staging = Path(dest) / f".unpack-{job}"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(tgz) as tar:
            tar.extractall(staging, filter="data")
        tops = list(staging.iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise ValueError(f"{tgz}: expected one run folder inside, found {sorted(p.name for p in tops)}")
        shutil.rmtree(Path(dest) / job, ignore_errors=True)
        tops[0].rename(Path(dest) / job)
        staging.rmdir()
        mark.write_text(stamp)
        runs[job] = Path(dest) / job
    return runs

