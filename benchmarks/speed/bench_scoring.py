"""Benchmark of whale.scoring: exact head speed, pruned mining, streaming top-k inference.

    python benchmarks/speed/bench_scoring.py                  # Kaggle scale (n=15,697 train, 7,960 test), hard world
    python benchmarks/speed/bench_scoring.py --world easy     # the first version's world, for comparison
    python benchmarks/speed/bench_scoring.py --quick          # small version (500 ids)

Every phase runs in its own subprocess (so each peak RSS is that phase's own) and prints one
JSON line; the parent prints a human table and, as the LAST stdout line, one JSON object.

Data ("features of a trained model"; no trained branch exists here): ``n_ids`` identities
with a Kaggle-like long tail of images per id (1 + geometric, mean ~3.1 -> 15,697 images for
5,004 ids); an image's feature is ``relu(s * (c + noise * N(0, 1)^d))`` with a per-image scale
``s ~ U(0.6, 1.4)`` (contrast / size), non-negative like max-pooled ReLU activations. The id
centres ``c`` come from a world (:data:`WORLDS`): ``easy`` (independent Gaussian centres: every
method finds the same id, same-id nearest neighbour 1.000) or ``hard`` (the default: centres
clustered in 250 families, a fifth of the ids with a look-alike twin, more noise), whose
same-id nearest-neighbour rate under cosine and under the head the table prints first. Test
queries: 72% new images of known ids, 28% images of unseen ids (new_whale). The head
(``build_head(512, 32)``) is trained for ``--steps`` (250) Adam steps (batch 256, lr 1e-3, half
positive pairs of one id, half random pairs) on the training features; its weights are shared
by all phases through a temp file.

Mining quality (pruned mining's mean head score over dense exact mining's, K = 0.25 and 0.05)
is measured on every training image by default (``--quality-n`` for fewer); the dense side
also times ``lapjv`` at that size. The reference-style hours (train-vs-train matrix, test
inference through ``head.predict``) are the pair counts divided by the reference rate measured
in the same run. The ``proxy`` phase measures each pruning proxy's top-5 agreement with exact
scoring (the table in ``whale/mining/candidates.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

D, MID = 512, 32


WORLDS = {
    # Gaussian clusters with equally distant centres: every method finds the same id (the
    # first version of this benchmark; kept to compare with earlier figures).
    "easy": dict(families=0, family_spread=1.0, twins=0.0, twin_gap=0.0, noise=0.9),
    # Clustered centres (ids of a family share most of their centre), look-alike ids (a fifth
    # of the ids have a twin whose centre differs by a small step) and more noise than signal
    # between neighbouring ids: closer to a trained branch on real flukes, where the nearest
    # neighbour is often another whale.
    "hard": dict(families=250, family_spread=0.45, twins=0.2, twin_gap=0.25, noise=1.1),
}
"""Feature worlds (``--world``). Centre of id ``i`` in family ``f``:
``c_f + family_spread * N(0, 1)^d`` (``families`` = 0: ``N(0, 1)^d``, no families); a twin's
centre is its partner's plus ``twin_gap * N(0, 1)^d``; an image is
``relu(s * (c + noise * N(0, 1)^d))``, ``s ~ U(0.6, 1.4)``."""


def world(n_ids: int, n_test: int, seed: int = 0, kind: str = "hard", d: int = D):
    """``(f_train [n, d], ids [n] str, f_test [n_test, d], test_ids [n_test] str)``, float32.

    ``kind``: a key of :data:`WORLDS`; ``d``: feature length (default :data:`D`; DenseNet121's
    branch has 1024). Training images are grouped by id (id order).
    """
    w = WORLDS[kind]
    rng = np.random.default_rng(seed)
    # Images per id: geometric with mean 15,697 / 5,004, then nudged to exactly that ratio.
    target = int(round(n_ids * 15697 / 5004))
    sizes = rng.geometric(5004 / 15697, size=n_ids)
    while sizes.sum() != target:
        diff = target - int(sizes.sum())
        pool = np.arange(n_ids) if diff > 0 else np.flatnonzero(sizes > 1)
        pick = rng.choice(pool, min(abs(diff), len(pool)), replace=False)
        sizes[pick] += 1 if diff > 0 else -1
    n_new = int(round(0.28 * n_test))
    centres_all = _centres(n_ids + n_new, w, rng, d)

    def images(owner):
        scale = rng.uniform(0.6, 1.4, size=(len(owner), 1)).astype(np.float32)
        noise = rng.standard_normal((len(owner), d), dtype=np.float32)
        return np.maximum(scale * (centres_all[owner] + w["noise"] * noise), 0).astype(np.float32)

    owner = np.repeat(np.arange(n_ids), sizes)
    f_train = images(owner)
    q_owner = np.concatenate([rng.integers(0, n_ids, n_test - n_new), n_ids + np.arange(n_new)])
    f_test = images(q_owner)
    name = lambda o: "new_whale" if o >= n_ids else f"w{o:05d}"
    return f_train, np.array([name(o) for o in owner]), f_test, np.array([name(o) for o in q_owner])


def _centres(n: int, w: dict, rng: np.random.Generator, d: int = D) -> np.ndarray:
    """``[n, d] float32`` id centres of world ``w`` (families, twins)."""
    if not w["families"]:
        return rng.standard_normal((n, d), dtype=np.float32)
    fam = rng.standard_normal((w["families"], d), dtype=np.float32)
    c = fam[rng.integers(0, w["families"], n)] + w["family_spread"] * rng.standard_normal((n, d), dtype=np.float32)
    twins = rng.permutation(n)[: 2 * int(w["twins"] / 2 * n)].reshape(-1, 2)
    c[twins[:, 1]] = c[twins[:, 0]] + w["twin_gap"] * rng.standard_normal((len(twins), d), dtype=np.float32)
    return c.astype(np.float32)


def nn_same_id_rate(S: np.ndarray, ids: np.ndarray) -> float:
    """Share of images (of ids with 2+ images) whose best-scoring other image has their id.

    ``S``: ``[n, n]`` scores (higher = more alike; the diagonal is ignored); ``ids``: ``[n]`` str.
    """
    S = np.array(S, dtype=np.float32, copy=True)
    np.fill_diagonal(S, -np.inf)
    codes = np.unique(ids, return_inverse=True)[1]
    has_partner = np.bincount(codes)[codes] >= 2
    return float((codes[S.argmax(axis=1)] == codes)[has_partner].mean())


def _tf():
    """TensorFlow's thread setting, under the TensorFlow backend only (JAX on the GPU machine has none)."""
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return None
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(2)
    return tf


