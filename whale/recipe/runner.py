"""One step of a recipe as a process of its own: its output kept in a log file, its time and peak memory measured.

The step runs as ``PROGRAM WORDS...`` (``python -m whale`` under this interpreter, :data:`WHALE`) with standard
output and error appended to its log after a header line, so an earlier, failed attempt's lines stay above. The
process is reaped with ``os.wait4``, whose resource use gives ``ru_maxrss``: the peak resident memory of the step's
process or of any process it waited for (the keypoint matcher's extraction workers), as ``/usr/bin/time`` reports
it. While it runs, ``on_tick(seconds)`` is called a few times a second (the progress display reads the log with
:class:`LogTail`).

Ctrl-C stops the step as a user would: it gets a moment to end on the Ctrl-C its process group already received
(``whale train`` keeps its epochs), then SIGINT, then, after :data:`STOP_SECONDS`, SIGKILL; the interrupt then goes
on up. SIGTERM, which the command turns into :class:`Terminated`, reached the recipe alone: the step gets SIGINT at
once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from whale.core.memory import maxrss_mb

WHALE = (sys.executable, "-m", "whale")
"""The program a step's words follow: ``whale`` of this very interpreter and checkout."""
STOP_SECONDS = 30.0
"""How long an interrupted step has to end after SIGINT before it is killed."""
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminated(KeyboardInterrupt):
    """The recipe got SIGTERM (its step did not): raised by the command's signal handler."""


@dataclass(frozen=True)
class StepRun:
    """How one step's process ended: its exit status (``-N``: killed by signal N), seconds, peak resident MB."""

    status: int
    seconds: float
    peak_mb: float | None


def run_step(words: Sequence[str], log: Path, header: str, on_tick: Callable[[float], None] | None = None,
             program: Sequence[str] = WHALE, interval: float = 0.25) -> StepRun:
    """Run ``program + words`` with its output appended to ``log`` after the line ``header``; returns how it ended.

    Raises:
        KeyboardInterrupt: the recipe was interrupted; the step's process has ended (see the module's docstring).
    """
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # the log shows each line as the step writes it
    with open(log, "ab") as out:
        out.write(f"{header}\n".encode())
        out.flush()
        start = time.monotonic()
        proc = subprocess.Popen([*program, *words], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if on_tick is not None:
                    on_tick(time.monotonic() - start)
                time.sleep(interval)
        except BaseException as stop:
            _stop(proc, grace=0.0 if isinstance(stop, Terminated) else 2.0)
            raise
    seconds = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: Popen must not wait for it again
    return StepRun(proc.returncode, seconds, maxrss_mb(usage.ru_maxrss))


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """End an interrupted step: ``grace`` seconds for the Ctrl-C it got with the recipe, then SIGINT, then SIGKILL."""
    for sig, wait in ((None, grace), (signal.SIGINT, STOP_SECONDS), (signal.SIGKILL, None)):
        if sig is not None and proc.poll() is None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def clean(text: str) -> str:
    """A log line as a person reads it: terminal escape codes removed, and of a line a progress bar redrew with
    carriage returns only its last drawing that is not blank."""
    parts = [p.strip() for p in _ESCAPES.sub("", text).split("\r")]
    return next((p for p in reversed(parts) if p), "")


class LogTail:
    """What a step has written to its log since ``offset``: :meth:`lines` returns the new complete lines,
    :attr:`latest` is the last thing it wrote that is not blank (a progress bar's latest state included)."""

    def __init__(self, path: Path, offset: int = 0):
        self.path, self.offset = Path(path), offset
        self.partial = b""
        self.latest = ""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        found = [line for line in (clean(c.decode(errors="replace")) for c in complete) if line]
        now = clean(self.partial.decode(errors="replace")) or (found[-1] if found else "")
        self.latest = now or self.latest
        return found


def last_lines(log: Path, count: int, offset: int = 0) -> list[str]:
    """The last ``count`` non-blank lines ``log`` holds after byte ``offset`` (:func:`clean`)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in map(clean, text.split("\n")) if line][-count:]
