"""``ensemble.py``: runs' score files -> fused -> ``new_whale`` placed -> checked submission.

The runs, weights and mode come as flags or as a YAML recipe (``--recipe``, :mod:`whale.ensemble.recipe`).
How the runs combine is ``--fusion`` (:mod:`whale.ensemble.fusion`): the weighted average of raw scores (one
run, folds of one model, ``--weights``, ``--tune-weights``), or, the default for runs of several models, each
run calibrated on its validation file to P(same whale) and the probabilities fused (then every threshold is a
probability); the summary names the rule.

The paper's threshold rule is the default (fixed ``--threshold``, ``--tune`` on validation
MAP@5, or ``--new-whale-fraction`` of the test set: exactly that share, ties broken by query
order); ``--calibrate`` cross-validates the calibrated rule of :mod:`whale.ranking.calibrate`
against the tuned threshold and, with a threshold mode, writes the submission with the
winner (``--force-calibrated``: the calibrated rule regardless), saying which and why.
Every mode prints the implied test share of ``new_whale`` at rank 1 and warns outside
[0.10, 0.60] (the competition's test set: about 0.28). The inputs' identities are printed
and bad mixes refused (:mod:`whale.ensemble.identity`). Averaging is :mod:`whale.ensemble.combine`, the rules are
:mod:`whale.ranking`, the file format :mod:`whale.inference.scorefile`.

The competition format (:mod:`whale.formats`: the open-set label ``new_whale`` or
``new_individual``, the submission's columns ``Image,Id`` or ``image,predictions``) is
``--format``, else the one of the data folder recorded in the first run's ``run.json``, else 2019's.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale import command
from whale.ensemble.combine import average_score_files, normalise_weights, validation_groups
from whale.ensemble.fusion import FUSIONS, calibrate_runs, resolve_fusion, write_fusion
from whale.ensemble.identity import (check_inputs, check_no_leak, check_pairs, check_same_queries,
                                     identity_table, read_identities)
from whale.ensemble.recipe import load_recipe
from whale.ensemble.report import plot_thresholds, write_threshold_csv
from whale.core.errors import ConfigError, DataError
from whale.core.files import check_output
from whale.formats import DEFAULT, FORMATS, Format, detect_format, get_format
from whale.inference.scorefile import first_names, score_path
from whale.ranking.stored import threshold_arg, write_threshold
from whale.ranking.calibrate import Calibrator, cross_validate
from whale.ranking.pairprob import METHODS
from whale.ranking.newwhale import (map_for_thresholds, new_whale_shares, predict_for_fraction,
                                    predict_from_top, share_first, tune)

SANE_SHARE = (0.10, 0.60)
"""Test shares of ``new_whale`` at rank 1 outside this range draw a warning."""
KAGGLE_SHARE = 0.28
"""About the share of ``new_whale`` images in the competition's test set."""
from whale.ranking.topids import concat_top_ids, top_ids


