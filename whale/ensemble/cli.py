"""``ensemble.py``: runs' score files -> weighted average -> ``new_whale`` placed -> checked submission.

The paper's threshold rule is the default (fixed ``--threshold``, ``--tune`` on validation
MAP@5, or ``--new-whale-fraction`` of the test set); ``--calibrate`` switches the submission
to the calibrated rule of :mod:`whale.ranking.calibrate` and prints both rules'
cross-validated MAP@5. Averaging is :mod:`whale.ensemble.combine`, the rules are
:mod:`whale.ranking`, the file format :mod:`whale.inference.scorefile`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale import NEW_WHALE
from whale.ensemble.combine import average_score_files, normalise_weights, validation_groups
from whale.ensemble.report import plot_thresholds, write_threshold_csv
from whale.errors import ConfigError, DataError
from whale.inference.scorefile import _first, score_path
from whale.ranking.calibrate import Calibrator, cross_validate
from whale.ranking.newwhale import (map_for_thresholds, new_whale_share, new_whale_shares, predict_top5,
                                    share_first, threshold_for_fraction, tune)
from whale.ranking.topids import concat_top_ids, top_ids


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``ensemble.py``."""
    p = argparse.ArgumentParser(
        prog="ensemble.py",
        description="Weighted average of runs' score files -> new_whale insertion -> submission CSV.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="run folders with scores/test.npz (and scores/val.npz for --tune/--calibrate)")
    p.add_argument("--weights", nargs="+", type=float, default=None, metavar="W",
                   help="one weight per run (normalised to sum 1); default equal")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=float, default=None, metavar="T",
                      help="new_whale at the first rank whose probability is < T (paper, Table 2)")
    mode.add_argument("--new-whale-fraction", type=float, default=None, metavar="F",
                      help="choose T so a share F of test images get new_whale at rank 1 (~0.276 on Kaggle)")
    mode.add_argument("--tune", action="store_true",
                      help="choose T by validation MAP@5 over a fine grid; writes NAME.threshold.{csv,png}")
    p.add_argument("--calibrate", action="store_true",
                   help="place new_whale by expected MAP@5 from probabilities calibrated on validation; "
                        "prints its cross-validated MAP@5 beside the tuned threshold's")
    p.add_argument("--cv-folds", type=int, default=5, help="folds for the cross-validation of --calibrate")
    p.add_argument("--seed", type=int, default=0, help="seed of the cross-validation split")
    p.add_argument("--out", required=True, type=Path, help="submission CSV, e.g. submissions/NAME.csv")
    p.add_argument("--sample", type=Path, default=None,
                   help="sample_submission.csv giving the row order (default: the one in the data "
                        "folder recorded in the first run's run.json, if any; else the npz query order)")
    return p


def recorded_sample(run_dirs: Sequence[Path]) -> Path | None:
    """``sample_submission.csv`` of the data folder recorded in a run's ``run.json``, if it exists."""
    for run in run_dirs:
        meta = Path(run) / "run.json"
        if not meta.is_file():
            continue
        try:
            data = json.loads(meta.read_text()).get("data")
        except (OSError, ValueError):
            continue
        if data:
            sample = Path(data) / "sample_submission.csv"
            if sample.is_file():
                return sample
    return None


def _sibling(out: Path, suffix: str) -> Path:
    name = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(name + suffix)


def _fmt_shares(shares: np.ndarray) -> str:
    return "  ".join(f"r{i + 1} {s:.3f}" for i, s in enumerate(shares))


