"""A recipe file: its steps, each a ``whale`` command line with placeholders, checked key by key.

::

    about: the best submission on real flukes        # optional: what the recipe makes
    submission: "{out}/submission.csv"               # optional: the submission it makes (named at the end)
    steps:
      - name: sift                                   # lowercase letters, digits, - and _; unique
        about: RootSIFT keypoints, checked           # optional: one line for the dry run and the progress
        run: whale score --matcher keypoints --config {configs}/keypoints_checked.yaml --data {data} --out {out}/sift

A ``run`` line is split into words as a shell splits it (quotes keep a word with spaces together), then each
placeholder in a word is replaced (:data:`PLACEHOLDERS`): a folder with spaces stays one word. A ``{name}`` must be a
placeholder (a typo is refused); braces around anything else (``--set "stages=[{epochs: 2}]"``) stay. Relative paths
are relative to the folder ``whale recipe`` runs in, as on the command line; ``{configs}`` is the toolkit's own
``configs/``, so a recipe runs from any folder. A bad value raises :class:`whale.core.errors.ConfigError` naming the
file and the key (``steps[2].run``). Whether each line is a command ``whale`` accepts is checked by the command
(:mod:`whale.recipe.__main__`), with ``whale``'s own parsers, before any step runs.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from whale.config.checker import Checker, read_mapping
from whale.core.errors import ConfigError

PLACEHOLDERS = {
    "data": "--data: the competition folder",
    "out": "--out: the recipe's folder (each step's output under it)",
    "store": "--store: the keypoint feature store (default {out}/store)",
    "trunk": "--trunk-cache: the networks' trunk maps (default {out}/trunk-cache)",
    "fold": "--fold: the validation fold (default 0)",
    "configs": "--configs: the toolkit's configs/ folder",
}
"""Each placeholder a ``run`` line may hold, and the flag of ``whale recipe`` that gives its value."""
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
STEP_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
TOOLKIT = Path(__file__).resolve().parents[2]
"""The checkout holding the ``whale`` package, ``configs/`` and ``recipes/``."""
NOT_STEPS = ("recipe", "completion")
"""Subcommands a step may not run: a recipe inside a recipe, and the shell completion script."""


@dataclass(frozen=True)
class Step:
    """One step: its name, the words of its ``whale`` line after ``whale`` (placeholders not yet replaced)."""

    name: str
    words: tuple[str, ...]
    about: str = ""

    @property
    def subcommand(self) -> str:
        return self.words[0]

    def command(self, values: Mapping[str, str]) -> list[str]:
        """The words after ``whale`` with each placeholder replaced by ``values[name]``."""
        return [fill(word, values) for word in self.words]


@dataclass(frozen=True)
class Recipe:
    """A checked recipe: where it was read from, its steps in order, what it makes."""

    source: str
    steps: tuple[Step, ...]
    about: str = ""
    submission: str | None = None

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def chosen(self, names: str | None) -> list[str]:
        """The steps ``--steps a,b`` names, in the recipe's order (every step for ``None``).

        Raises:
            ConfigError: an empty list or a name the recipe does not hold (the valid names listed).
        """
        if names is None:
            return self.names
        asked = [n.strip() for n in names.split(",")]
        if not all(asked):
            raise ConfigError(f"--steps: expected step names separated by commas, received {names!r}; "
                              f"{self.source} has {', '.join(self.names)}")
        unknown = [n for n in asked if n not in self.names]
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            raise ConfigError(f"--steps: unknown step{plural} {', '.join(map(repr, unknown))}; "
                              f"{self.source} has {', '.join(self.names)}")
        return [n for n in self.names if n in asked]


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` of :data:`PLACEHOLDERS` replaced by ``values[name]``."""
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def default_recipe() -> Path:
    """``recipes/flukes.yaml`` of the checkout: the best submission on real flukes (:func:`near`)."""
    return near(TOOLKIT / "recipes" / "flukes.yaml")


