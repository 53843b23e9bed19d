"""A recipe's steps in order, each run once its turn comes, resumed where a killed run stopped.

:func:`cook` runs the steps :func:`whale.recipe.state.plan` picks, each as its own process
(:func:`whale.recipe.runner.run_step`) with its log in ``OUT/logs/NAME.log``, and records each finished one in
``OUT/recipe.json``. It writes ``OUT/recipe-times.json`` (each step's status, seconds and peak memory) after every step
and prints the same as a table at the end. A step that fails ends the recipe: the last lines of its log on stderr,
then :class:`StepFailed` naming it, its exit code and that the same command goes on from it. One ``whale recipe``
at a time may use an ``--out`` (a lock file beside the state).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from whale.core.errors import WhaleError
from whale.core.files import write_json_atomic
from whale.recipe.display import Display, duration, times_table
from whale.recipe.runner import WHALE, LogTail, last_lines, run_step
from whale.recipe.state import RecipeState, plan
from whale.recipe.steps import Recipe, fill

TIMES_FILE = "recipe-times.json"
LOCK_FILE = ".recipe.lock"
LOG_LINES = 20
"""Lines of a failed step's log shown with the error."""


class StepFailed(WhaleError):
    """A step exited with a status other than 0 (the message names it, its exit code and its log)."""


def shell_line(words: Sequence[str], program: Sequence[str] = ("whale",)) -> str:
    """``program + words`` quoted for a POSIX shell."""
    return shlex.join([*program, *words])


def dry_run(recipe: Recipe, values: dict[str, str], chosen: Sequence[str], program: Sequence[str] = WHALE) -> str:
    """The chosen steps' exact command lines, each after a comment naming the step: a script to run by hand."""
    lines = [f"# {recipe.source}: {len(chosen)} of {len(recipe.steps)} steps, from this folder"]
    for i, step in enumerate(recipe.steps, 1):
        if step.name in chosen:
            lines.append(f"# {i}/{len(recipe.steps)} {step.name}" + (f": {step.about}" if step.about else ""))
            lines.append(shell_line(step.command(values), program))
    return "\n".join(lines)


@contextlib.contextmanager
def _only_one(out: Path):
    """Hold ``OUT/.recipe.lock`` for the block; another ``whale recipe`` on ``out`` is refused."""
    import fcntl

    with open(out / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise WhaleError(f"{out}: another whale recipe is running on this --out (pid {holder}); wait for it or "
                             "choose another --out") from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield


def cook(recipe: Recipe, values: dict[str, str], chosen: Sequence[str] | None = None, redo: bool = False,
         display: Display | None = None, program: Sequence[str] = WHALE) -> list[dict]:
    """Run ``recipe``'s steps with its placeholders' ``values`` (``values["out"]`` the recipe's folder); returns one
    row per step (``name``, ``status``, ``seconds``, ``peak_mb``, ``command``, ``log``), as ``recipe-times.json``.

    ``chosen``: the steps that may run (default every one); ``redo``: run them even when done.

    Raises:
        StepFailed: a step exited with a status other than 0 (the later steps did not run).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the running step ended, its message says how to go on.
    """
    out = Path(values["out"])
    out.mkdir(parents=True, exist_ok=True)
    names = recipe.names
    chosen = list(names if chosen is None else chosen)
    display = display if display is not None else Display(len(names), "quiet")
    commands = [step.command(values) for step in recipe.steps]
    with _only_one(out):
        state = RecipeState.load(out, recipe.source)
        runs = plan(names, commands, state, chosen, redo)
        rows = [{"name": n, "status": "not run", "seconds": None, "peak_mb": None,
                 "command": shell_line(c), "log": str(out / "logs" / f"{n}.log")} for n, c in zip(names, commands)]
        for i, (step, command, run) in enumerate(zip(recipe.steps, commands, runs)):
            row = rows[i]
            if not run:
                done = state.done(step.name, command)
                record = state.records[step.name] if done else {}
                row.update(status="done before" if done else "not chosen", seconds=record.get("seconds"),
                           peak_mb=record.get("peak_mb"))
                display.skipped(i + 1, step.name, f"done before ({duration(row['seconds'])}), the same command"
                                if done else "not chosen (--steps)")
                continue
            _run_one(recipe, i, command, state, runs, rows, display, out, program)
        _write_times(out, recipe, rows)
    print(times_table(rows))
    print(f"times: {out / TIMES_FILE}")
    if recipe.submission is not None:
        print(f"submission: {fill(recipe.submission, values)}")
    return rows


def _run_one(recipe: Recipe, i: int, command: list[str], state: RecipeState, runs: list[bool], rows: list[dict],
             display: Display, out: Path, program: Sequence[str]) -> None:
    """Step ``i``: run, measured, recorded; a failure or an interrupt written to the times file and raised."""
    step, row, n = recipe.steps[i], rows[i], len(recipe.steps)
    log = Path(row["log"])
    offset = log.stat().st_size if log.exists() else 0
    later = recipe.names[i + 1:]
    state.started(step.name, command, later)
    header = f"=== whale recipe {recipe.source}: step {i + 1}/{n} {step.name}, {time.strftime('%Y-%m-%d %H:%M:%S')}: " \
             f"{shell_line(command)}"
    offset += len(header.encode()) + 1  # this attempt's lines start after its header
    tail = LogTail(log, offset)
    display.start(i + 1, step.name, shell_line(command), tail,
                  [state.seconds(recipe.names[j]) for j in range(i, n) if runs[j]])
    resume = f"the same whale recipe command goes on from step {step.name}"
    try:
        result = run_step(command, log, header, display.tick, program)
    except KeyboardInterrupt:
        row["status"] = "interrupted"
        _write_times(out, recipe, rows)
        display.end("interrupted")
        raise KeyboardInterrupt(f"interrupted during step {i + 1}/{n} {step.name} (log {log}); {resume}") from None
    row.update(seconds=round(result.seconds, 3), peak_mb=result.peak_mb)
    if result.status != 0:
        row["status"] = f"failed (exit {result.status})"
        _write_times(out, recipe, rows)
        ended = _ending(result.status)
        display.end(f"failed with {ended} after {duration(result.seconds)}")
        tail = last_lines(log, LOG_LINES, offset)
        print(f"--- the last {len(tail)} lines of {log}:", *tail, "---", sep="\n", file=sys.stderr)
        raise StepFailed(f"step {i + 1}/{n} {step.name} failed with {ended} (its log: {log}); {resume}")
    state.finished(step.name, command, result.seconds, result.peak_mb)
    row["status"] = "ran"
    _write_times(out, recipe, rows)
    peak = f", peak {result.peak_mb:,.0f} MB" if result.peak_mb is not None else ""
    display.end(f"done in {duration(result.seconds)}{peak}")


def _ending(status: int) -> str:
    """``exit code N``, or for a process a signal ended (``-N``) its name: the kernel's OOM killer sends SIGKILL."""
    if status >= 0:
        return f"exit code {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"exit code {status}, killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")


def _write_times(out: Path, recipe: Recipe, rows: list[dict]) -> None:
    total = sum(r["seconds"] for r in rows if r["seconds"] is not None)
    write_json_atomic(out / TIMES_FILE, {"recipe": recipe.source, "steps": rows, "seconds": round(total, 3),
                                         "written": time.strftime("%Y-%m-%d %H:%M:%S")})
