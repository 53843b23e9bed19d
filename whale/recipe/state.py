"""Which steps of a recipe are done: ``OUT/recipe.json``, each step's command and how its last run went.

A step is done when its process exited 0; the file then holds the command it ran (the words after ``whale``, the
placeholders filled), its seconds and its peak memory. It is written atomically (:func:`whale.core.files.atomic_write`)
when a step starts and when it finishes, so a recipe killed at any moment leaves either the old file or the new one.

:func:`plan` decides what runs: the first chosen step that is not done with the same command runs, and so does every
chosen step after it (a step's output is the next steps' input). When a step starts, every later step stops being
done (:meth:`RecipeState.started`), so a recipe killed there, or run in part with ``--steps``, never counts a later
step made from an earlier output as done. A step's seconds are kept when its command changes: they estimate its
next run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from whale.core.errors import DataError
from whale.core.files import write_json_atomic

STATE_FILE = "recipe.json"
FORMAT = 1


class RecipeState:
    """The records of ``OUT/recipe.json``: ``{step: {command, done, seconds, peak_mb, finished}}``."""

    def __init__(self, path: Path, source: str, records: dict[str, dict] | None = None):
        self.path = Path(path)
        self.source = source
        self.records: dict[str, dict] = records or {}

    @classmethod
    def load(cls, out, source: str) -> RecipeState:
        """The state in folder ``out`` (none yet: no step done). ``source``: the recipe file, recorded beside.

        Raises:
            DataError: the file is not a state this module wrote (named, with what to do).
        """
        path = Path(out) / STATE_FILE
        if not path.exists():
            return cls(path, source)
        try:
            raw = json.loads(path.read_text())
            records = raw["steps"]
            ok = raw.get("format") == FORMAT and isinstance(records, dict) and all(
                isinstance(r, dict) and isinstance(r.get("command"), list) for r in records.values())
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise DataError(f"{path}: not a recipe state file ({e}); delete it to run every step again") from None
        if not ok:
            raise DataError(f"{path}: not a recipe state file of format {FORMAT}; delete it to run every step again")
        return cls(path, source, records)

    def done(self, name: str, command: Sequence[str]) -> bool:
        """Whether step ``name`` finished (exit status 0) with exactly ``command``."""
        record = self.records.get(name)
        return bool(record and record.get("done") and record["command"] == list(command))

    def seconds(self, name: str) -> float | None:
        """The seconds of step ``name``'s last finished run, whatever its command (``None``: it never finished)."""
        record = self.records.get(name) or {}
        return record.get("seconds")

    def started(self, name: str, command: Sequence[str], later: Sequence[str]) -> None:
        """Step ``name`` starts with ``command``: it and each step of ``later`` are no longer done (saved now)."""
        for step in [name, *later]:
            if step in self.records:
                self.records[step]["done"] = False
        self.records.setdefault(name, {})
        self.records[name].update(command=list(command), done=False)
        self.save()

    def finished(self, name: str, command: Sequence[str], seconds: float, peak_mb: float | None) -> None:
        """Step ``name`` exited 0 after ``seconds`` with a peak resident memory of ``peak_mb`` (saved now)."""
        self.records[name] = {"command": list(command), "done": True, "seconds": round(float(seconds), 3),
                              "peak_mb": peak_mb, "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.save()

    def save(self) -> None:
        write_json_atomic(self.path, {"format": FORMAT, "recipe": self.source, "steps": self.records})


def plan(names: Sequence[str], commands: Sequence[Sequence[str]], state: RecipeState, chosen: Sequence[str],
         redo: bool = False) -> list[bool]:
    """Whether each step (in the recipe's order) runs: a chosen step runs when it is not done with its command, when
    ``redo``, or when a step before it runs; a step that is not chosen never runs."""
    runs, stale = [], False
    for name, command in zip(names, commands):
        run = name in chosen and (redo or stale or not state.done(name, command))
        runs.append(run)
        stale = stale or run
    return runs