def time_exact_matrix(scorer, f) -> dict:
    """Seconds and pairs/s of ``scorer.matrix(f)`` (train-vs-train, upper triangle), compiled first.

    ``scorer``: a :class:`whale.models.HeadScorer`; ``f``: ``[n, d]`` float32 features. The
    compilation (the scorer's fixed block shape, on ``f[:64]``) is timed apart: ``compile_s``.
    Returns ``{"n", "d", "compile_s", "exact_matrix_s", "exact_pairs_per_s"}``.
    """
    t = time.perf_counter()
    scorer.matrix(f[:64], progress=False)
    compile_s = time.perf_counter() - t
    scorer.pairs_computed = 0
    t = time.perf_counter()
    S = scorer.matrix(f, progress=False)
    dt = time.perf_counter() - t
    return {"n": int(len(f)), "d": int(f.shape[1]), "compile_s": compile_s, "exact_matrix_s": dt,
            "exact_pairs_per_s": scorer.pairs_computed / max(dt, 1e-9), "matrix": S}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def phase_train(a):
    _tf()
    import keras

    from whale.models import build_head

    keras.utils.set_random_seed(0)
    f, ids, _, _ = world(a.n_ids, 0, kind=a.world)
    codes = np.unique(ids, return_inverse=True)[1]
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(codes.max() + 1))
    sizes = np.bincount(codes)
    multi = np.flatnonzero(sizes >= 2)
    rng = np.random.default_rng(1)
    head = build_head(D, MID)
    head.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    t = time.perf_counter()
    for _ in range(a.steps):
        g = rng.choice(multi, 128)
        i = starts[g] + rng.integers(0, sizes[g])
        j = starts[g] + (i - starts[g] + rng.integers(1, sizes[g])) % sizes[g]
        pos = np.stack([order[i], order[j]], 1)
        neg = rng.integers(0, len(f), (128, 2))
        p = np.concatenate([pos, neg])
        y = np.concatenate([np.ones(128), (codes[neg[:, 0]] == codes[neg[:, 1]]).astype(float)])
        loss = head.train_on_batch([f[p[:, 0]], f[p[:, 1]]], y.astype(np.float32))
    head.save_weights(a.weights)
    return {"train_s": time.perf_counter() - t, "train_loss": float(loss)}


