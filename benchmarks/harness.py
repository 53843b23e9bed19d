"""The skeleton the measuring benchmarks share: a benchmark states its rows, the harness runs and keeps them. Not a test.

A benchmark says what names a row (``key``: e.g. ``("set", "objective", "seed")``), what to run for each row
(:class:`Job`) and how its rows read as tables (a ``summary(rows) -> (markdown, stats)``); the harness gives

* **resume**: :class:`RowFile`, ``OUT/results.json`` (``{"rows": [...], ...}``), each row added as its run ends,
  under a lock and replacing a row of the same key (two commands on one ``--out``, e.g. the training-free rows
  beside a training, keep each other's rows); a killed benchmark run again skips the rows it has;
* **seeds one by one**: :func:`run_jobs` walks the jobs in the order given (seeds, sets, variants: the script's
  loops); a job whose data is absent (``FileNotFoundError``) skips the rest of its group, said once;
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
