"""An ensemble as a file: which runs enter with which weights, and how ``new_whale`` is placed.

``python ensemble.py --recipe RECIPE.yaml --out submissions/NAME.csv`` reads::

    runs:                                          # one entry per run folder or score folder
      - {path: runs/densenet121/fold*, weight: 1.0}        # a pattern: its folders share the weight
      - {path: runs/convnet_v1/fold0/scores/768, weight: 0.5}  # a snapshot's score folder
    threshold: {mode: fraction, value: 0.276}      # fixed (value = t) | fraction (value = share) | tune
    calibrate: false                               # optional, as --calibrate
    force_calibrated: false                        # optional, as --force-calibrated

instead of ``RUN_DIR ... --weights ... --threshold/--new-whale-fraction/--tune``; everything
else (averaging, identity checks, the submission check) is the same. Paths are relative to the
working directory, as on the command line. A ``path`` with ``*``, ``?`` or ``[`` is a pattern:
the folders it matches (sorted) enter with ``weight / count`` each, so ``weight`` is that model's
share however many folds it has. ``threshold`` may be left out only with ``calibrate: true``.
Every value is checked; a bad one raises :class:`whale.core.errors.ConfigError` naming the file and the
key (``runs[2].weight``). The paper's ensemble as a recipe: ``docs/ensemble.md``.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from whale.config.checker import Checker
from whale.core.errors import ConfigError

THRESHOLD_MODES = ("fixed", "fraction", "tune")
"""``threshold.mode``: ``fixed`` = ``--threshold``, ``fraction`` = ``--new-whale-fraction``, ``tune`` = ``--tune``."""


@dataclass(frozen=True)
class Recipe:
    """A checked recipe: run folders with one weight each (patterns expanded) and the new_whale rule."""

    runs: tuple[Path, ...]
    weights: tuple[float, ...]
    threshold: float | None = None
    new_whale_fraction: float | None = None
    tune: bool = False
    calibrate: bool = False
    force_calibrated: bool = False


def load_recipe(path) -> Recipe:
    """Read and check a recipe YAML file.

    Raises:
        ConfigError: unreadable or invalid YAML, an unknown or missing key, a bad value, or a
            pattern that matches nothing (the message names the file and the key).
    """
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the recipe ({e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: expected valid YAML, received a parse error: {e}") from None
    if isinstance(raw, dict) and "steps" in raw and "runs" not in raw:
        raise ConfigError(f"{path}: a recipe of steps (whale commands), not an ensemble of runs: run it with "
                          f"`whale recipe --recipe {path} --data DATA --out OUT`")
    return recipe_from_dict(raw, str(path))


def recipe_from_dict(raw, source: str = "<recipe>") -> Recipe:
    """Check a recipe as read from YAML (``source`` names it in errors) and expand its patterns."""
    c = Checker(source)
    raw = c.mapping(raw, "", ("runs", "threshold", "calibrate", "force_calibrated"), ("runs",))
    entries = raw["runs"]
    if not isinstance(entries, list) or not entries:
        raise c.fail("runs", "a non-empty list of {path, weight}", entries)
    runs, weights = [], []
    for i, entry in enumerate(entries):
        entry = c.mapping(entry, f"runs[{i}]", ("path", "weight"), ("path",))
        where = c.string(entry["path"], f"runs[{i}].path")
        weight = c.number(entry.get("weight", 1.0), f"runs[{i}].weight", float, 0.0)
        found = sorted(glob.glob(where)) if glob.has_magic(where) else [where]
        if not found:
            raise c.fail(f"runs[{i}].path", "a pattern matching at least one folder", where)
        runs += [Path(p) for p in found]
        weights += [weight / len(found)] * len(found)
    calibrate = c.boolean(raw.get("calibrate", False), "calibrate")
    force = c.boolean(raw.get("force_calibrated", False), "force_calibrated")
    rule = {}
    if raw.get("threshold") is not None:
        t = c.mapping(raw["threshold"], "threshold", ("mode", "value"), ("mode",))
        mode = c.choice(t["mode"], "threshold.mode", THRESHOLD_MODES)
        if mode == "tune":
            if "value" in t:
                raise c.fail("threshold.value", "no value with mode tune (the threshold is tuned on validation)",
                             t["value"])
            rule["tune"] = True
        else:
            if "value" not in t:
                raise ConfigError(f"{source}: threshold.value: required with mode {mode}")
            key = "threshold" if mode == "fixed" else "new_whale_fraction"
            rule[key] = c.number(t["value"], "threshold.value", float, 0.0, 1.0)
    elif not calibrate:
        raise ConfigError(f"{source}: threshold: required key is missing (or set calibrate: true); "
                          f"expected {{mode: {' | '.join(THRESHOLD_MODES)}, value: ...}}")
    if force and not calibrate:
        raise c.fail("force_calibrated", "false unless calibrate is true", raw["force_calibrated"])
    return Recipe(tuple(runs), tuple(weights), calibrate=calibrate, force_calibrated=force, **rule)