def _head(a):
    _tf()
    from whale.models import build_head

    head = build_head(D, MID)
    head.load_weights(a.weights)
    return head


def phase_speed(a):
    from whale.models import HeadScorer

    head = _head(a)
    f, _, _, _ = world(a.n_ids, 0, kind=a.world)
    f = f[: a.exact_n]
    rng = np.random.default_rng(2)
    # Reference style: gather every index pair, head.predict(batch_size=2048).
    ia = rng.integers(0, len(f), a.baseline_pairs)
    ib = rng.integers(0, len(f), a.baseline_pairs)
    head.predict([f[ia[:4096]], f[ib[:4096]]], batch_size=2048, verbose=0)  # warm-up / trace
    t = time.perf_counter()
    base = head.predict([f[ia], f[ib]], batch_size=2048, verbose=0)[:, 0]
    base_pps = a.baseline_pairs / (time.perf_counter() - t)
    timed = time_exact_matrix(HeadScorer(head), f)
    S, dt, exact_pps = timed["matrix"], timed["exact_matrix_s"], timed["exact_pairs_per_s"]
    err = float(np.abs(S[ia, ib] - base).max())
    return {"baseline_pairs_per_s": base_pps, "exact_pairs_per_s": exact_pps,
            "exact_speedup": exact_pps / base_pps, "exact_matrix_s": dt, "exact_max_abs_err": err}


def phase_quality(a):
    from whale.mining import mine_negatives
    from whale.mining import mine_pruned
    from whale.models import HeadScorer

    head = _head(a)
    f, ids, _, _ = world(a.n_ids, 0, kind=a.world)
    n = min(a.quality_n, len(f))
    f, ids = f[:n], ids[:n]  # images are grouped by id, so a prefix keeps whole ids
    scorer = HeadScorer(head)
    S = scorer.matrix(f, progress=False)
    g = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
    out = {"quality_n": n, "nn_same_id_cosine": nn_same_id_rate(g @ g.T, ids),
           "nn_same_id_head": nn_same_id_rate(S, ids)}
    same = ids[:, None] == ids[None, :]
    out.update(same_id_mean_score=float(S[same].mean()), other_id_mean_score=float(S[~same].mean()))
    del same
    for k, key in ((0.25, "mining_quality"), (0.05, "mining_quality_k005")):
        t = time.perf_counter()
        dense = mine_negatives(S, ids, k, 1, np.random.default_rng(3))[0]
        out[f"dense_mining_s_k{k:g}"] = time.perf_counter() - t
        pruned = mine_pruned(scorer, f, ids, k, 1, np.random.default_rng(3), m=a.m)[0]
        out[key] = float(S[pruned[:, 0], pruned[:, 1]].mean() / S[dense[:, 0], dense[:, 1]].mean())
    return out


def phase_proxy(a):
    """Top-5 agreement with exact scoring of each pruning proxy (the table in
    ``whale/mining/candidates.py``): 200 queries against the gallery of a 500-id world."""
    from whale.inference.topk import topk_stream
    from whale.models import HeadScorer
    from whale.ranking import top_id_scores

    head = _head(a)
    fg, gids, fq, _ = world(500, 250, seed=7, kind=a.world)
    fq = fq[:200]
    scorer = HeadScorer(head)
    dn, di, _ = top_id_scores(scorer.matrix(fq, fg, progress=False), gids, k=5)
    exact = dn[di]
    out = {"proxy_gallery": len(fg), "proxy_queries": len(fq)}
    for sim in ("cosine", "euclidean", "dot", "head"):
        for p in (50, 100, 300, 600):
            names, _ = topk_stream(scorer, fq, fg, gids, k_ids=5, prune=p, similarity=sim, progress=False)
            out[f"proxy_{sim}_p{p}"] = float((names[:, :5] == exact).all(axis=1).mean())
    return out


