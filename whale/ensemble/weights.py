"""Run weights chosen on validation: every point of a grid on the simplex, the best validation MAP@5.

For each candidate weight vector (steps of ``step``, summing to 1), the runs' validation files are
combined as :func:`whale.ensemble.combine.validation_groups` does and the ``new_whale`` threshold is
tuned on them (:func:`whale.ranking.newwhale.tune`); the weights of the best tuned MAP@5 win (ties:
the first in grid order, i.e. the most weight on the earlier runs). Both the weights and the threshold
are then in-sample on these validation queries, which the ensemble says when it prints the estimate.

Scores of different kinds (a trained head's probabilities, the keypoint matcher's evidence) live on
different scales: this search is what puts them on one.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale.ensemble.combine import validation_groups
from whale.core.errors import ConfigError
from whale.ranking.newwhale import tune
from whale.ranking.topids import concat_top_ids, top_ids


def simplex_grid(n_runs: int, step: float) -> np.ndarray:
    """``[m, n_runs]`` float64: every weight vector with entries in multiples of ``step`` summing to 1.

    Raises:
        ConfigError: ``step`` not in (0, 1] or not dividing 1, or more points than is sensible (> 5,000).
    """
    if not 0 < step <= 1 or abs(round(1 / step) - 1 / step) > 1e-6:
        raise ConfigError(f"--weight-step must divide 1 (e.g. 0.1, 0.05, 0.25), got {step}")
    n = int(round(1 / step))
    points = [c for c in itertools.product(range(n + 1), repeat=n_runs) if sum(c) == n] if n_runs > 1 else [(n,)]
    if len(points) > 5000:
        raise ConfigError(f"--tune-weights: {len(points)} weight vectors for {n_runs} runs at step {step}; "
                          "use a larger --weight-step")
    return np.asarray(sorted(points, reverse=True), dtype=np.float64) / n


def tune_weights(val_paths: Sequence[Path], open_label: str, step: float = 0.1, log=None,
                 open_share: float | None = None) -> tuple[np.ndarray, float, list[tuple[np.ndarray, float, float]]]:
    """The validation-best weights of the runs whose validation files are ``val_paths`` (``open_share``: the
    threshold tuned with the open-set queries weighted to it, :func:`whale.ranking.newwhale.open_share_weights`).

    Returns:
        ``(weights [n_runs], best MAP@5, table)``, ``table`` a ``(weights, MAP@5, threshold)`` per grid point.
    """
    table = []
    for w in simplex_grid(len(val_paths), step):
        groups = validation_groups(val_paths, w)
        top = concat_top_ids([top_ids(g, open_label=open_label) for g in groups])
        t, best, _, _ = tune(top, open_share=open_share)
        table.append((w, float(best), float(t)))
        if log:
            log(f"  weights {', '.join(f'{x:.2f}' for x in w)}: validation MAP@5 {best:.5f} (threshold {t:.4g})")
    i = int(np.argmax([m for _, m, _ in table]))
    return table[i][0], table[i][1], table
