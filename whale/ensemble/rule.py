"""The ensemble's first step: the rule it follows, resolved from the flags or a recipe and checked, before any work.

:func:`resolve_rule` turns ``whale ensemble``'s parsed line (:mod:`whale.ensemble.cli`) into a :class:`Rule`: the
runs and their weights (the flags' or a ``--recipe``'s, :mod:`whale.ensemble.recipe`, never both), how they combine
(:func:`whale.ensemble.fusion.resolve_fusion`), where ``new_whale`` goes (a given or stored threshold, a share of the
test set, one tuned on validation; or the calibrated rule), the competition format and the output files. Every
check that needs no score matrix is made here, so a bad line fails before a file is read: the outputs can be
written, validation and test files of a run come from one writer, a stored threshold is on the fusion's scale.
The later steps: :mod:`whale.ensemble.combined` (combine), :mod:`whale.ensemble.decide`, :mod:`whale.ensemble.report`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError
from whale.core.files import check_output
from whale.ensemble.combine import normalise_weights
from whale.ensemble.fusion import resolve_fusion
from whale.ensemble.identity import check_pairs, read_identities
from whale.ensemble.models import model_keys, model_weights
from whale.ensemble.recipe import load_recipe
from whale.formats import DEFAULT, FORMATS, Format, detect_format, get_format
from whale.inference.scorefile import score_path

_RECIPE_KEYS = ("runs", "weights", "threshold", "new_whale_fraction", "tune", "calibrate", "force_calibrated")
"""What a recipe gives in place of the flags (``RUN_DIR``, ``--weights`` and the threshold mode)."""


@dataclass(frozen=True)
class Rule:
    """What ``whale ensemble`` makes, checked (:func:`resolve_rule`).

    Attributes:
        runs: run folders or score folders, in order.
        weights: ``[n_runs]`` float64 summing to 1: given, or each model's equal, shared by its folds
            (:mod:`whale.ensemble.models`; ``tune_weights``: the combine step's choice).
        models: each run's model (:func:`whale.ensemble.models.model_keys`), None where a test file is missing.
        fusion, why_fusion: one of :data:`whale.ensemble.fusion.FUSIONS`, and why (a line for the log).
        fmt: the competition format (open-set label, submission columns).
        out: the submission CSV.
        threshold: a given threshold (a number, or a stored file's :class:`whale.ranking.stored.StoredValue`), or
            None; ``new_whale_fraction``, ``tune``: the other threshold modes (at most one of the three).
        calibrate, force_calibrated, cv_folds, seed: ``--calibrate``'s rule and its cross-validation.
        tune_new_share: the open-set queries' weight while tuning (None: as they come).
        tune_weights, weight_grid, weight_step: the weight search (:mod:`whale.ensemble.weights`).
        calibration: the calibrated fusion's method.
        sample: ``--sample`` (None: the data folder's recorded in ``run.json``, else the query order).
    """

    runs: tuple[Path, ...]
    weights: np.ndarray
    fusion: str
    why_fusion: str
    fmt: Format
    out: Path
    threshold: float | None = None
    new_whale_fraction: float | None = None
    tune: bool = False
    calibrate: bool = False
    force_calibrated: bool = False
    cv_folds: int = 5
    seed: int = 0
    tune_new_share: float | None = None
    tune_weights: bool = False
    weight_grid: str = "linear"
    weight_step: float | None = None
    calibration: str = "isotonic"
    sample: Path | None = None
    models: tuple[str, ...] | None = None

    @property
    def test_paths(self) -> list[Path]:
        return [score_path(r, "test") for r in self.runs]

    @property
    def val_paths(self) -> list[Path]:
        return [score_path(r, "val") for r in self.runs]

    def beside_out(self, suffix: str) -> Path:
        """A file beside the submission (:func:`beside`)."""
        return beside(self.out, suffix)


def recipe_or_flags(args) -> dict:
    """:data:`_RECIPE_KEYS` from ``args.recipe`` (:mod:`whale.ensemble.recipe`) or, without one, from the flags.

    Raises:
        ConfigError: the recipe is invalid, or runs, weights or a mode were also given as flags.
    """
    if args.recipe is None:
        return {key: getattr(args, key) for key in _RECIPE_KEYS}
    given = [flag for flag, value in (("RUN_DIR", args.runs), ("--weights", args.weights),
                                      ("--threshold", args.threshold), ("--new-whale-fraction", args.new_whale_fraction),
                                      ("--tune", args.tune), ("--calibrate", args.calibrate),
                                      ("--force-calibrated", args.force_calibrated))
             if value is not None and value is not False and value != []]
    if given:
        raise ConfigError(f"--recipe {args.recipe}: the recipe gives the runs, weights and threshold mode; "
                          f"received {', '.join(given)} as well (give them in one place)")
    recipe = load_recipe(args.recipe)
    return {key: getattr(recipe, key) for key in _RECIPE_KEYS} | {"runs": list(recipe.runs),
                                                                   "weights": list(recipe.weights)}


def resolve_rule(args) -> Rule:
    """The :class:`Rule` of ``whale ensemble``'s parsed line (``args``: its flags, :mod:`whale.ensemble.cli`).

    Raises:
        ConfigError: flags that contradict one another or a value out of range (the message names the flag), an
            output that cannot be written, a stored threshold on another scale than the fusion's.
        DataError: a run's validation and test files from different writers.
    """
    given = recipe_or_flags(args)
    tune, threshold, fraction = given["tune"], given["threshold"], given["new_whale_fraction"]
    share = args.tune_new_share
    if share is not None and not (tune or args.tune_weights):
        raise ConfigError("--tune-new-share weighs the validation queries of --tune / --tune-weights; give one of them")
    if share is not None and not 0.0 < share < 1.0:
        raise ConfigError(f"--tune-new-share must be in (0, 1), got {share}")
    if fraction is not None and not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"--new-whale-fraction must be in [0, 1], got {fraction}")
    if threshold is not None and not np.isfinite(threshold):
        raise ConfigError(f"--threshold must be a number, got {threshold}")
    runs = tuple(given["runs"])
    if args.weight_grid == "log" and args.weight_step is not None:
        raise ConfigError("--weight-step is the linear grid's step; the log grid (--weight-grid log) has none")
    if (args.weight_grid != "linear" or args.weight_step is not None) and not args.tune_weights:
        raise ConfigError("--weight-grid and --weight-step shape --tune-weights' search; give --tune-weights")
    if args.tune_weights and given["weights"] is not None:
        raise ConfigError("--weights and --tune-weights exclude each other: give the weights or let validation choose")
    weights = normalise_weights(given["weights"], len(runs))
    out = check_output(args.out)  # before any work: a folder or a read-only place is refused now
    if tune:
        for ext in ("csv", "png", "json"):
            check_output(beside(out, f".threshold.{ext}"), "--tune's file")
    test_paths, val_paths = [score_path(r, "test") for r in runs], [score_path(r, "val") for r in runs]
    check_pairs(runs, test_paths, val_paths)
    models = None
    if all(p.is_file() for p in test_paths):
        models = tuple(model_keys(read_identities(test_paths), runs))
        if given["weights"] is None and not args.tune_weights:
            weights = model_weights(models)  # equal per run unless models have unequal numbers of folds
    fusion, why = resolve_fusion(args.fusion, len(runs), val_paths, tune_weights=args.tune_weights,
                                 weights_given=given["weights"] is not None, models=models)
    scale = getattr(threshold, "scale", None)  # a stored threshold file's
    if scale is not None and (scale == "probability") != (fusion != "scores"):
        raise ConfigError(f"--threshold {threshold.path}: a threshold on the runs' {scale} scale, but these runs are "
                          f"fused by {fusion} ({why}): give --fusion "
                          + ("logodds or mean" if scale == "probability" else "scores") + " to read it as it was tuned")
    if fusion != "scores" and tune:
        check_output(beside(out, ".calibration.json"), "--tune's file")
    return Rule(runs=runs, weights=weights, fusion=fusion, why_fusion=why, fmt=recorded_format(runs, args.format),
                out=out, threshold=threshold, new_whale_fraction=fraction, tune=tune, calibrate=given["calibrate"],
                force_calibrated=given["force_calibrated"], cv_folds=args.cv_folds, seed=args.seed,
                tune_new_share=share, tune_weights=args.tune_weights, weight_grid=args.weight_grid,
                weight_step=args.weight_step, calibration=args.calibration, sample=args.sample, models=models)


def beside(out: Path, suffix: str) -> Path:
    """A file beside the submission ``out``: ``NAME.csv`` -> ``NAME{suffix}`` (``NAME.threshold.json``)."""
    name = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(name + suffix)


def recorded_sample(run_dirs: Sequence[Path]) -> Path | None:
    """``sample_submission.csv`` of the data folder recorded in a run's ``run.json``, if it exists."""
    for meta in _run_metas(run_dirs):
        sample = Path(meta["data"]) / "sample_submission.csv" if meta.get("data") else None
        if sample is not None and sample.is_file():
            return sample
    return None


def recorded_format(run_dirs: Sequence[Path], name: str | None = None) -> Format:
    """The competition format: ``name``, else the first run's ``run.json`` record (its ``format``, else its
    data folder's ``train.csv`` header), else 2019's."""
    if name is not None:
        return get_format(name)
    for meta in _run_metas(run_dirs):
        if meta.get("format") in FORMATS:
            return get_format(meta["format"])
        if meta.get("data") and (Path(meta["data"]) / "train.csv").is_file():
            return detect_format(meta["data"])
    return DEFAULT


def _run_metas(run_dirs: Sequence[Path]):
    """Yield the readable ``run.json`` objects of the runs, in run order."""
    for run in run_dirs:
        meta = Path(run) / "run.json"
        if not meta.is_file():  # a snapshot's score folder RUN/scores/384: the run's run.json
            meta = Path(run).parent.parent / "run.json"
        if not meta.is_file():
            continue
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield data
