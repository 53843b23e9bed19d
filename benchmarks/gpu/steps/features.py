"""What the scoring steps (``head_matrix``, ``mining_*``, ``objectives``) time: features of Kaggle's size, a head."""
from __future__ import annotations

KAGGLE_TRAIN_IMAGES = 15697   # Kaggle's train.csv rows, new_whale included: the mining step's size


def features(n: int, d: int, seed: int = 0):
    """``(f [n, d] float32, ids [n] str)``: :func:`benchmarks.speed.bench_scoring.world`'s hard world with
    the Kaggle images-per-id tail, cut to ``n`` images (whole ids)."""
    from benchmarks.speed.bench_scoring import world

    n_ids = max(2, int(round(n * 5004 / KAGGLE_TRAIN_IMAGES)) + 1)
    f, ids, _, _ = world(n_ids, 0, seed=seed, kind="hard", d=d)
    return f[:n], ids[:n]


def head(d: int):
    """The paper's head on ``d``-wide features, random weights (seed 0)."""
    import keras

    from whale.models import build_head

    keras.utils.set_random_seed(0)
    return build_head(d, 32)
