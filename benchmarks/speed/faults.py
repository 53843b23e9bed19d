"""Fault injection: ``kill -9`` a tiny training run at random moments, resume it, and compare with an uninterrupted run.

    python benchmarks/speed/faults.py --out runs/faults [--kills 60] [--chains 2] [--seed 0]

One process imports TensorFlow and the toolkit once, then *forks* a child per attempt (a
fresh interpreter per attempt would spend most of its life importing TensorFlow). The child
runs what ``run_fold.py`` runs (train, then score; ``--resume`` after the first attempt);
the parent sends it ``SIGKILL`` after a random delay drawn uniformly over an uninterrupted
run's duration, so kills land in mining, mid-epoch, validation, checkpoint writing and scoring
alike. After every kill the run folder is checked: every JSON parses, every ``.npz`` loads,
every ``.keras`` is a complete zip, ``log.csv`` is well formed, and the checkpoint state names
an existing model file (nothing half-written is ever visible). When every kill is spent, a
last attempt runs to the end, and the folder must equal the uninterrupted run's: weights
(rtol 1e-4), the mined negatives, ``log.csv`` (timing columns aside) and the score files.

Prints the phase each kill landed in (from the child's last log line), the counts, and as its
last line one JSON object. ``--chains N`` runs N independent chains of kills side by side
(forked from the same parent), each in its own run folder and compared with the same
uninterrupted run. ``tests/test_faults.py`` runs the same with 6 kills
(``make test``) and 20 (``make test-slow``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import sys
import time
import traceback
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CONFIG = """
name: faults
seed: 7
model: {branch: tiny, head_mid: 8}
batch_size: 16
mining_interval: 2
augment: false
stages:
  - {epochs: 2, k: 1000.0, lr: 1.0e-3, image_size: 32}
  - {epochs: 1, k: 0.5, lr: 5.0e-4, image_size: 32, freeze_branch: true}
"""
"""The tiny schedule: minings before epochs 1 and 3 (epoch 2 reads its negatives back),
validation after epochs 2 and 3, a recompile for the frozen stage."""

TIMING = ("mining_s", "epoch_s")
"""Columns of ``log.csv`` that measure time and so differ between runs."""


def make_inputs(root: Path, n_ids: int = 10, size: int = 96, objective: str = "head") -> tuple[Path, Path]:
    """A synthetic competition and the tiny config (with ``objective``) under ``root``: ``(data_dir, config_path)``."""
    from whale.data.synth import generate

    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    if not (data / "train.csv").exists():
        generate(data, n_ids=n_ids, seed=3, size=size, progress=False)
    config = root / "faults.yaml"
    config.write_text(CONFIG if objective == "head" else CONFIG + f"objective: {objective}\n")
    return data, config


def _child(config: Path, data: Path, out: Path, resume: bool, log_path: Path) -> None:
    """What a forked attempt runs (never returns): ``run_fold.py [--resume]``, logging to ``log_path``."""
    status = 1
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
        from whale.training.cli import main

        argv = ["--config", str(config), "--fold", "0", "--data", str(data), "--out", str(out), "--verbose", "0"]
        status = main(argv + (["--resume"] if resume else []))
    except BaseException:  # noqa: BLE001 - report anything, then leave without running atexit handlers
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status if isinstance(status, int) else 1)


def attempt(config: Path, data: Path, out: Path, resume: bool, log_path: Path,
            kill_after: float | None = None) -> tuple[int | None, float]:
    """Fork one attempt; SIGKILL it after ``kill_after`` seconds (None: let it finish).

    Returns ``(exit status or None when killed, seconds it lived)``.
    """
    t0 = time.time()
    sys.stdout.flush()  # or the child would repeat what the parent has buffered
    pid = os.fork()
    if pid == 0:
        _child(config, data, out, resume, log_path)
    deadline = None if kill_after is None else t0 + kill_after
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return (os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None), time.time() - t0
        if deadline is not None and time.time() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, time.time() - t0
        time.sleep(0.01)


def phase_of(log_tail: str) -> str:
    """Which part of the run a kill interrupted, from the child's last log line before it."""
    lines = [ln for ln in log_tail.strip().splitlines() if ln.strip() and not ln.startswith(("W0000", "I0000"))]
    last = lines[-1] if lines else ""
    if last.startswith(("scoring ", "wrote ")):
        return "scoring"
    if last.startswith("epoch ") and "pairs" in last:
        return "mid-epoch or validation"
    if "validation MAP@5" in last:
        return "checkpoint writing"
    if last.startswith("mining the negatives"):
        return "mining"
    if last.startswith("mined "):
        return "after mining"
    return "start-up or resume"


