"""The skeleton the measuring benchmarks share: a benchmark states its rows, the harness runs and keeps them. Not a test.

A benchmark says what names a row (``key``: e.g. ``("set", "objective", "seed")``), what to run for each row
(:class:`Job`) and how its rows read as tables (a ``summary(rows) -> (markdown, stats)``); the harness gives

* **resume**: :class:`RowFile`, ``OUT/results.json`` (``{"rows": [...], ...}``), each row added as its run ends,
  under a lock and replacing a row of the same key (two commands on one ``--out``, e.g. the training-free rows
  beside a training, keep each other's rows); a killed benchmark run again skips the rows it has;
* **seeds one by one**: :func:`run_jobs` walks the jobs in the order given (seeds, sets, variants: the script's
  loops); a job whose data is absent (``FileNotFoundError``) skips the rest of its group, said once; or each seed
  in a process of its own (:func:`several_seeds`, ``--seeds``/``--jobs``/``--methods`` of
  :func:`add_seed_arguments`: the script run once per seed, its final JSON lines gathered into one table);
* **the tables and the final JSON line**: :func:`finish` prints the summary of every row kept (``--report``: of the
  rows written so far, measuring nothing) and then :func:`benchmarks.common.final_json`'s line;
* :func:`parser`: the argument parser every benchmark opens with (the module docstring as its help, ``--out``;
  ``--seeds`` and ``--report`` where the benchmark has them); :func:`shared_source`: the data beside the checkout,
  or a message and exit 0 when it is absent.

The machine reference of the real flukes' benchmarks is :func:`benchmarks.flukes.shared.machine_reference`.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


def parser(doc: str | None, out_help: str, seeds: str | None = None, seeds_help: str = "comma-separated seeds",
           report: bool = False) -> argparse.ArgumentParser:
    """An argument parser with ``doc`` as its help and ``--out`` (required, ``out_help``); ``--seeds`` (default
    ``seeds``) when ``seeds`` is given; ``--report`` (print the tables of the kept rows, measure nothing) when
    ``report``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help=out_help)
    if seeds is not None:
        p.add_argument("--seeds", default=seeds, help=seeds_help)
    if report:
        p.add_argument("--report", action="store_true",
                       help="measure nothing: the tables of the rows OUT/results.json holds")
    return p


def shared_source(name: str, doing: str = "measure") -> Path | None:
    """``../shared/data/NAME`` beside the checkout (:func:`benchmarks.common.shared_data`), or None after saying
    there is nothing to ``doing`` (the benchmark then exits 0: the data is never committed)."""
    from benchmarks import common

    found = common.shared_data(name)
    if found is None:
        print(f"no ../shared/data/{name} beside the checkout: nothing to {doing}")
    return found


