"""Run weights chosen on validation: every point of a grid, the best validation MAP@5.

Two grids: ``linear`` (:func:`simplex_grid`, steps of ``step`` summing to 1) and ``log`` (:func:`log_grid`:
the first run's weight 1, every other run's 0 or a ratio on a factor-2 ladder from 2^-17 to 2^6, then
normalised). The runs' validation files are read once (:class:`whale.ensemble.combine.HeldValidation`: one
matrix per run in memory); for each candidate weight vector they are combined as
:func:`whale.ensemble.combine.validation_groups` does and the ``new_whale`` threshold is
tuned on them (:func:`whale.ranking.newwhale.tune`); the weights of the best tuned MAP@5 win (ties:
the first in grid order, i.e. the most weight on the earlier runs). Both the weights and the threshold
are then in-sample on these validation queries, which the ensemble says when it prints the estimate.

Scores of different kinds (a trained head's probabilities, the keypoint matcher's evidence) live on
different scales: this search is what puts them on one. The log grid reaches the weights a linear step
cannot: the keypoint matcher scores a candidate without geometrically verified matches by its votes alone
(about 1e-4), so a network can only reorder those candidates, and leave the verified ones first, at a weight
near 1e-4 of the matcher's (docs/humpback.md, "Fusion on a log grid").
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale.ensemble.combine import HeldValidation
from whale.core.errors import ConfigError
from whale.ranking.newwhale import tune
from whale.ranking.topids import concat_top_ids, top_ids

LOG_RATIOS = 2.0 ** np.arange(-17, 7)
"""The log grid's weights of a run relative to the first run's: 2^-17 (7.6e-6) to 2^6 (64), a factor 2 apart."""
GRIDS = ("linear", "log")
MAX_POINTS = 5000


def simplex_grid(n_runs: int, step: float) -> np.ndarray:
    """``[m, n_runs]`` float64: every weight vector with entries in multiples of ``step`` summing to 1.

    Raises:
        ConfigError: ``step`` not in (0, 1] or not dividing 1, or more points than is sensible (> 5,000).
    """
    if not 0 < step <= 1 or abs(round(1 / step) - 1 / step) > 1e-6:
        raise ConfigError(f"--weight-step must divide 1 (e.g. 0.1, 0.05, 0.25), got {step}")
    n = int(round(1 / step))
    points = [c for c in itertools.product(range(n + 1), repeat=n_runs) if sum(c) == n] if n_runs > 1 else [(n,)]
    if len(points) > MAX_POINTS:
        raise ConfigError(f"--tune-weights: {len(points)} weight vectors for {n_runs} runs at step {step}; "
                          "use a larger --weight-step")
    return np.asarray(sorted(points, reverse=True), dtype=np.float64) / n


def log_grid(n_runs: int) -> np.ndarray:
    """``[m, n_runs]`` float64: the first run's weight 1 and every other run's 0 or one of :data:`LOG_RATIOS`,
    each vector normalised to sum 1; in grid order the later runs' weights grow (the first point is the first
    run alone).

    Raises:
        ConfigError: more points than is sensible (> 5,000: four runs or more).
    """
    values = np.concatenate([[0.0], LOG_RATIOS])
    m = len(values) ** (n_runs - 1)
    if m > MAX_POINTS:
        raise ConfigError(f"--tune-weights: {m} weight vectors for {n_runs} runs on the log grid; "
                          "at most 3 runs (or --weight-grid linear)")
    points = np.asarray([(1.0, *c) for c in itertools.product(values, repeat=n_runs - 1)], dtype=np.float64)
    return points / points.sum(axis=1, keepdims=True)


def weight_grid(n_runs: int, grid: str = "linear", step: float = 0.1) -> np.ndarray:
    """The candidate weights of ``grid``: :func:`simplex_grid` at ``step`` or :func:`log_grid`."""
    if grid not in GRIDS:
        raise ConfigError(f"--weight-grid must be one of {', '.join(GRIDS)}, got {grid!r}")
    return simplex_grid(n_runs, step) if grid == "linear" else log_grid(n_runs)


def tune_weights(val_paths: Sequence[Path], open_label: str, step: float = 0.1, log=None,
                 open_share: float | None = None, grid: str = "linear",
                 ) -> tuple[np.ndarray, float, list[tuple[np.ndarray, float, float]]]:
    """The validation-best weights of the runs whose validation files are ``val_paths`` on ``grid``
    (:func:`weight_grid`; ``step``: the linear grid's; ``open_share``: the threshold tuned with the open-set
    queries weighted to it, :func:`whale.ranking.newwhale.open_share_weights`).

    Returns:
        ``(weights [n_runs], best MAP@5, table)``, ``table`` a ``(weights, MAP@5, threshold)`` per grid point.
    """
    points = weight_grid(len(val_paths), grid, step)
    held = HeldValidation.read(val_paths)  # read once: each grid point combines in memory
    table = []
    for w in points:
        groups = held.groups(w)
        top = concat_top_ids([top_ids(g, open_label=open_label) for g in groups])
        t, best, _, _ = tune(top, open_share=open_share)
        table.append((w, float(best), float(t)))
        if log:
            log(f"  weights {format_weights(w)}: validation MAP@5 {best:.5f} (threshold {t:.4g})")
    i = int(np.argmax([m for _, m, _ in table]))
    return table[i][0], table[i][1], table


def format_weights(w) -> str:
    """``"1.00, 0.00"``; weights under 0.01 (the log grid's) with three significant digits: ``"1.00, 0.000381"``."""
    return ", ".join(f"{x:.2f}" if x == 0 or x >= 0.01 else f"{x:.3g}" for x in w)
