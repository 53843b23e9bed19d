"""The ensemble's second step: the runs' score files combined, fused or averaged, down to each query's best ids.

:func:`combine_runs` follows a :class:`whale.ensemble.rule.Rule`: the weights (given, or tuned on validation,
:mod:`whale.ensemble.weights`), the runs calibrated when the fusion is (:mod:`whale.ensemble.fusion`), the test files
combined (:mod:`whale.ensemble.combine`) and reduced to their best ids, and the validation files likewise when every
run has one (required by ``--tune`` and ``--calibrate``). The inputs' identities are printed and bad mixes refused
(:mod:`whale.ensemble.identity`). What comes out (:class:`Combined`) is all that deciding and reporting need: no
score matrix is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.ensemble.combine import average_score_files, validation_groups
from whale.ensemble.fusion import Fusion, calibrate_runs
from whale.ensemble.identity import check_inputs, check_no_leak, check_same_queries, identity_table, read_identities
from whale.ensemble.rule import Rule
from whale.formats import DEFAULT
from whale.inference.scorefile import first_names
from whale.ranking.topids import TopIds, concat_top_ids, top_ids


@dataclass(frozen=True)
class Combined:
    """The runs combined.

    Attributes:
        weights: ``[n_runs]`` float64 summing to 1, as used (``--tune-weights``: the validation-best).
        fusion: the calibrated runs and their rule, or None (``scores``: the weighted average of raw scores).
        query: ``[n_test]`` str the test images, in the first test file's order (the submission's rows).
        test_top: the test queries' best ids.
        val_top: the validation queries' best ids (folds concatenated), or None (not every run has validation).
    """

    weights: np.ndarray
    fusion: Fusion | None
    query: Sequence[str]
    test_top: TopIds
    val_top: TopIds | None


def combine_runs(rule: Rule, log=print) -> Combined:
    """Combine the runs of ``rule`` (see the module docstring); progress and the inputs' identities to ``log``.

    Raises:
        DataError: a missing or malformed score file (validation ones with ``--tune``, ``--calibrate``,
            ``--tune-weights`` or a calibrated fusion), files that do not match, or validation leaking into
            training.
    """
    runs, val_paths, open_label = list(rule.runs), rule.val_paths, rule.fmt.open_label
    check_open_share(rule)
    weights = tuned_weights(rule, log) if rule.tune_weights else rule.weights
    fusion, fused = None, {}
    if rule.fusion != "scores":
        log(f"runs calibrated on their validation scores ({rule.calibration}), fused by {rule.fusion} "
            f"({rule.why_fusion}):")
        fusion = calibrate_runs(runs, val_paths, rule.fusion, open_label, rule.calibration, log=log,
                                models=rule.models)
        fused = fusion.maps()

    shared = rule.models is not None and len(set(rule.models)) < len(rule.models)
    log("runs and weights:" if not shared else "runs and weights (the runs of one model, its folds, share its weight):")
    for run, w in zip(runs, weights):
        log(f"  {w:.4f}  {run}")
    test_paths = rule.test_paths
    test_ids = read_identities(test_paths)
    log("test score files:")
    for line in identity_table(test_paths, test_ids):
        log("  " + line)
    check_inputs(test_paths, test_ids, log=log)
    log("test scores:" if fusion is None else "test probabilities:")
    test = average_score_files(test_paths, weights, log=log, **fused)
    if rule.fmt != DEFAULT:
        log(f"format: {rule.fmt.name} (open-set label {open_label}, submission columns "
            f"{','.join(rule.fmt.submission_columns)})")
    test_top = top_ids(test, open_label=open_label)
    log(f"  {test.n_query} test images x {len(test.gallery)} gallery images")
    query = test.query.tolist()
    del test  # only the names and the top ids are needed from here on
    return Combined(weights, fusion, query, test_top, _validation_top(rule, weights, fused, log))


def check_open_share(rule: Rule) -> None:
    """``--tune-new-share`` weighs the validation queries of the open-set label against the known ones: refuse
    validation files whose queries (pooled over the runs' files) are all of one kind, before any work.

    Raises:
        DataError: naming the files, the flag and what they hold (a ``train.csv`` without ``new_whale`` rows, e.g.
            after a cleaning, gives folds without open-set queries).
    """
    if rule.tune_new_share is None:
        return
    from whale.inference.scorefile import read_header

    paths = [p for p in rule.val_paths if p.is_file()]  # a missing one is named by --tune / --tune-weights' check
    truth = {}
    for path in paths:
        header = read_header(path, need_query_ids=True)
        truth.update(zip(header["query"].tolist(), header["query_ids"].tolist()))
    if not truth:
        return
    label = rule.fmt.open_label
    n_open = sum(t == label for t in truth.values())
    if n_open in (0, len(truth)):
        kind = f"no {label} query" if n_open == 0 else f"only {label} queries"
        raise DataError(f"--tune-new-share {rule.tune_new_share:g}: the validation queries of "
                        f"{first_names([str(p) for p in paths])} hold {kind} ({n_open} of {len(truth)}), so they "
                        f"cannot be weighted to a share of {label}; leave --tune-new-share out (or validate on a fold "
                        f"that has both kinds)")


def _validation_top(rule: Rule, weights: np.ndarray, fused: dict, log) -> TopIds | None:
    """The validation files combined as the test files were, reduced to their best ids (None: not every run has
    one, and neither ``--tune`` nor ``--calibrate`` needs them)."""
    val_paths, open_label = rule.val_paths, rule.fmt.open_label
    have_val = [p.is_file() for p in val_paths]
    if rule.tune or rule.calibrate:
        missing = [str(p) for p, h in zip(val_paths, have_val) if not h]
        if missing:
            raise DataError(f"--tune/--calibrate need every run's validation scores; missing: {first_names(missing)}")
    if not all(have_val):
        log("validation scores: not every run has scores/val.npz; no validation estimate")
        return None
    val_ids = read_identities(val_paths)
    log("validation score files:")
    for line in identity_table(val_paths, val_ids):
        log("  " + line)
    check_inputs(val_paths, val_ids, log=log)
    check_no_leak(val_paths)
    log("validation scores (averaged within equal query sets, concatenated across disjoint ones):")
    groups = validation_groups(val_paths, weights, log=log, models=rule.models, **fused)
    val_top = concat_top_ids([top_ids(g, open_label=open_label) for g in groups])
    log(f"  {val_top.n_query} validation queries, "
        f"{float((val_top.truth == open_label).mean()):.3f} of them {open_label}")
    return val_top


def tuned_weights(rule: Rule, log=print) -> np.ndarray:
    """``--tune-weights``: the runs' weights of best validation MAP@5 (:mod:`whale.ensemble.weights`).

    Raises:
        DataError: a run without validation scores (naming it), or validation files that do not match.
    """
    from whale.ensemble.weights import format_weights, tune_weights

    val_paths: list[Path] = rule.val_paths
    missing = [str(p) for p in val_paths if not p.is_file()]
    if missing:
        raise DataError(f"--tune-weights needs every run's validation scores; missing: {first_names(missing)}")
    identities = read_identities(val_paths)
    check_inputs(val_paths, identities, log=log)
    check_no_leak(val_paths)
    check_same_queries(val_paths, identities)
    step = 0.1 if rule.weight_step is None else rule.weight_step
    grid = f"grid step {step:g}" if rule.weight_grid == "linear" else "log grid, ratios 2^-17..2^6 to the first run"
    log(f"weights tuned on validation ({grid}, threshold tuned at each):")
    weights, best, _ = tune_weights(val_paths, rule.fmt.open_label, step, log=lambda m: log(m),
                                    open_share=rule.tune_new_share, grid=rule.weight_grid)
    log(f"tuned weights {format_weights(weights)}: validation MAP@5 {best:.5f} (in-sample)")
    return weights
