"""Steps ``mining_pruned`` and ``mining_exact``: one mining as the trainer does it, at Kaggle's size."""
from __future__ import annotations

import time

from benchmarks.gpu.steps.features import features, head


def step_mining(ctx, mode: str, n: int, d: int, epochs: int, k: float = 0.25) -> dict:
    """One mining as the trainer does it (:func:`whale.mining.make_miner`), compiled beforehand."""
    import numpy as np

    from whale.mining import make_miner
    from whale.models import HeadScorer

    f, ids = features(n, d)
    scorer = HeadScorer(head(d))
    t = time.perf_counter()
    scorer.matrix(f[:64], progress=False)
    scorer.pairs(f[:8], f[:8])
    compile_s = time.perf_counter() - t
    miner = make_miner(mode, 100)
    miner.mine(scorer, f, ids, k, epochs, np.random.default_rng(0))
    st = miner.last_stats
    return {"mode": mode, "n": n, "d": d, "k": k, "epochs": epochs, "mining_s": round(st.seconds, 2),
            "mining_s_per_epoch": round(st.seconds / epochs, 2), "pairs_scored": int(st.pairs_scored),
            "fallback_pairs": int(st.fallback_pairs), "mean_mined_score": round(st.mean_score, 4),
            "compile_s": round(compile_s, 2)}
