"""The ensemble's last step: the submission written and checked, ``--tune``'s files beside it, the summary.

:func:`report` writes what a :class:`whale.ensemble.decide.Decision` says: with ``--tune`` the threshold's files
beside the submission (MAP@5 per threshold as CSV and as a plot, the threshold itself as ``NAME.threshold.json``,
:mod:`whale.ranking.stored`, and a calibrated fusion's ``NAME.calibration.json``), ``--calibrate``'s
cross-validation table, the submission (checked against the sample), then the summary lines: the runs, the fusion,
the rule, the implied test share of ``new_whale`` (a warning outside :data:`SANE_SHARE`) and the expected MAP@5.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.core.files import atomic_write
from whale.ensemble.combined import Combined
from whale.ensemble.decide import Decision
from whale.ensemble.fusion import write_fusion
from whale.ensemble.rule import Rule, recorded_sample
from whale.formats import DEFAULT
from whale.ranking.newwhale import new_whale_shares, share_first
from whale.ranking.stored import write_threshold

SANE_SHARE = (0.10, 0.60)
"""Test shares of ``new_whale`` at rank 1 outside this range draw a warning."""
KAGGLE_SHARE = 0.28
"""About the share of ``new_whale`` images in the competition's test set."""


def report(rule: Rule, combined: Combined, decision: Decision, log=print, written: list[Path] | None = None) -> None:
    """Write the files of ``decision`` and log the summary; every file written is appended to ``written`` (the
    caller removes them if a later one fails: no threshold file speaks for a submission that is not there).

    Raises:
        DataError: the written submission fails its check.
    """
    from whale.submission import check_submission, write_submission

    written = [] if written is None else written
    if decision.tuned is not None:
        _write_tuned(rule, combined, decision, log, written)
    if decision.cv is not None:
        _log_cross_validation(decision, log)
    out, fmt = rule.out, rule.fmt
    sample = rule.sample if rule.sample is not None else recorded_sample(rule.runs)
    if sample is not None and rule.sample is None:
        log(f"row order from {sample} (data folder recorded in run.json)")
    write_submission(out, combined.query, decision.predictions, sample=sample, columns=fmt.submission_columns)
    problems = check_submission(out, sample, fmt.submission_columns)
    if problems:
        raise DataError(f"{out}: the written submission fails its check: " + "; ".join(problems[:10]))
    for line in summary(rule, combined, decision):
        log(line)
    log(f"  wrote {out} ({len(decision.predictions)} rows, checked"
        + (f" against {sample})" if sample is not None else ")"))


def summary(rule: Rule, combined: Combined, decision: Decision) -> list[str]:
    """The summary's lines: runs and weights, the fusion, the rule, the test shares of ``new_whale``, the
    expected MAP@5."""
    label, t, fusion = rule.fmt.open_label, decision.threshold, combined.fusion
    shares = new_whale_shares(decision.predictions, label)
    lines = ["summary:", f"  runs: {len(rule.runs)}  weights: {', '.join(f'{w:.4f}' for w in combined.weights)}",
             f"  fused by: {rule.fusion}: " + (fusion.describe() if fusion is not None else
                                               f"weighted average of the raw scores ({rule.why_fusion})")]
    if decision.method == "calibrated":
        lines.append(f"  {label}: calibrated expected-MAP@5 insertion"
                     + (f" (threshold {t:.6g} not used: {decision.why})" if t is not None else ""))
    else:
        lines.append(f"  {label}: threshold {t:.6g} ({decision.how}); "
                     f"test share with best id < t: {share_first(combined.test_top, [t])[0]:.4f}")
    lines.append(f"  {label} share at rank 1..5 on test: {_fmt_shares(shares)} (any: {shares.sum():.3f})")
    _share_sanity(shares[0], lines.append, label)
    if decision.expected:
        lines += [f"  expected MAP@5 from validation, {k}: {v:.5f}" for k, v in decision.expected.items()]
    else:
        lines.append("  expected MAP@5 from validation: unknown (no validation scores)")
    return lines