def check_folder(out: Path) -> list[str]:
    """Problems of a run folder right after a kill: anything unreadable or inconsistent."""
    problems = []
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.name.startswith(".") or "tensorboard" in path.parts:
            continue
        try:
            if path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as z:
                    for key in z.files:
                        z[key]
            elif path.suffix == ".keras":
                with zipfile.ZipFile(path) as z:
                    bad = z.testzip()
                    if bad is not None:
                        problems.append(f"{path}: member {bad} is corrupt")
            elif path.suffix == ".csv":
                with open(path, newline="") as f:
                    rows = list(csv.reader(f))
                if rows and any(len(r) != len(rows[0]) for r in rows):
                    problems.append(f"{path}: rows of different lengths")
        except Exception as exc:  # noqa: BLE001 - any failure to read is a finding
            problems.append(f"{path}: {type(exc).__name__}: {exc}")
    for tag in ("last", "best"):
        state_path = out / "checkpoints" / f"{tag}.json"
        if state_path.is_file():
            state = json.loads(state_path.read_text())
            if not (out / "checkpoints" / state["model_file"]).is_file():
                problems.append(f"{state_path}: names {state['model_file']}, which is missing")
    return problems


def compare(ref: Path, out: Path) -> list[str]:
    """Differences between a resumed run folder and the uninterrupted one (empty: equal)."""
    from whale.inference.scorefile import load_score_file
    from whale.models.checkpoint import load_checkpoint

    diffs = []
    for tag in ("last", "best"):
        (ma, sa), (mb, sb) = load_checkpoint(ref / "checkpoints", tag), load_checkpoint(out / "checkpoints", tag)
        if sa["epochs_done"] != sb["epochs_done"]:
            diffs.append(f"{tag}: epoch {sb['epochs_done']} != {sa['epochs_done']}")
        for i, (a, b) in enumerate(zip(ma.get_weights(), mb.get_weights())):
            if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
                diffs.append(f"{tag}: weight {i} differs by up to {np.abs(a - b).max():.3g}")
    for path in sorted((ref / "checkpoints").glob("mined-e*.npz")):
        other = out / "checkpoints" / path.name
        if not other.is_file():
            diffs.append(f"{other}: missing")
            continue
        with np.load(path) as a, np.load(other) as b:
            if sorted(a.files) != sorted(b.files) or any(not np.array_equal(a[k], b[k]) for k in a.files):
                diffs.append(f"{other}: mined negatives differ")

    def rows(run):
        with open(run / "log.csv", newline="") as f:
            return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(f)]

    if rows(ref) != rows(out):
        diffs.append(f"log.csv differs: {rows(out)} != {rows(ref)}")
    for split in ("val", "test"):
        a, b = load_score_file(ref / "scores" / f"{split}.npz"), load_score_file(out / "scores" / f"{split}.npz")
        same = (np.array_equal(a.query, b.query) and np.array_equal(a.gallery, b.gallery)
                and np.allclose(a.scores.astype(np.float32), b.scores.astype(np.float32), atol=2e-3))
        if not same:
            diffs.append(f"scores/{split}.npz differs")
        own = ("run_id", "run", "git_revision")  # each folder's own; the code may be re-committed meanwhile
        if {k: v for k, v in a.identity.items() if k not in own} != {k: v for k, v in b.identity.items() if k not in own}:
            diffs.append(f"scores/{split}.npz identity differs: {b.identity} != {a.identity}")
    return diffs