def main(argv: Sequence[str] | None = None, log=print) -> int:
    """Run ``ensemble.py``; returns 0. Raises :class:`whale.errors.WhaleError` on bad input."""
    from whale.submission import check_submission, write_submission

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threshold is None and args.new_whale_fraction is None and not args.tune and not args.calibrate:
        parser.error("one of --threshold, --new-whale-fraction, --tune (or --calibrate) is required")
    if args.new_whale_fraction is not None and not 0.0 <= args.new_whale_fraction <= 1.0:
        raise ConfigError(f"--new-whale-fraction must be in [0, 1], got {args.new_whale_fraction}")
    if args.threshold is not None and not np.isfinite(args.threshold):
        raise ConfigError(f"--threshold must be a number, got {args.threshold}")
    runs = list(args.runs)
    weights = normalise_weights(args.weights, len(runs))

    log("runs and weights:")
    for run, w in zip(runs, weights):
        log(f"  {w:.4f}  {run}")
    log("test scores:")
    test = average_score_files([score_path(r, "test") for r in runs], weights, log=log)
    test_top = top_ids(test)
    log(f"  {test.n_query} test images x {len(test.gallery)} gallery images")

    val_paths = [score_path(r, "val") for r in runs]
    have_val = [p.is_file() for p in val_paths]
    val_top = None
    if args.tune or args.calibrate:
        missing = [str(p) for p, h in zip(val_paths, have_val) if not h]
        if missing:
            raise DataError(f"--tune/--calibrate need every run's validation scores; missing: {_first(missing)}")
    if all(have_val):
        log("validation scores (averaged within equal query sets, concatenated across disjoint ones):")
        groups = validation_groups(val_paths, weights, log=log)
        val_top = concat_top_ids([top_ids(g) for g in groups])
        del groups  # only the top ids are needed from here on
        log(f"  {val_top.n_query} validation queries, "
            f"{float((val_top.truth == NEW_WHALE).mean()):.3f} of them new_whale")
    else:
        log("validation scores: not every run has scores/val.npz; no validation estimate")

    out = Path(args.out)
    t = None
    expected = {}
    if args.threshold is not None:
        t, how = float(args.threshold), "given"
    elif args.new_whale_fraction is not None:
        t = threshold_for_fraction(np.nan_to_num(test_top.scores[:, 0], nan=-np.inf), args.new_whale_fraction)
        how = f"share {args.new_whale_fraction:g} of test images get new_whale at rank 1"
    elif args.tune:
        t, best_map, grid, maps = tune(val_top)
        how = "tuned on validation MAP@5"
        csv_path = write_threshold_csv(_sibling(out, ".threshold.csv"), grid, maps)
        png_path = plot_thresholds(_sibling(out, ".threshold.png"), grid, maps, t,
                                   share_first(val_top, grid), share_first(test_top, grid))
        log(f"threshold grid ({grid.size} values, {grid.min():g}..{grid.max():g}) -> {csv_path}, {png_path}")
        log(f"tuned threshold {t:.6g}: validation MAP@5 {best_map:.5f} (in-sample); "
            f"test share of new_whale at rank 1: {share_first(test_top, [t])[0]:.4f}")
    if t is not None and val_top is not None:
        label = f"threshold {t:.6g}" + (" (in-sample: tuned on these queries)" if args.tune else "")
        expected[label] = float(map_for_thresholds(val_top, [t])[0])

    method = "threshold"
    if args.calibrate:
        cv = cross_validate(val_top, n_splits=args.cv_folds, seed=args.seed)
        log(f"{len(cv.folds)}-fold cross-validated validation MAP@5 (fitted on the other folds):")
        log("  fold  tuned-threshold  calibrated")
        for i, (a, b) in enumerate(cv.fold_maps):
            log(f"  {i:>4}  {a:15.5f}  {b:10.5f}   (t = {cv.thresholds[i]:.6g})")
        log(f"  all   {cv.threshold_map:15.5f}  {cv.calibrated_map:10.5f}")
        log(f"cross-validated MAP@5: tuned threshold {cv.threshold_map:.5f} | calibrated {cv.calibrated_map:.5f}")
        predictions = Calibrator().fit(val_top).predict(test_top)
        method = "calibrated"
        expected["calibrated (cross-validated)"] = cv.calibrated_map
        expected["tuned threshold (cross-validated)"] = cv.threshold_map
    else:
        predictions = predict_top5(test.scores, test.gallery_ids, t)

    sample = args.sample if args.sample is not None else recorded_sample(runs)
    if sample is not None and args.sample is None:
        log(f"row order from {sample} (data folder recorded in run.json)")
    write_submission(out, test.query.tolist(), predictions, sample=sample)
    problems = check_submission(out, sample)
    if problems:
        raise DataError(f"{out}: the written submission fails its check: " + "; ".join(problems[:10]))

    shares = new_whale_shares(predictions)
    log("summary:")
    log(f"  runs: {len(runs)}  weights: {', '.join(f'{w:.4f}' for w in weights)}")
    if method == "calibrated":
        log("  new_whale: calibrated expected-MAP@5 insertion"
            + (f" (threshold {t:.6g} reported only)" if t is not None else ""))
    else:
        log(f"  new_whale: threshold {t:.6g} ({how}); "
            f"test share with best id < t: {new_whale_share(np.nan_to_num(test_top.scores[:, 0], nan=-np.inf), t):.4f}")
    log(f"  new_whale share at rank 1..5 on test: {_fmt_shares(shares)} (any: {shares.sum():.3f})")
    if expected:
        for k, v in expected.items():
            log(f"  expected MAP@5 from validation, {k}: {v:.5f}")
    else:
        log("  expected MAP@5 from validation: unknown (no validation scores)")
    log(f"  wrote {out} ({len(predictions)} rows, checked"
        + (f" against {sample})" if sample is not None else ")"))
    return 0
