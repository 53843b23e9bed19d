"""The ensemble's third step: where ``new_whale`` goes in the combined runs' rankings, decided without writing.

:func:`decide` follows the threshold mode of a :class:`whale.ensemble.rule.Rule` on the best ids of a
:class:`whale.ensemble.combined.Combined`: a given threshold (a number, or one an earlier ``--tune`` stored), a share
of the test set (:func:`whale.ranking.newwhale.predict_for_fraction`) or one tuned on validation MAP@5
(:func:`whale.ranking.newwhale.tune`); the threshold's validation MAP@5 is the expected score. ``--calibrate``
cross-validates the calibrated rule of :mod:`whale.ranking.calibrate` against the tuned threshold and picks the one
that writes the submission (:func:`choose_rule`). A new rule for ``new_whale`` is a branch here and a line of the
summary (:mod:`whale.ensemble.report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from whale.ensemble.combined import Combined
from whale.ensemble.rule import Rule
from whale.ranking.calibrate import Calibrator, CrossValidation, cross_validate
from whale.ranking.newwhale import at_threshold, predict_for_fraction, tune


@dataclass(frozen=True)
class Tuned:
    """``--tune``'s search: the best validation MAP@5 and the grid it was found on (``[g]`` float64 each)."""

    best_map: float
    grid: np.ndarray
    maps: np.ndarray


@dataclass(frozen=True)
class Decision:
    """Where ``new_whale`` goes.

    Attributes:
        predictions: five labels (at most) per test query, in :attr:`Combined.query`'s order.
        method: ``threshold`` or ``calibrated``: the rule that made ``predictions``.
        threshold: the threshold of the threshold mode, or None (``--calibrate`` alone).
        how: how the threshold was chosen (a phrase for the summary), or None.
        why: with ``--calibrate``, why ``method`` writes the submission.
        expected: validation MAP@5 per rule (a label for the summary -> the figure); empty without validation.
        tuned: ``--tune``'s search, or None.
        cv: ``--calibrate``'s cross-validation, or None.
    """

    predictions: list[list[str]]
    method: str = "threshold"
    threshold: float | None = None
    how: str | None = None
    why: str | None = None
    expected: dict[str, float] = field(default_factory=dict)
    tuned: Tuned | None = None
    cv: CrossValidation | None = None


def decide(rule: Rule, combined: Combined) -> Decision:
    """The :class:`Decision` of ``rule``'s threshold mode (and ``--calibrate``) on ``combined``'s best ids.

    Raises:
        DataError: validation MAP@5 without the true ids, or no validation queries to tune on.
    """
    test_top, val_top = combined.test_top, combined.val_top
    t, how, predictions, tuned = None, None, None, None
    if rule.threshold is not None:
        t, how = float(rule.threshold), "given"
    elif rule.new_whale_fraction is not None:
        predictions, t = predict_for_fraction(test_top, rule.new_whale_fraction)
        how = (f"new_whale first for exactly round({rule.new_whale_fraction:g} x {test_top.n_query}) test "
               "images, lowest best-id score first, ties broken by query order")
    elif rule.tune:
        t, best_map, grid, maps = tune(val_top, open_share=rule.tune_new_share)
        tuned = Tuned(best_map, grid, maps)
        how = "tuned on validation MAP@5" + ("" if combined.fusion is None else
                                             f" of the runs' {combined.fusion.rule}-fused probabilities")
    expected = {}
    if t is not None:
        placed, maps = at_threshold(t, test_top if predictions is None else None, val_top, rule.tune_new_share)
        predictions = placed if predictions is None else predictions
        label = f"threshold {t:.6g}" + (" (in-sample: tuned on these queries)" if rule.tune else "")
        labels = [label] if rule.tune_new_share is None else [
            label, label + f", {rule.fmt.open_label} weighted to {rule.tune_new_share:g}"]
        expected.update(zip(labels, maps))
    if not rule.calibrate:
        return Decision(predictions, "threshold", t, how, None, expected, tuned)
    cv = cross_validate(val_top, n_splits=rule.cv_folds, seed=rule.seed)
    calibrated = Calibrator().fit(val_top).predict(test_top)
    expected["calibrated (cross-validated)"] = cv.calibrated_map
    expected["tuned threshold (cross-validated)"] = cv.threshold_map
    method, why = choose_rule(t is not None, rule.force_calibrated, cv)
    return Decision(calibrated if method == "calibrated" else predictions, method, t, how, why, expected, tuned, cv)


def choose_rule(have_threshold: bool, force: bool, cv: CrossValidation) -> tuple[str, str]:
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