def phase_mining(a):
    from whale.mining import candidate_counts, candidates, mine_pruned
    from whale.models import HeadScorer

    head = _head(a)
    f, ids, _, _ = world(a.n_ids, 0, kind=a.world)
    scorer = HeadScorer(head)
    scorer.pairs(f[:8], f[:8])  # compile outside the timing, as in a training run
    scorer.pairs_computed = 0
    t = time.perf_counter()
    pairs = mine_pruned(scorer, f, ids, 0.25, 1, np.random.default_rng(4), m=a.m)
    dt = time.perf_counter() - t
    m_top, r = candidate_counts(a.m, 0.25)
    t2 = time.perf_counter()
    candidates(f, ids, m=m_top, n_random=r, rng=np.random.default_rng(4))
    cand_s = time.perf_counter() - t2
    return {"mining_s": dt, "mining_n": len(f), "mining_pairs_scored": scorer.pairs_computed,
            "mining_candidates_s": cand_s, "mining_rss_mb": _rss_mb(), "epochs": len(pairs)}


def phase_inference(a):
    from whale.ranking import top_id_scores
    from whale.inference.topk import topk_stream
    from whale.models import HeadScorer

    head = _head(a)
    fg, gids, fq, qids = world(a.n_ids, a.n_test, kind=a.world)
    scorer = HeadScorer(head)
    scorer.pairs(fq[:8], fg[:8])
    rss0 = _rss_mb()
    t = time.perf_counter()
    names, vals = topk_stream(scorer, fq, fg, gids, k_ids=20, prune=a.prune, progress=False)
    dt = time.perf_counter() - t
    peak = _rss_mb()
    # Agreement with dense exact scoring on a subset of queries (dense is ~1 h at full size).
    sub = np.random.default_rng(5).choice(len(fq), min(a.agree_q, len(fq)), replace=False)
    dense = scorer.matrix(fq[sub], fg, progress=False)
    dn, di, _ = top_id_scores(dense, gids, k=5)
    agree = float((dn[di] == names[sub, :5]).all(axis=1).mean())
    known = qids != "new_whale"
    top1 = float((names[known, 0] == qids[known]).mean())
    return {"inference_s": dt, "inference_peak_rss_mb": peak, "inference_rss_before_mb": rss0,
            "top5_agreement": agree, "agreement_queries": len(sub), "prune": a.prune,
            "top1_acc_known": top1, "n_query": len(fq), "n_gallery": len(fg)}


PHASES = {"train": phase_train, "speed": phase_speed, "quality": phase_quality,
          "mining": phase_mining, "inference": phase_inference, "proxy": phase_proxy}


