"""What ``whale recipe`` shows while it runs, and the table it ends with.

One display for the whole recipe, on stderr (where progress bars go):

* ``live`` (stderr is a terminal): one line redrawn a few times a second, ``[i/n name] step time (recipe time,
  ~time left) | the step's latest output`` (its own progress bar's state included), and one line per finished step;
* ``lines`` (a log file, a notebook): a line when a step starts and ends, the step's own lines passed through as it
  writes them, and its latest state after a minute without a new line;
* ``quiet``: nothing.

The time left is the remaining steps' recorded seconds (:meth:`whale.recipe.state.RecipeState.seconds`, each step's
last finished run, on this ``--out``): ``~`` when every remaining step has run before, ``>=`` when only some have,
nothing on a first run. :func:`times_table` is the closing table of seconds and peak memory per step.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence

from whale.recipe.runner import LogTail

MODES = ("live", "lines", "quiet")
HEARTBEAT_SECONDS = 60.0
"""In ``lines`` mode, how long a step may write nothing before its latest state is shown again."""


def duration(seconds: float | None) -> str:
    """``H:MM:SS`` (``-`` for ``None``)."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def left_text(estimates: Sequence[float | None], elapsed: float) -> str:
    """The time left, from the recorded seconds of the running step (``estimates[0]``, ``elapsed`` into it) and of
    the steps after it: ``~H:MM:SS left``, ``>=H:MM:SS left`` when some have no record, ``''`` when none has."""
    known = [e for e in estimates if e is not None]
    if not known:
        return ""
    first = estimates[0]
    total = (max(first - elapsed, 0.0) if first is not None else 0.0) + sum(e for e in estimates[1:] if e is not None)
    return f"{'~' if len(known) == len(estimates) else '>='}{duration(total)} left"


class Display:
    """The progress of one recipe: :meth:`skipped`, :meth:`start`, :meth:`tick`, :meth:`end` per step."""

    def __init__(self, total: int, mode: str = "lines", stream=None, clock: Callable[[], float] = time.monotonic):
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, received {mode!r}")
        self.total, self.mode, self.clock = total, mode, clock
        self.stream = stream if stream is not None else sys.stderr
        self.began = clock()
        self.name, self.index, self.tail, self.estimates = "", 0, None, []
        self.heard = 0.0
        self.drawn = False

    @classmethod
    def choose(cls, total: int, quiet: bool, stream=None) -> Display:
        """``quiet``, else ``live`` on a terminal and ``lines`` elsewhere."""
        stream = stream if stream is not None else sys.stderr
        mode = "quiet" if quiet else ("live" if getattr(stream, "isatty", lambda: False)() else "lines")
        return cls(total, mode, stream)

    def _print(self, text: str) -> None:
        if self.mode == "quiet":
            return
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def skipped(self, index: int, name: str, why: str) -> None:
        """Step ``index`` (1-based) does not run: ``why`` (done before with the same command, not chosen)."""
        self._print(f"step {index}/{self.total} {name}: {why}")

    def start(self, index: int, name: str, command: str, tail: LogTail, estimates: Sequence[float | None]) -> None:
        """Step ``index`` starts: ``command`` as a shell line, ``tail`` its log, ``estimates`` the recorded seconds of
        it and of each step to run after it."""
        self.index, self.name, self.tail, self.estimates = index, name, tail, list(estimates)
        self.heard = self.clock()
        left = left_text(self.estimates, 0.0)
        self._print(f"step {index}/{self.total} {name}: {command} (log {tail.path}{'; ' + left if left else ''})")

    def tick(self, elapsed: float) -> None:
        """The running step is ``elapsed`` seconds in: show its news."""
        if self.mode == "quiet" or self.tail is None:
            return
        lines = self.tail.lines()
        status = f"{duration(elapsed)} (recipe {duration(self.clock() - self.began)}"
        left = left_text(self.estimates, elapsed)
        status += f", {left})" if left else ")"
        if self.mode == "live":
            text = f"[{self.index}/{self.total} {self.name}] {status} | {self.tail.latest}"
            width = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\x1b[K" + text[:max(width - 1, 20)])
            self.stream.flush()
            self.drawn = True
            return
        for line in lines:
            self._print(f"  {self.name} | {line}")
        now = self.clock()
        if lines:
            self.heard = now
        elif now - self.heard >= HEARTBEAT_SECONDS:
            self._print(f"  {self.name} | {status}: {self.tail.latest}")
            self.heard = now

    def end(self, text: str) -> None:
        """The running step ended: the rest of its lines (``lines`` mode), then ``step i/n name: text``."""
        if self.mode == "lines" and self.tail is not None:
            for line in self.tail.lines():
                self._print(f"  {self.name} | {line}")
        self._print(f"step {self.index}/{self.total} {self.name}: {text}")
        self.tail = None


def times_table(rows: Sequence[dict]) -> str:
    """The closing table: one row per step (``name``, ``status``, ``seconds``, ``peak_mb``), then the total time of
    the steps that have one."""
    header = ("step", "status", "time", "seconds", "peak MB")
    body = [(r["name"], r["status"], duration(r.get("seconds")),
             "-" if r.get("seconds") is None else f"{r['seconds']:.1f}",
             "-" if r.get("peak_mb") is None else f"{r['peak_mb']:,.0f}") for r in rows]
    total = sum(r["seconds"] for r in rows if r.get("seconds") is not None)
    body.append(("all", "", duration(total), f"{total:.1f}", ""))
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = []
    for row in [header, *body]:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])] + [c.rjust(w) for c, w in zip(row[2:], widths[2:])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