PROG = "ensemble.py"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ensemble.py`` and ``whale ensemble`` (:mod:`whale.command`)."""
    p.description = "Weighted average of runs' score files -> new_whale insertion -> submission CSV."
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR",
                   help="run folders with scores/test.npz (and scores/val.npz for --tune/--calibrate), or "
                        "score folders such as a snapshot's RUN_DIR/scores/384")
    p.add_argument("--recipe", type=Path, default=None,
                   help="YAML recipe: runs with weights and the threshold mode, instead of RUN_DIR, --weights "
                        "and the mode flags (whale.ensemble.recipe; the paper's: docs/ensemble.md)")
    p.add_argument("--weights", nargs="+", type=float, default=None, metavar="W",
                   help="one weight per run (normalised to sum 1); default equal")
    p.add_argument("--tune-weights", action="store_true",
                   help="choose the weights by validation MAP@5 (threshold tuned at each) on the --weight-grid: "
                        "runs of different kinds, e.g. a trained run and the keypoint matcher")
    p.add_argument("--weight-grid", choices=("linear", "log"), default="linear",
                   help="--tune-weights' grid: linear (steps of --weight-step summing to 1, the default) or log "
                        "(each run after the first at 0 or 2^-17..2^6 of the first's weight; up to 3 runs): the "
                        "keypoint matcher with a network needs the log grid")
    p.add_argument("--weight-step", type=float, default=None, metavar="S",
                   help="step of the linear --weight-grid (default 0.1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                      help="new_whale at the first rank whose probability is < T (paper, Table 2); T is a number "
                           "or a stored threshold file (--tune's NAME.threshold.json, a run's scores/threshold.json)")
    mode.add_argument("--new-whale-fraction", type=float, default=None, metavar="F",
                      help="choose T so a share F of test images get new_whale at rank 1 (~0.276 on Kaggle)")
    mode.add_argument("--tune", action="store_true",
                      help="choose T by validation MAP@5 over a fine grid; writes NAME.threshold.{csv,png} and "
                           "NAME.threshold.json (T itself, what --threshold, explain and catalogue read)")
    p.add_argument("--fusion", choices=FUSIONS, default=None,
                   help="how several runs combine: mean (each run's scores calibrated on its validation file to "
                        "P(same whale), the probabilities averaged: the default for runs of several models), "
                        "logodds (their log-odds beyond the base rates summed, naive Bayes) or scores (the weighted "
                        "average of raw scores: the paper's; one run's, folds', --weights' and --tune-weights' "
                        "default); a calibrated rule makes the threshold a probability (docs/ensemble.md)")
    p.add_argument("--calibration", choices=METHODS, default="isotonic",
                   help="with a calibrated --fusion: isotonic (default) or logistic on the score's log-odds")
    p.add_argument("--tune-new-share", type=float, default=None, metavar="F",
                   help="with --tune (and --tune-weights): weigh validation's new_whale queries as a share F of "
                        "them (e.g. 0.276, the 2019 test set's), when the fold holds fewer or more than the test")
    p.add_argument("--calibrate", action="store_true",
                   help="place new_whale by expected MAP@5 from probabilities calibrated on validation; "
                        "prints its cross-validated MAP@5 beside the tuned threshold's")
    p.add_argument("--force-calibrated", action="store_true",
                   help="with --calibrate and a threshold mode: write the calibrated rule even when the "
                        "threshold wins the cross-validation")
    p.add_argument("--cv-folds", type=int, default=5, help="folds for the cross-validation of --calibrate")
    p.add_argument("--seed", type=int, default=0, help="seed of the cross-validation split")
    p.add_argument("--out", required=True, type=Path, help="submission CSV, e.g. submissions/NAME.csv")
    p.add_argument("--sample", type=Path, default=None,
                   help="sample_submission.csv giving the row order (default: the one in the data "
                        "folder recorded in the first run's run.json, if any; else the npz query order)")
    p.add_argument("--format", choices=list(FORMATS), default=None,
                   help="competition format: open-set label and submission columns (default: the data "
                        f"folder recorded in the first run's run.json, else {DEFAULT.name})")
    command.check_with(p, check_args)


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Without ``--recipe``: runs and a threshold mode are needed (a recipe gives both); ``p.error`` otherwise."""
    if args.recipe is not None:
        return
    if not args.runs:
        p.error("give RUN_DIR ... or --recipe FILE")
    if args.threshold is None and args.new_whale_fraction is None and not args.tune and not args.calibrate:
        p.error("one of --threshold, --new-whale-fraction, --tune (or --calibrate) is required")


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