def run_faults(root: Path, kills: int, chains: int = 1, seed: int = 0, log=print, objective: str = "head") -> dict:
    """The whole experiment under ``root``; returns the counts (see the module docstring)."""
    import keras  # noqa: F401 - the backend imported once, before the forks

    import whale.training.trainer  # noqa: F401 - also registers every objective's layers and losses (compare)

    data, config = make_inputs(root, objective=objective)
    for d in [root / "reference"] + sorted(root.glob("killed*")):
        shutil.rmtree(d) if d.is_dir() else d.unlink(missing_ok=True)
    status, ref_s = attempt(config, data, root / "reference", False, root / "reference.log")
    if status != 0:
        raise RuntimeError(f"the uninterrupted run failed (status {status}); see {root / 'reference.log'}")
    log(f"uninterrupted run: {ref_s:.1f} s")
    pids = []
    for c in range(chains):
        n = kills // chains + (c < kills % chains)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                result = _chain(root, data, config, ref_s, n, seed * 1000 + c, f"killed{c}",
                                lambda m, c=c: log(f"[chain {c}] {m}"))
                (root / f"killed{c}.json").write_text(json.dumps(result))
                code = 0
            finally:
                sys.stdout.flush()
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    results = [json.loads((root / f"killed{c}.json").read_text()) for c in range(chains)
               if (root / f"killed{c}.json").is_file()]
    phases = Counter()
    for r in results:
        phases.update(r["phases"])
    problems = [p for r in results for p in r["problems"]]
    if len(results) < chains:
        problems.append(f"{chains - len(results)} chain(s) crashed")
    return {"kills": sum(r["kills"] for r in results), "phases": dict(phases), "problems": problems,
            "stale_temporary_files": sum(r["stale_temporary_files"] for r in results),
            "reference_s": round(ref_s, 1), "chains": chains}


def _chain(root: Path, data: Path, config: Path, ref_s: float, kills: int, seed: int, name: str, log) -> dict:
    """One chain: ``kills`` attempts killed at random moments, then a resume to the end, compared."""
    ref, out = root / "reference", root / name
    rng = np.random.default_rng(seed)
    phases, problems, attempts, killed = Counter(), [], 0, 0
    child_log = root / f"{name}.log"
    child_log.unlink(missing_ok=True)
    while killed < kills:
        before = child_log.stat().st_size if child_log.exists() else 0
        # Resumed attempts skip finished epochs, so late phases (scoring) are reached with
        # delays shorter than the whole run; the first ~10% is start-up only.
        delay = float(rng.uniform(0.1, 0.8) * ref_s)
        status, lived = attempt(config, data, out, attempts > 0, child_log, kill_after=delay)
        attempts += 1
        if status is not None:  # finished (or failed) before the kill
            if status != 0:
                problems.append(f"attempt {attempts} exited with status {status}")
                break
            log(f"attempt {attempts}: finished before its kill at {delay:.1f} s")
            shutil.rmtree(out)  # start the chain again so every kill interrupts something
            attempts = 0
            continue
        killed += 1
        with open(child_log) as f:
            f.seek(before)
            phase = phase_of(f.read())
        phases[phase] += 1
        found = check_folder(out)
        problems += [f"after kill {killed} ({phase}): {p}" for p in found]
        log(f"kill {killed:>3} at {lived:5.1f} s ({phase}){': ' + '; '.join(found) if found else ''}")
    status, _ = attempt(config, data, out, True, child_log)
    if status != 0:
        problems.append(f"the final resume exited with status {status}; see {child_log}")
    else:
        problems += compare(ref, out)
    stale = sorted(p.name for p in out.rglob(".*.tmp*"))
    return {"kills": killed, "phases": dict(phases), "problems": problems, "stale_temporary_files": len(stale)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="work folder")
    p.add_argument("--kills", type=int, default=60)
    p.add_argument("--chains", type=int, default=1, help="chains of kills run side by side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--objective", default="head", help="the tiny run's objective (whale.config.objectives.objective_names())")
    args = p.parse_args(argv)
    t0 = time.time()
    result = run_faults(args.out, args.kills, args.chains, args.seed, objective=args.objective)
    result["wall_s"] = round(time.time() - t0, 1)
    for problem in result["problems"]:
        print("PROBLEM:", problem)
    print(f"{result['kills']} kills: " + ", ".join(f"{k} {v}" for k, v in sorted(result["phases"].items()))
          + f"; {len(result['problems'])} problems; {result['wall_s']} s")
    print(json.dumps(result))
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
