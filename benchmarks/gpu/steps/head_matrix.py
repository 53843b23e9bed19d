"""Step ``head_matrix``: seconds of the exact train-vs-train head matrix at Kaggle's size."""
from __future__ import annotations

from benchmarks.gpu.steps.features import features, head


def step_head_matrix(ctx, n: int, d: int) -> dict:
    """Seconds of the exact train-vs-train head matrix (:func:`benchmarks.speed.bench_scoring.time_exact_matrix`)."""
    from benchmarks.speed.bench_scoring import time_exact_matrix
    from whale.models import HeadScorer

    f, _ = features(n, d)
    out = time_exact_matrix(HeadScorer(head(d)), f)
    out.pop("matrix")
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}