def apply_recipe(args) -> None:
    """Fill ``args`` from ``args.recipe`` (:mod:`whale.ensemble.recipe`).

    Raises:
        ConfigError: the recipe is invalid, or runs, weights or a mode were also given as flags.
    """
    given = [flag for flag, value in (("RUN_DIR", args.runs), ("--weights", args.weights),
                                      ("--threshold", args.threshold), ("--new-whale-fraction", args.new_whale_fraction),
                                      ("--tune", args.tune), ("--calibrate", args.calibrate),
                                      ("--force-calibrated", args.force_calibrated))
             if value is not None and value is not False and value != []]
    if given:
        raise ConfigError(f"--recipe {args.recipe}: the recipe gives the runs, weights and threshold mode; "
                          f"received {', '.join(given)} as well (give them in one place)")
    recipe = load_recipe(args.recipe)
    args.runs, args.weights = list(recipe.runs), list(recipe.weights)
    for key in ("threshold", "new_whale_fraction", "tune", "calibrate", "force_calibrated"):
        setattr(args, key, getattr(recipe, key))


def _sibling(out: Path, suffix: str) -> Path:
    name = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(name + suffix)


def _fmt_shares(shares: np.ndarray) -> str:
    return "  ".join(f"r{i + 1} {s:.3f}" for i, s in enumerate(shares))


def _choose_rule(have_threshold: bool, force: bool, cv) -> tuple[str, str]:
    """``(rule, why)``: which rule writes the submission under ``--calibrate``."""
    scores = f"cross-validated MAP@5: calibrated {cv.calibrated_map:.5f}, tuned threshold {cv.threshold_map:.5f}"
    if not have_threshold:
        return "calibrated", f"--calibrate without a threshold mode ({scores})"
    if force:
        return "calibrated", f"--force-calibrated ({scores})"
    if cv.calibrated_map > cv.threshold_map:
        return "calibrated", f"it won the cross-validation ({scores})"
    return "threshold", (f"the threshold rule won the cross-validation ({scores}), so the threshold mode "
                         "given writes it; --force-calibrated writes the calibrated rule anyway")


def _share_sanity(share: float, log, label: str = DEFAULT.open_label) -> None:
    """Print the implied test share of the open-set ``label`` at rank 1; warn outside :data:`SANE_SHARE`."""
    lo, hi = SANE_SHARE
    log(f"  implied test share of {label} at rank 1: {share:.4f} (the 2019 competition's test set: ~{KAGGLE_SHARE})")
    if not lo <= share <= hi:
        log(f"warning: {share:.1%} of test images get {label} first, outside [{lo:.2f}, {hi:.2f}]; the "
            f"competition's share is ~{KAGGLE_SHARE}: a threshold this far off usually means short runs, "
            "few validation queries, or a validation set unlike the test set "
            "(consider --new-whale-fraction 0.28)")


def _tuned_weights(runs: Sequence[Path], args, log) -> np.ndarray:
    """``--tune-weights``: the runs' weights of best validation MAP@5 (:mod:`whale.ensemble.weights`)."""
    from whale.ensemble.weights import format_weights, tune_weights

    val_paths = [score_path(r, "val") for r in runs]
    missing = [str(p) for p in val_paths if not p.is_file()]
    if missing:
        raise DataError(f"--tune-weights needs every run's validation scores; missing: {first_names(missing)}")
    identities = read_identities(val_paths)
    check_inputs(val_paths, identities, log=log)
    check_no_leak(val_paths)
    check_same_queries(val_paths, identities)
    fmt = recorded_format(runs, args.format)
    step = 0.1 if args.weight_step is None else args.weight_step
    grid = f"grid step {step:g}" if args.weight_grid == "linear" else "log grid, ratios 2^-17..2^6 to the first run"
    log(f"weights tuned on validation ({grid}, threshold tuned at each):")
    weights, best, _ = tune_weights(val_paths, fmt.open_label, step, log=lambda m: log(m),
                                    open_share=args.tune_new_share, grid=args.weight_grid)
    log(f"tuned weights {format_weights(weights)}: validation MAP@5 {best:.5f} (in-sample)")
    return weights