def seed_list(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (empty items ignored)."""
    return [int(s) for s in text.split(",") if s.strip()]


class RowFile:
    """``path`` (a ``results.json``): ``{"rows": [row, ...], **meta}``; a row is named by its values of ``key``.

    Raises:
        ValueError: from :meth:`rows`, a file that is not such an object (the file named).
    """

    def __init__(self, path: Path, key: Sequence[str]):
        self.path, self.key = Path(path), tuple(key)

    def rows(self) -> list[dict]:
        """The rows kept, in the order they were added (none when the file is absent)."""
        if not self.path.is_file():
            return []
        data = json.loads(self.path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{self.path}: expected a JSON object with a list 'rows'")
        return data["rows"]

    def name(self, row: dict) -> tuple:
        """The row's key values."""
        return tuple(row[k] for k in self.key)

    def done(self) -> set[tuple]:
        """The keys of the rows kept."""
        return {self.name(r) for r in self.rows()}

    def add(self, row: dict, **meta) -> None:
        """Keep ``row`` (replacing a row of the same key) and ``meta`` beside the rows, atomically and under a lock
        (``<path>.lock``), so that a second command on the same file keeps the rows the first one added."""
        import fcntl

        from whale.core.files import write_json_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rows = [r for r in self.rows() if self.name(r) != self.name(row)]
            write_json_atomic(self.path, {"rows": rows + [row], **meta})


@dataclass(frozen=True)
class Job:
    """One row to measure: ``key`` (its values of the :class:`RowFile`'s key, to skip a row kept), ``run`` (measures
    it, returns the row) and ``group`` (the jobs that need the same data: when one finds its data absent, the
    others of its group are skipped)."""

    key: tuple
    run: Callable[[], dict]
    group: str = ""


def run_jobs(rows: RowFile, jobs: Iterable[Job], log=print, **meta) -> list[dict]:
    """Run each job whose key is not kept yet, in order, keeping its row (and ``meta``) as soon as it ends; a job
    raising ``FileNotFoundError`` (its data absent) skips the rest of its group (``"GROUP: skipped (why)"``).
    Returns every row kept."""
    done, absent = rows.done(), set()
    for job in jobs:
        if job.key in done or job.group in absent:
            continue
        try:
            row = job.run()
        except FileNotFoundError as err:
            log(f"{job.group}: skipped ({err})")
            absent.add(job.group)
            continue
        rows.add(row, **meta)
        done.add(job.key)
    return rows.rows()


def finish(benchmark: str, rows: list[dict], summary: Callable[[list[dict]], tuple[str, dict]],
           metrics: Callable[[dict], dict] | None = None, seconds: float = 0.0) -> int:
    """Print the tables of ``rows`` (``summary(rows) -> (markdown, stats)``) after a blank line, then the final JSON
    line: ``metrics(stats)`` (default ``{"summary": stats}``) and ``seconds``. Returns 0."""
    from benchmarks import common

    table, stats = summary(rows)
    print()
    print(table)
    print(common.final_json(benchmark, (metrics or (lambda s: {"summary": s}))(stats), seconds))
    return 0


# ------------------------------------------------------------------------ seeds, one process each
def add_seed_arguments(p) -> None:
    """``--seeds``, ``--jobs`` and ``--methods`` of the accuracy benchmarks (see :func:`several_seeds`)."""
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds: run the benchmark once per seed and report mean +- sd")
    p.add_argument("--jobs", type=int, default=1,
                   help="with --seeds: processes at a time; each method of a seed gets its own "
                        "process (and folder OUT/seedS-METHOD) when --jobs is at least seeds x methods")
    p.add_argument("--methods", default="random,adversarial",
                   help="the siamese variants to train: random and/or adversarial")


def run_seeds(script: Path, argv: Sequence[str], seeds: Sequence[int], out: Path, jobs: int = 1,
              log=print, split: Sequence[str] | None = None) -> list[dict]:
    """Run ``script`` once per seed (``--seed S --out OUT/seedS`` added to ``argv``), ``jobs`` at once.

    Each run's output goes to ``OUT/seedS.log``; returns the ``metrics`` of each run's last
    stdout line (:func:`benchmarks.common.final_json`), in the order of ``seeds``, each with its ``seed`` added.
    ``split``: method names; each seed then runs as one process per method (``--methods M``,
    folder ``OUT/seedS-M``, log ``OUT/seedS-M.log``) and their metrics are merged per seed.

    Raises:
        RuntimeError: a run failed or printed no result line (its log file is named).
    """
    out.mkdir(parents=True, exist_ok=True)
    parts = [None] if not split else list(split)
    pending = [(s, m) for s in seeds for m in parts]
    running, results = {}, {}
    try:
        _run_all(script, argv, pending, running, results, out, jobs, log)
    finally:  # a stopped benchmark stops its runs too
        for proc, logf in running.values():
            proc.kill()
            logf.close()
    merged = []
    for s in seeds:
        m = {"seed": s}
        for part in parts:
            m.update(results[(s, part)])
        m["seconds"] = max(results[(s, part)]["seconds"] for part in parts)
        merged.append(m)
    return merged


def _run_all(script, argv, pending, running, results, out, jobs, log) -> None:
    """The loop of :func:`run_seeds`: start runs up to ``jobs``, collect each finished one."""
    import subprocess
    import sys

    def name(key):
        s, part = key
        return f"seed{s}" if part is None else f"seed{s}-{part}"

    while pending or running:
        while pending and len(running) < max(1, jobs):
            key = pending.pop(0)
            logf = open(out / f"{name(key)}.log", "w")
            cmd = [sys.executable, "-u", str(script), *argv, "--seed", str(key[0]), "--out", str(out / name(key))]
            if key[1] is not None:
                cmd += ["--methods", key[1]]
            log(f"{name(key)}: {' '.join(cmd[2:])} > {out / name(key)}.log")
            running[key] = (subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=os.environ.copy()), logf)
        time.sleep(2)
        for key, (proc, logf) in list(running.items()):
            if proc.poll() is None:
                continue
            logf.close()
            del running[key]
            lines = (out / f"{name(key)}.log").read_text().strip().splitlines()
            last = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
            if proc.returncode or last is None:
                raise RuntimeError(f"{name(key).replace('seed', 'seed ', 1)} failed (exit {proc.returncode}); "
                                   f"see {out / name(key)}.log")
            results[key] = {**last["metrics"], "seconds": last["seconds"]}
            log(f"{name(key)}: done in {last['seconds']:.0f} s")


def several_seeds(script: Path, args, argv: Sequence[str], keys: Sequence[tuple[str, str]], benchmark: str,
                  title: str, t0: float, footer: str = "", log=print) -> int:
    """A benchmark's ``--seeds``: ``script`` once per seed in subprocesses, then the table with mean +- sd.

    ``argv`` is forwarded minus ``--seeds/--jobs/--seed/--out``; each seed's (merged) metrics get
    their miner gaps; prints the per-seed table of ``keys``, the gaps as mean +- standard error,
    writes ``OUT/summary.json`` and ends with the :func:`benchmarks.common.final_json` line of the means.
    """
    from benchmarks.common import final_json, seed_table, with_miner_gaps
    from whale.core.files import write_json_atomic

    seeds = [int(x) for x in str(args.seeds).split(",") if x.strip()]
    forward, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a.split("=", 1)[0] in ("--seeds", "--jobs", "--seed", "--out"):
            skip = "=" not in a
            continue
        forward.append(a)
    methods = [m for m in args.methods.split(",") if m]
    split = methods if args.jobs >= len(seeds) * len(methods) > len(seeds) else None
    results = [with_miner_gaps(r) for r in run_seeds(script, forward, seeds, Path(args.out), jobs=args.jobs,
                                                     split=split, log=log)]
    if any(r.get("skipped") for r in results):
        log(final_json(benchmark, {"skipped": True}, time.time() - t0))
        return 0
    keys = [(k, h) for k, h in keys if all(k in r for r in results)]
    table, summary = seed_table(results, keys)
    log(f"\n{title}; seeds {seeds}")
    log(table)
    for key, m in summary.items():
        if key.startswith("miner_gap_"):
            log(f"miner gap on {key[len('miner_gap_'):]}: {m['mean']:+.3f} +- {m['se']:.3f} "
                f"(mean +- standard error over {m['n']} seeds)")
    if footer:
        log(footer)
    flat = {f"{k}_{stat}": v[stat] for k, v in summary.items() for stat in ("mean", "sd", "se")}
    flat.update(seeds=",".join(map(str, seeds)), config=str(getattr(args, "config", "")))
    write_json_atomic(Path(args.out) / "summary.json", {"seeds": results, "summary": summary})
    log(final_json(benchmark, flat, time.time() - t0))
    return 0
