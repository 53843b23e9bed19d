"""The catalogue on the synthetic competition: train = catalogue, test = new photos. Not a test.

    python benchmarks/seeds/catalogue.py --out runs/bench_catalogue [--ids 200] [--seed 0] [--run RUN --data DIR]
    python benchmarks/seeds/catalogue.py --out runs/bench_catalogue_lions --lions --config configs/lions.yaml --objective triplet
    python benchmarks/seeds/catalogue.py --out runs/bench_catalogue_scale --scale-only   # step 4's embeddings only

1. Data: ``whale synth`` (``--ids`` individuals, ``--seed``) unless ``--data`` names a Kaggle-format
   folder with ``test_solution.csv``; ``--lions``: the lions' mini-competition of ``benchmarks/seeds/lions.py``
   (``../shared/data/lions``, split by ``--seed``: known lions' photos split train/test, half of the
   other lions ``new_whale`` in train, half new in test).
2. Run: ``configs/demo.yaml`` with each stage's epochs x ``--epochs-scale`` (default 0.25, CPU minutes)
   trained on fold 0 (resumed if ``OUT/run`` exists) unless ``--run``.
3. ``whale catalogue add`` of ``train.csv`` (known ids; boxes from ``bounding_boxes.csv``), then
   ``match`` of ``test/`` (``--top 10``), timed (the first match scores the catalogue: index + query;
   the second reuses the stored features). Against ``test_solution.csv``: top-1/5/10 of the proposals
   on test photos of known individuals, share of true new individuals flagged ``possibly_new``, share
   of known ones flagged, groups.
4. Scale (``--sizes``): a synthetic catalogue of random clustered unit vectors (``--dim``, the
   embedding size; ``size/5`` individuals, queries = noisy copies of catalogue vectors), exact
   matrix product + per-query top ``pool`` vs a FAISS HNSW index (build, query, recall of the exact
   top-10 images; then stored in ``OUT/index`` and read back + queried, as later matches of a
   catalogue do); and the paper's head of the run on random features of its branch width: exact
   (every pair through the head) vs proxy + exact re-scoring (:func:`whale.inference.topk.topk_stream`).

The last stdout line is ``{"benchmark": "catalogue", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
from whale import NEW_WHALE  # noqa: E402

TARGET = "seed 002: the true individual among the top 10 in >= 95% of queries"


def proposal_metrics(proposals, solution: dict[str, str]) -> dict:
    """Top-1/5/10 of known photos, share of new photos flagged, share of known photos flagged, groups."""
    hits = {1: 0, 5: 0, 10: 0}
    known = new = flagged_new = flagged_known = 0
    for ph in proposals.photos:
        truth = solution[Path(ph.photo).name]
        if truth == NEW_WHALE:
            new += 1
            flagged_new += ph.possibly_new
            continue
        known += 1
        flagged_known += ph.possibly_new
        ids = [c.individual for c in ph.candidates]
        for k in hits:
            hits[k] += truth in ids[:k]
    out = {f"top{k}": v / max(known, 1) for k, v in hits.items()}
    out.update(known_photos=known, new_photos=new, new_flagged=flagged_new / max(new, 1),
               known_flagged=flagged_known / max(known, 1),
               groups=len({p.group for p in proposals.photos if p.group is not None}))
    return out


def clustered(n: int, dim: int, rng: np.random.Generator, per_id: int = 5, spread: float = 0.5):
    """``([n, dim] float32 unit vectors, [n] int ids)``: ``n / per_id`` centres, members scattered around them."""
    n_ids = max(1, n // per_id)
    centres = rng.standard_normal((n_ids, dim)).astype(np.float32)
    ids = rng.integers(0, n_ids, n)
    x = centres[ids] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), ids


def scale_embeddings(sizes, dim: int, n_queries: int, pool: int, rng, log=print, index_dir=None) -> list[dict]:
    """Exact matrix product vs FAISS HNSW per catalogue size (seconds, recall of the exact top-10 images).

    With ``index_dir`` also the match path with a stored index: built and stored once (not timed),
    then read back and queried (timed), as a catalogue's later matches do.
    """
    from whale.catalogue.match import faiss_candidates
    from whale.mining.candidates import top_columns

    rows = []
    for n in sizes:
        eg, _ = clustered(n, dim, rng)
        pick = rng.integers(0, n, n_queries)
        eq = eg[pick] + 0.3 / np.sqrt(dim) * rng.standard_normal((n_queries, dim)).astype(np.float32)
        eq /= np.linalg.norm(eq, axis=1, keepdims=True)
        t0 = time.perf_counter()
        sim = eq @ eg.T
        top = top_columns(sim, pool)
        t_exact = time.perf_counter() - t0
        exact10 = np.argsort(-sim, axis=1)[:, :10]
        t0 = time.perf_counter()
        import faiss

        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.add(eg)
        t_build = time.perf_counter() - t0
        index.hnsw.efSearch = max(128, pool)
        t0 = time.perf_counter()
        _, found = index.search(eq, min(pool, n))
        t_query = time.perf_counter() - t0
        recall = float(np.mean([len(set(exact10[i]) & set(found[i])) / 10 for i in range(n_queries)]))
        # the module's own path (index built inside) for one figure that includes everything
        t0 = time.perf_counter()
        faiss_candidates(eq, eg, pool)
        t_module = time.perf_counter() - t0
        del top
        row = {"size": n, "exact_s": t_exact, "faiss_build_s": t_build, "faiss_query_s": t_query,
               "faiss_total_s": t_module, "faiss_recall10": recall,
               "query_ratio": t_exact / max(t_query, 1e-9), "total_ratio": t_exact / max(t_module, 1e-9)}
        stored = ""
        if index_dir is not None:
            first = faiss_candidates(eq, eg, pool, index_dir=index_dir)  # the first match: builds and stores
            t0 = time.perf_counter()
            again = faiss_candidates(eq, eg, pool, index_dir=index_dir)  # a later match: reads it back
            row["faiss_stored_s"] = time.perf_counter() - t0
            row["stored_ratio"] = t_exact / max(row["faiss_stored_s"], 1e-9)
            row["faiss_index_mb"] = sum(p.stat().st_size for p in Path(index_dir).glob("*.index")) / 2 ** 20
            row["stored_same"] = bool(np.array_equal(again, first))
            stored = (f"; stored index ({row['faiss_index_mb']:.0f} MB) read + query {row['faiss_stored_s']:.3f} s "
                      f"(exact/that {row['stored_ratio']:.2f}x)")
        rows.append(row)
        log(f"  {n:>7} images: exact {t_exact:.3f} s | faiss build {t_build:.2f} s, query {t_query:.3f} s "
            f"(exact/query {row['query_ratio']:.1f}x, exact/(build+query) {row['total_ratio']:.2f}x), "
            f"recall of exact top-10 {recall:.3f}{stored}")
    return rows


def scale_head(rs, sizes, n_queries: int, pool: int, rng, log=print) -> list[dict]:
    """The run's head on random branch features: exact streaming top-k vs proxy + exact re-scoring."""
    from whale.inference.topk import topk_stream

    d = rs.scorer.d
    rows = []
    for n in sizes:
        fg = np.abs(rng.standard_normal((n, d))).astype(np.float32)
        fq = fg[rng.integers(0, n, n_queries)] + 0.1 * np.abs(rng.standard_normal((n_queries, d))).astype(np.float32)
        ids = np.array([f"i{v}" for v in rng.integers(0, max(1, n // 5), n)])
        t0 = time.perf_counter()
        exact, _ = topk_stream(rs.scorer, fq, fg, ids, k_ids=10, progress=False)
        t_exact = time.perf_counter() - t0
        t0 = time.perf_counter()
        pruned, _ = topk_stream(rs.scorer, fq, fg, ids, k_ids=10, prune=pool, progress=False)
        t_prune = time.perf_counter() - t0
        agree = float(np.mean(exact[:, 0] == pruned[:, 0]))
        rows.append({"size": n, "head_exact_s": t_exact, "head_prune_s": t_prune,
                     "ratio": t_exact / max(t_prune, 1e-9), "top1_agreement": agree})
        log(f"  {n:>7} images: head exact {t_exact:.2f} s, proxy+re-scoring {t_prune:.2f} s "
            f"({t_exact / max(t_prune, 1e-9):.1f}x), top-1 agreement {agree:.3f}")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--ids", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", help="Kaggle-format folder with test_solution.csv (default: whale synth)")
    p.add_argument("--lions", action="store_true",
                   help="the lions' mini-competition (benchmarks/seeds/lions.py) as data")
    p.add_argument("--objective", help="the config's objective replaced by this one (whale.objectives)")
    p.add_argument("--run", help="trained run (default: configs/demo.yaml trained on fold 0)")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "demo.yaml"))
    p.add_argument("--epochs-scale", type=float, default=0.25,
                   help="each stage's epochs x this (0.25: the demo schedule in a quarter of its epochs)")
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--dim", type=int, default=128, help="embedding size of the scale phase")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--pool", type=int, default=300)
    p.add_argument("--scale-only", action="store_true",
                   help="only the embeddings' scale phase (no data, run or matching; the head's scale needs a run)")
    args = p.parse_args(argv)
    t_start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rng = np.random.default_rng([args.seed, 1])
    scale_note = f"scale, embeddings ({args.dim}-d clustered unit vectors, {args.queries} queries, pool {args.pool}):"
    if args.scale_only:
        print(scale_note)
        rows = scale_embeddings(sizes, args.dim, args.queries, args.pool, rng, index_dir=out / "index")
        (out / "results.json").write_text(json.dumps({"scale_embedding": rows}, indent=1))
        print(common.final_json("catalogue", {"sizes": sizes}, time.time() - t_start))
        return 0
    common.setup_tensorflow()
    data = Path(args.data) if args.data else out / "data"
    if args.lions and not (data / "train.csv").is_file():
        from benchmarks.seeds import lions

        src = common.shared_data("lions", "Lion_Data_Zero")
        if src is None:
            p.error("--lions: ../shared/data/lions/Lion_Data_Zero not found")
        data, _ = lions.lion_competition(lions.index_lions(src), data, args.seed)
    elif not args.data and not (data / "train.csv").is_file():
        from whale.data.synth import generate

        generate(data, n_ids=args.ids, seed=args.seed, size=256, progress=False)
    run = Path(args.run) if args.run else out / "run"
    if not args.run:
        from whale.config import load_config
        from whale.training.trainer import train_fold

        t0 = time.time()
        overrides = {"seed": args.seed, **({"objective": args.objective} if args.objective else {})}
        cfg = load_config(args.config, overrides=overrides)
        cfg = cfg if args.epochs_scale == 1 else common.quick_config(cfg, args.epochs_scale, "catalogue benchmark")
        res = train_fold(cfg, data, 0, run, resume=True,
                         verbose=0, log=lambda m: None)
        print(f"run {run}: {res.epochs_done} epochs, best validation MAP@5 {res.best_val_map5} "
              f"({time.time() - t0:.0f} s)", flush=True)

    from whale.catalogue.db import Catalogue
    from whale.catalogue.features import RunFeatures
    from whale.catalogue.ingest import add_photos
    from whale.catalogue.match import match_batch
    from whale.data.competition import read_solution

    cat_dir = out / "catalogue"
    if cat_dir.exists():
        import shutil

        shutil.rmtree(cat_dir)
    boxes = data / "bounding_boxes.csv"
    boxes = boxes if boxes.is_file() else None
    metrics = {}
    with Catalogue.create(cat_dir) as cat:
        t0 = time.perf_counter()
        n = add_photos(cat, data / "train.csv", data / "train", boxes, progress=False)
        metrics["add_s"] = time.perf_counter() - t0
        rf = RunFeatures(run, verbose=False)
        n_test = len(list((data / "test").iterdir()))
        timings = []
        for _ in range(2):  # first: scores the catalogue too; second: stored features reused
            t0 = time.perf_counter()
            proposals, _ = match_batch(cat, rf, data / "test", "test", top=10, boxes_csv=boxes, rematch=True)
            timings.append(time.perf_counter() - t0)
        metrics.update(catalogue_images=n["added"], individuals=len(cat.individuals()), test_photos=n_test,
                       match_first_s=timings[0], match_again_s=timings[1],
                       s_per_photo=timings[1] / n_test, threshold=proposals.threshold)
    metrics.update(proposal_metrics(proposals, read_solution(data)))
    print(f"catalogue: {metrics['catalogue_images']} photos of {metrics['individuals']} individuals; "
          f"{n_test} new photos ({metrics['known_photos']} of known individuals, {metrics['new_photos']} new)")
    print(f"proposals: top-1 {metrics['top1']:.3f}, top-5 {metrics['top5']:.3f}, top-10 {metrics['top10']:.3f} "
          f"({TARGET}); new individuals flagged {metrics['new_flagged']:.3f}, known ones flagged "
          f"{metrics['known_flagged']:.3f} (threshold {metrics['threshold']:.3f}); {metrics['groups']} groups")
    print(f"time: add {metrics['add_s']:.1f} s; match {metrics['match_first_s']:.1f} s with indexing, "
          f"{metrics['match_again_s']:.1f} s with stored features = {metrics['s_per_photo'] * 1000:.0f} ms per photo "
          f"(model loading included)", flush=True)
    print(scale_note)
    metrics["scale_embedding"] = scale_embeddings(sizes, args.dim, args.queries, args.pool, rng,
                                                  index_dir=out / "index")
    if not hasattr(rf.scorer.scorer, "embed"):
        print(f"scale, the run's head ({rf.scorer.scorer.d}-d random branch features, {args.queries} queries):")
        metrics["scale_head"] = scale_head(rf.scorer, sizes, args.queries, args.pool, rng)
    (out / "results.json").write_text(json.dumps(metrics, indent=1))
    print(common.final_json("catalogue", {k: v for k, v in metrics.items() if not isinstance(v, list)},
                            time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