def threshold_probability(run: Path, val_path: Path, t: float, open_label: str) -> str:
    """One run's tuned threshold read as P(same whale) by the isotonic calibration of its validation pairs
    (:class:`whale.ranking.pairprob.PairCalibration`; the ranking itself is the raw scores'), as one line."""
    from whale.inference.scorefile import load_score_file
    from whale.ranking.pairprob import PairCalibration

    val = load_score_file(val_path, need_query_ids=True)
    try:
        cal = PairCalibration.fit(val.scores, val.query_ids, val.gallery_ids, open_label)
    except DataError as exc:
        return f"the threshold as a probability: unknown ({exc})"
    p = float(cal.transform(np.float64([t]))[0])
    return (f"the threshold as a probability: P(same whale) {p:.4g} at score {t:.6g} (calibration of {run}'s "
            f"validation pairs: {cal.describe()}); P(same whale) 0.5 at score {cal.score_for(0.5):.4g}")


def main(argv: Sequence[str] | None = None, log=print) -> int:
    """``ensemble.py``: 0, or 2 on bad input with a one-line error (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, lambda args: run(args, log=log), argv)


def run(args: argparse.Namespace, log=print) -> int:
    """Write the submission ``args`` describe. Files ``--tune`` wrote beside the submission go again if
    the submission is not written (a full disk): no threshold file speaks for a submission that is not there."""
    written: list[Path] = []
    try:
        return _run(args, log, written)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def _run(args: argparse.Namespace, log, written: list[Path]) -> int:
    """Run ``ensemble.py``; returns 0. Raises :class:`whale.core.errors.WhaleError` on bad input."""
    from whale.submission import check_submission, write_submission

    if args.recipe is not None:
        apply_recipe(args)
    if args.tune_new_share is not None and not (args.tune or args.tune_weights):
        raise ConfigError("--tune-new-share weighs the validation queries of --tune / --tune-weights; give one of them")
    if args.tune_new_share is not None and not 0.0 < args.tune_new_share < 1.0:
        raise ConfigError(f"--tune-new-share must be in (0, 1), got {args.tune_new_share}")
    if args.new_whale_fraction is not None and not 0.0 <= args.new_whale_fraction <= 1.0:
        raise ConfigError(f"--new-whale-fraction must be in [0, 1], got {args.new_whale_fraction}")
    if args.threshold is not None and not np.isfinite(args.threshold):
        raise ConfigError(f"--threshold must be a number, got {args.threshold}")
    runs = list(args.runs)
    if args.weight_grid == "log" and args.weight_step is not None:
        raise ConfigError("--weight-step is the linear grid's step; the log grid (--weight-grid log) has none")
    if (args.weight_grid != "linear" or args.weight_step is not None) and not args.tune_weights:
        raise ConfigError("--weight-grid and --weight-step shape --tune-weights' search; give --tune-weights")
    if args.tune_weights and args.weights is not None:
        raise ConfigError("--weights and --tune-weights exclude each other: give the weights or let validation choose")
    weights = normalise_weights(args.weights, len(runs))
    out = check_output(args.out)  # before any work: a folder or a read-only place is refused now
    if args.tune:
        for extra in (_sibling(out, f".threshold.{ext}") for ext in ("csv", "png", "json")):
            check_output(extra, "--tune's file")
    check_pairs(runs, [score_path(r, "test") for r in runs], [score_path(r, "val") for r in runs])
    val_paths = [score_path(r, "val") for r in runs]
    fusion_name, why_fusion = resolve_fusion(args, len(runs), val_paths)
    scale = getattr(args.threshold, "scale", None)  # a stored threshold file's
    if scale is not None and (scale == "probability") != (fusion_name != "scores"):
        raise ConfigError(f"--threshold {args.threshold.path}: a threshold on the runs' {scale} scale, but these runs are "
                          f"fused by {fusion_name} ({why_fusion}): give --fusion "
                          + ("logodds or mean" if scale == "probability" else "scores") + " to read it as it was tuned")
    if args.tune_weights:
        weights = _tuned_weights(runs, args, log)
    fmt = recorded_format(runs, args.format)
    open_label = fmt.open_label
    fusion, fused = None, {}
    if fusion_name != "scores":
        if args.tune:
            check_output(_sibling(out, ".calibration.json"), "--tune's file")
        log(f"runs calibrated on their validation scores ({args.calibration}), fused by {fusion_name} "
            f"({why_fusion}):")
        fusion = calibrate_runs(runs, val_paths, fusion_name, open_label, args.calibration, log=log)
        fused = fusion.maps()

    log("runs and weights:")
    for run, w in zip(runs, weights):
        log(f"  {w:.4f}  {run}")
    test_paths = [score_path(r, "test") for r in runs]
    test_ids = read_identities(test_paths)
    log("test score files:")
    for line in identity_table(test_paths, test_ids):
        log("  " + line)
    check_inputs(test_paths, test_ids, log=log)
    log("test scores:" if fusion is None else "test probabilities:")
    test = average_score_files(test_paths, weights, log=log, **fused)
    if fmt != DEFAULT:
        log(f"format: {fmt.name} (open-set label {open_label}, submission columns {','.join(fmt.submission_columns)})")
    test_top = top_ids(test, open_label=open_label)
    log(f"  {test.n_query} test images x {len(test.gallery)} gallery images")

    have_val = [p.is_file() for p in val_paths]
    val_top = None
    if args.tune or args.calibrate:
        missing = [str(p) for p, h in zip(val_paths, have_val) if not h]
        if missing:
            raise DataError(f"--tune/--calibrate need every run's validation scores; missing: {first_names(missing)}")
    if all(have_val):
        val_ids = read_identities(val_paths)
        log("validation score files:")
        for line in identity_table(val_paths, val_ids):
            log("  " + line)
        check_inputs(val_paths, val_ids, log=log)
        check_no_leak(val_paths)
        log("validation scores (averaged within equal query sets, concatenated across disjoint ones):")
        groups = validation_groups(val_paths, weights, log=log, **fused)
        val_top = concat_top_ids([top_ids(g, open_label=open_label) for g in groups])
        del groups  # only the top ids are needed from here on
        log(f"  {val_top.n_query} validation queries, "
            f"{float((val_top.truth == open_label).mean()):.3f} of them {open_label}")
    else:
        log("validation scores: not every run has scores/val.npz; no validation estimate")

    t = None
    expected = {}
    threshold_predictions = None
    if args.threshold is not None:
        t, how = float(args.threshold), "given"
    elif args.new_whale_fraction is not None:
        threshold_predictions, t = predict_for_fraction(test_top, args.new_whale_fraction)
        how = (f"new_whale first for exactly round({args.new_whale_fraction:g} x {test_top.n_query}) test "
               "images, lowest best-id score first, ties broken by query order")
    elif args.tune:
        t, best_map, grid, maps = tune(val_top, open_share=args.tune_new_share)
        how = "tuned on validation MAP@5" + ("" if fusion is None else f" of the runs' {fusion.rule}-fused probabilities")
        csv_path = write_threshold_csv(_sibling(out, ".threshold.csv"), grid, maps)
        written.append(csv_path)
        png_path = plot_thresholds(_sibling(out, ".threshold.png"), grid, maps, t,
                                   share_first(val_top, grid), share_first(test_top, grid))
        written.append(png_path)
        stored = write_threshold(_sibling(out, ".threshold.json"), t, map5=best_map, open_label=open_label,
                                 tuned_on="validation scores of " + ", ".join(map(str, runs)), rule=how,
                                 scale="score" if fusion is None else "probability")
        written.append(stored)
        if fusion is not None:
            written.append(write_fusion(_sibling(out, ".calibration.json"), fusion))
            log(f"the runs' calibrations and fusion rule -> {written[-1]}")
        log(f"threshold grid ({grid.size} values, {grid.min():g}..{grid.max():g}) -> {csv_path}, {png_path}; "
            f"tuned threshold -> {stored}")
        log(f"tuned threshold {t:.6g}: validation MAP@5 {best_map:.5f} (in-sample); "
            f"test share of {open_label} at rank 1: {share_first(test_top, [t])[0]:.4f}")
        if fusion is not None:
            log(f"  the threshold is a probability: {open_label} goes before every id whose fused P(same whale) "
                f"is below {t:.4g}")
        elif len(runs) == 1:
            log("  " + threshold_probability(runs[0], val_paths[0], t, open_label))
    if t is not None and val_top is not None:
        label = f"threshold {t:.6g}" + (" (in-sample: tuned on these queries)" if args.tune else "")
        expected[label] = float(map_for_thresholds(val_top, [t])[0])
        if args.tune_new_share is not None:
            expected[label + f", {open_label} weighted to {args.tune_new_share:g}"] = float(
                map_for_thresholds(val_top, [t], args.tune_new_share)[0])

    if t is not None and threshold_predictions is None:
        threshold_predictions = predict_from_top(test_top, t)  # the test matrix's per-id reduction, done once
    method = "threshold"
    if args.calibrate:
        cv = cross_validate(val_top, n_splits=args.cv_folds, seed=args.seed)
        log(f"{len(cv.folds)}-fold cross-validated validation MAP@5 (fitted on the other folds):")
        log("  fold  tuned-threshold  calibrated")
        for i, (a, b) in enumerate(cv.fold_maps):
            log(f"  {i:>4}  {a:15.5f}  {b:10.5f}   (t = {cv.thresholds[i]:.6g})")
        log(f"  all   {cv.threshold_map:15.5f}  {cv.calibrated_map:10.5f}")
        log(f"cross-validated MAP@5: tuned threshold {cv.threshold_map:.5f} | calibrated {cv.calibrated_map:.5f}")
        calibrated = Calibrator().fit(val_top).predict(test_top)
        expected["calibrated (cross-validated)"] = cv.calibrated_map
        expected["tuned threshold (cross-validated)"] = cv.threshold_map
        method, why = _choose_rule(t is not None, args.force_calibrated, cv)
        log(f"submission written by the {method} rule: {why}")
        predictions = calibrated if method == "calibrated" else threshold_predictions
    else:
        predictions = threshold_predictions

    sample = args.sample if args.sample is not None else recorded_sample(runs)
    if sample is not None and args.sample is None:
        log(f"row order from {sample} (data folder recorded in run.json)")
    write_submission(out, test.query.tolist(), predictions, sample=sample, columns=fmt.submission_columns)
    problems = check_submission(out, sample, fmt.submission_columns)
    if problems:
        raise DataError(f"{out}: the written submission fails its check: " + "; ".join(problems[:10]))

    shares = new_whale_shares(predictions, open_label)
    log("summary:")
    log(f"  runs: {len(runs)}  weights: {', '.join(f'{w:.4f}' for w in weights)}")
    log(f"  fused by: {fusion_name}: " + (fusion.describe() if fusion is not None else
                                          f"weighted average of the raw scores ({why_fusion})"))
    if method == "calibrated":
        log(f"  {open_label}: calibrated expected-MAP@5 insertion"
            + (f" (threshold {t:.6g} not used: {why})" if t is not None else ""))
    else:
        log(f"  {open_label}: threshold {t:.6g} ({how}); "
            f"test share with best id < t: {share_first(test_top, [t])[0]:.4f}")
    log(f"  {open_label} share at rank 1..5 on test: {_fmt_shares(shares)} (any: {shares.sum():.3f})")
    _share_sanity(shares[0], log, open_label)
    if expected:
        for k, v in expected.items():
            log(f"  expected MAP@5 from validation, {k}: {v:.5f}")
    else:
        log("  expected MAP@5 from validation: unknown (no validation scores)")
    log(f"  wrote {out} ({len(predictions)} rows, checked"
        + (f" against {sample})" if sample is not None else ")"))
    return 0