def near(path: Path) -> Path:
    """``path`` relative to the working folder when it lies under it (as a user would type it), else as it is."""
    relative = os.path.relpath(path)
    return Path(relative) if not relative.startswith("..") else Path(path)


def placeholder_values(data, out, fold: int = 0, store=None, configs=None, trunk=None) -> dict[str, str]:
    """``{placeholder: value}`` for ``whale recipe``'s flags: paths as given (``{store}`` defaults to
    ``{out}/store``, ``{trunk}`` to ``{out}/trunk-cache``), ``{configs}`` the checkout's ``configs/`` (relative to
    the working folder when it is under it, so the dry run prints what a user types)."""
    configs = near(TOOLKIT / "configs") if configs is None else configs
    return {"data": str(Path(data)), "out": str(Path(out)), "fold": str(int(fold)),
            "store": str(Path(store) if store is not None else Path(out) / "store"), "configs": str(Path(configs)),
            "trunk": str(Path(trunk) if trunk is not None else Path(out) / "trunk-cache")}


def load_recipe(path) -> Recipe:
    """Read and check a recipe file.

    Raises:
        ConfigError: unreadable or invalid YAML, an ensemble recipe (``runs:``), an unknown or missing key, a bad
            step name, a line that is not a ``whale`` command, an unknown placeholder (the file and key named).
    """
    raw = read_mapping(path, "recipe", "steps (and about, submission)")
    if "runs" in raw and "steps" not in raw:
        raise ConfigError(f"{path}: an ensemble recipe (runs, threshold), not a recipe of steps: give it to "
                          f"`whale ensemble --recipe {path}`")
    return recipe_from_dict(raw, str(path))


def recipe_from_dict(raw, source: str = "<recipe>") -> Recipe:
    """Check a recipe as read from YAML (``source`` names it in errors)."""
    c = Checker(source)
    raw = c.mapping(raw, "", ("about", "submission", "steps"), ("steps",))
    entries = raw["steps"]
    if not isinstance(entries, list) or not entries:
        raise c.fail("steps", "a non-empty list of {name, run}", entries)
    steps: list[Step] = []
    for i, entry in enumerate(entries):
        where = f"steps[{i}]"
        entry = c.mapping(entry, where, ("name", "about", "run"), ("name", "run"))
        name = c.string(entry["name"], f"{where}.name")
        if not STEP_NAME.fullmatch(name):
            raise c.fail(f"{where}.name", "a name of lowercase letters, digits, - and _", name)
        if name in [s.name for s in steps]:
            raise ConfigError(f"{source}: {where}.name: {name!r} names steps[{[s.name for s in steps].index(name)}] "
                              "already; expected a name of its own")
        line = c.string(entry["run"], f"{where}.run")
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise ConfigError(f"{source}: {where}.run: expected a command line a shell can split, received {line!r} "
                              f"({e})") from None
        if len(words) < 2 or words[0] != "whale" or words[1].startswith("-"):
            raise c.fail(f"{where}.run", "a whale command line, 'whale SUBCOMMAND ...'", line)
        if words[1] in NOT_STEPS:
            raise c.fail(f"{where}.run", f"a whale subcommand other than {' and '.join(NOT_STEPS)}", line)
        for word in words:
            _check_placeholders(word, f"{where}.run", source)
        about = c.string(entry.get("about"), f"{where}.about", optional=True) or ""
        steps.append(Step(name, tuple(words[1:]), " ".join(about.split())))
    about = c.string(raw.get("about"), "about", optional=True) or ""
    submission = c.string(raw.get("submission"), "submission", optional=True)
    if submission is not None:
        _check_placeholders(submission, "submission", source)
    return Recipe(source, tuple(steps), " ".join(about.split()), submission)


def _check_placeholders(text: str, key: str, source: str) -> None:
    for m in PLACEHOLDER.finditer(text):
        if m.group(1) not in PLACEHOLDERS:
            raise ConfigError(f"{source}: {key}: unknown placeholder {m.group(0)}; expected one of "
                              + ", ".join("{" + p + "}" for p in PLACEHOLDERS))
