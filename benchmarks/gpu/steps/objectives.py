"""Step ``objectives``: each embedding objective's exact train-vs-train score matrix at Kaggle's size."""
from __future__ import annotations

from benchmarks.gpu.steps.features import features


def step_objectives(ctx, n: int, d: int) -> dict:
    """Seconds of each embedding objective's exact train-vs-train score matrix at ``n`` images (branch
    features ``[n, d]``), as the miner and validation compute it (:func:`whale.objectives.make_scorer`):
    the projection once per image, then one matrix product per block (seed 004's models: weighted norms)."""
    import keras

    from benchmarks.speed.bench_scoring import time_exact_matrix
    from whale.objectives import Embedding, EmbeddingScorer, SimilarityModel

    f, _ = features(n, d)
    out = {"n": n, "d": d}
    kinds = [("triplet/contrastive", 256, "cauchy", None), ("global/tgloss", 256, "cosine", None),
             ("arcface", 512, "cosine", None), ("probabilistic cauchy", 20, "cauchy", "cauchy"),
             ("probabilistic laplacian", 20, "cauchy", "laplacian")]
    for label, dim, score, similarity in kinds:
        keras.utils.set_random_seed(0)
        layer = Embedding(dim, normalize=score == "cosine", score=score)
        layer.build((None, d))
        sim = None
        if similarity:
            sim = SimilarityModel(similarity, dim=dim)
            sim.build([(None, dim), (None, dim)])
        res = time_exact_matrix(EmbeddingScorer(layer, similarity=sim), f)
        out[label] = {"embedding": dim, "exact_matrix_s": round(res["exact_matrix_s"], 3),
                      "pairs_per_s": round(res["exact_pairs_per_s"])}
    return out