def main():
    from whale.command import quiet_unless_debugging

    quiet_unless_debugging()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # this benchmark measures the CPU
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small version (~1 min)")
    p.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    p.add_argument("--weights", help=argparse.SUPPRESS)
    p.add_argument("--n-ids", type=int, default=None, help="identities (default 5004; quick 500)")
    p.add_argument("--n-test", type=int, default=None, help="test queries (default 7960; quick 800)")
    p.add_argument("--steps", type=int, default=None, help="head training steps (default 250; quick 150)")
    p.add_argument("--m", type=int, default=100, help="proxy candidates per image for mining")
    p.add_argument("--prune", type=int, default=100, help="gallery images re-ranked per query")
    p.add_argument("--world", choices=sorted(WORLDS), default="hard",
                   help="synthetic features (default hard: families, look-alike ids; see WORLDS)")
    p.add_argument("--quality-n", type=int, default=None,
                   help="images of the dense-vs-pruned mining comparison (default all; quick 1000)")
    a = p.parse_args()
    q = a.quick
    a.n_ids = a.n_ids or (500 if q else 5004)
    a.n_test = a.n_test or (800 if q else 7960)
    a.steps = a.steps or (150 if q else 250)
    a.exact_n = 600 if q else 2000
    a.baseline_pairs = 30_000 if q else 200_000
    a.quality_n = a.quality_n or (1000 if q else 10**9)  # default: every training image
    a.agree_q = 100 if q else 300
    if a.phase:
        print(json.dumps(PHASES[a.phase](a)), flush=True)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        weights = str(Path(tmp) / "head.weights.h5")
        for phase in ("train", "speed", "quality", "mining", "inference", "proxy"):
            cmd = [sys.executable, __file__, "--phase", phase, "--weights", weights,
                   "--n-ids", str(a.n_ids), "--n-test", str(a.n_test), "--steps", str(a.steps),
                   "--m", str(a.m), "--prune", str(a.prune), "--world", a.world,
                   "--quality-n", str(a.quality_n)] + (["--quick"] if q else [])
            t = time.perf_counter()
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            print(f"[{phase}] {time.perf_counter() - t:.1f}s {res}", file=sys.stderr, flush=True)
            results.update(res)
    n_train = results["mining_n"]
    ref_pps = results["baseline_pairs_per_s"]
    rows = [
        (f"world '{a.world}': same-id nearest neighbour, cosine", results["nn_same_id_cosine"], ""),
        (f"world '{a.world}': same-id nearest neighbour, head", results["nn_same_id_head"], ""),
        ("same-id mean head score", results["same_id_mean_score"], ""),
        ("other-id mean head score", results["other_id_mean_score"], ""),
        ("reference head.predict (pairs/s)", ref_pps, ""),
        ("exact HeadScorer.matrix (pairs/s)", results["exact_pairs_per_s"], ""),
        ("exact speedup", results["exact_speedup"], ">= 10"),
        (f"pruned mining, n={results['mining_n']} (s)", results["mining_s"], "<= 30"),
        (f"reference train-vs-train matrix, n={n_train} (h, at that rate)", n_train * (n_train - 1) / 2 / ref_pps / 3600, ""),
        (f"dense lapjv mining K=0.25, n={results['quality_n']} (s)", results["dense_mining_s_k0.25"], ""),
        (f"dense lapjv mining K=0.05, n={results['quality_n']} (s)", results["dense_mining_s_k0.05"], ""),
        (f"mining quality K=0.25, n={results['quality_n']}", results["mining_quality"], ">= 0.95"),
        (f"mining quality K=0.05, n={results['quality_n']}", results["mining_quality_k005"], ""),
        (f"inference {results['n_query']}x{results['n_gallery']}, prune={a.prune} (s)", results["inference_s"], "<= 60"),
        ("inference peak RSS (MB)", results["inference_peak_rss_mb"], "<= 2000"),
        (f"reference test inference {results['n_query']}x{results['n_gallery']} (h, at that rate)",
         results["n_query"] * results["n_gallery"] / ref_pps / 3600, ""),
        (f"top-5 agreement ({results['agreement_queries']} queries)", results["top5_agreement"], ">= 0.995"),
    ]
    print(f"{'measure':<64} {'value':>14}  target")
    for name, v, target in rows:
        print(f"{name:<64} {v:>14,.3f}  {target}")
    print("top-5 agreement with exact scoring, 200 queries x "
          f"{results['proxy_gallery']} gallery, P re-ranked by each proxy (P = 50 / 100 / 300 / 600):")
    for sim in ("cosine", "euclidean", "dot", "head"):
        print(f"  {sim:<10} " + " / ".join(f"{results[f'proxy_{sim}_p{p}']:.2f}" for p in (50, 100, 300, 600)))
    keys = ["nn_same_id_cosine", "nn_same_id_head", "baseline_pairs_per_s", "exact_pairs_per_s",
            "exact_speedup", "exact_max_abs_err", "mining_s", "dense_mining_s_k0.25", "mining_quality",
            "mining_quality_k005", "inference_s", "inference_peak_rss_mb", "top5_agreement"]
    out = {k: float(f"{float(results[k]):.4g}") for k in keys}
    out["top5_agreement_note"] = (f"share of {results['agreement_queries']} random queries whose top-5 ids "
                                  f"equal dense exact scoring's")
    out["extra"] = {k: v for k, v in results.items() if k not in keys}
    out["quick"], out["world"] = q, a.world
    print(json.dumps(out))


if __name__ == "__main__":
    main()