def _write_tuned(rule: Rule, combined: Combined, decision: Decision, log, written: list[Path]) -> None:
    """``--tune``'s files beside the submission, and its lines."""
    t, tuned, label, fusion = decision.threshold, decision.tuned, rule.fmt.open_label, combined.fusion
    csv_path = write_threshold_csv(rule.beside_out(".threshold.csv"), tuned.grid, tuned.maps)
    written.append(csv_path)
    png_path = plot_thresholds(rule.beside_out(".threshold.png"), tuned.grid, tuned.maps, t,
                               share_first(combined.val_top, tuned.grid), share_first(combined.test_top, tuned.grid))
    written.append(png_path)
    stored = write_threshold(rule.beside_out(".threshold.json"), t, map5=tuned.best_map, open_label=label,
                             tuned_on="validation scores of " + ", ".join(map(str, rule.runs)), rule=decision.how,
                             scale="score" if fusion is None else "probability")
    written.append(stored)
    if fusion is not None:
        written.append(write_fusion(rule.beside_out(".calibration.json"), fusion))
        log(f"the runs' calibrations and fusion rule -> {written[-1]}")
    grid = tuned.grid
    log(f"threshold grid ({grid.size} values, {grid.min():g}..{grid.max():g}) -> {csv_path}, {png_path}; "
        f"tuned threshold -> {stored}")
    log(f"tuned threshold {t:.6g}: validation MAP@5 {tuned.best_map:.5f} (in-sample); "
        f"test share of {label} at rank 1: {share_first(combined.test_top, [t])[0]:.4f}")
    if fusion is not None:
        log(f"  the threshold is a probability: {label} goes before every id whose fused P(same whale) "
            f"is below {t:.4g}")
    elif len(rule.runs) == 1:
        log("  " + threshold_probability(rule.runs[0], rule.val_paths[0], t, label))


def _log_cross_validation(decision: Decision, log) -> None:
    cv = decision.cv
    log(f"{len(cv.folds)}-fold cross-validated validation MAP@5 (fitted on the other folds):")
    log("  fold  tuned-threshold  calibrated")
    for i, (a, b) in enumerate(cv.fold_maps):
        log(f"  {i:>4}  {a:15.5f}  {b:10.5f}   (t = {cv.thresholds[i]:.6g})")
    log(f"  all   {cv.threshold_map:15.5f}  {cv.calibrated_map:10.5f}")
    log(f"cross-validated MAP@5: tuned threshold {cv.threshold_map:.5f} | calibrated {cv.calibrated_map:.5f}")
    log(f"submission written by the {decision.method} rule: {decision.why}")


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


def _fmt_shares(shares: Sequence[float]) -> str:
    return "  ".join(f"r{i + 1} {s:.3f}" for i, s in enumerate(shares))


def _share_sanity(share: float, log, label: str = DEFAULT.open_label) -> None:
    """Print the implied test share of the open-set ``label`` at rank 1; warn outside :data:`SANE_SHARE`."""
    lo, hi = SANE_SHARE
    log(f"  implied test share of {label} at rank 1: {share:.4f} (the 2019 competition's test set: ~{KAGGLE_SHARE})")
    if not lo <= share <= hi:
        log(f"warning: {share:.1%} of test images get {label} first, outside [{lo:.2f}, {hi:.2f}]; the "
            f"competition's share is ~{KAGGLE_SHARE}: a threshold this far off usually means short runs, "
            "few validation queries, or a validation set unlike the test set "
            "(consider --new-whale-fraction 0.28)")


def write_threshold_csv(path, grid, maps) -> Path:
    """``threshold,map5`` rows, written atomically."""
    path = Path(path)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write("threshold,map5\n")
            for t, m in zip(grid, maps):
                f.write(f"{float(t)!r},{float(m)!r}\n")

    atomic_write(path, write)
    return path


def plot_thresholds(path, grid, maps, chosen_t, val_share, test_share) -> Path:
    """PNG with two panels: validation MAP@5 vs threshold (chosen one marked), and the share of
    ``new_whale`` at rank 1 on validation and test. Written atomically with the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    grid = np.asarray(grid)
    i = int(np.argmin(np.abs(grid - chosen_t)))
    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    a.plot(grid, maps, lw=1.2)
    a.axvline(chosen_t, color="r", ls="--", lw=1)
    a.plot([grid[i]], [maps[i]], "ro", label=f"t = {chosen_t:.5g}, MAP@5 = {maps[i]:.4f}")
    a.set_ylabel("validation MAP@5")
    a.legend(loc="lower left")
    a.grid(alpha=0.3)
    b.plot(grid, val_share, label="validation")
    b.plot(grid, test_share, label="test")
    b.axvline(chosen_t, color="r", ls="--", lw=1)
    b.set_xlabel("threshold t")
    b.set_ylabel("share with new_whale at rank 1")
    b.legend(loc="upper left")
    b.grid(alpha=0.3)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path
