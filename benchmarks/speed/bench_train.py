"""Training speed per branch x image size x precision: model alone, input pipeline alone, end to end.

For each combination, in one run and on the same machine:

(a) ``model``: the siamese train step (``train_on_batch``) on arrays already in memory;
(b) ``pipeline``: the real input pipeline alone: box crops from :class:`whale.data.ImageStore`
    (decoded once, kept in memory), the paper's augmentation (:mod:`whale.data.augment`) and
    :class:`whale.training.pairs.PairDataset` batches built by ``--workers`` threads (as
    ``PyDataset`` workers do without multiprocessing);
(c) ``end_to_end``: the trainer (:class:`whale.training.trainer.Trainer`) training one mining
    interval on a synthetic competition (:mod:`whale.data.synth`): the ``fit`` of each epoch
    timed, the first epoch (tracing and compilation) left out; mining and validation are not
    counted (they are timed in ``log.csv``).

Each prints pairs/s, and the ratio (c)/(a) says how much of the model's speed the real
pipeline keeps. ``--batchings pairs,images`` measures the paper's pair batches (2B images through
the branch per B pairs) and ``batching: images`` (B images shared by B pairs,
:mod:`whale.training.imagebatches`) side by side, with the ratio of their end-to-end rates. The
last stdout line is one JSON object whose ``rates`` list is the rates file ``run_fold.py --plan
--rates FILE`` reads; ``--out FILE`` also writes it.

Examples:
    python benchmarks/speed/bench_train.py --quick                  # CPU, tiny branch, under 2 minutes
    python benchmarks/speed/bench_train.py --branches small --sizes 64 --precisions float32 --channels 1 \\
        --batchings pairs,images --workers 2                  # the demo's model, both batchings
    KERAS_BACKEND=jax python benchmarks/speed/bench_train.py --branches densenet121 --sizes 384,512 \\
        --precisions mixed_bfloat16 --workers 8 --out rates.json   # a GPU
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--branches", default="densenet121", help="comma-separated branch names")
    p.add_argument("--sizes", default="384,512", help="comma-separated image sizes")
    p.add_argument("--precisions", default="mixed_bfloat16", help="comma-separated precisions")
    p.add_argument("--stems", default="", help="comma-separated stems (model.stem: small conv,pool; "
                   "seresnext50 cadene,timm); default: each branch's own")
    p.add_argument("--batchings", default="pairs", help="comma-separated: pairs (the paper's), images")
    p.add_argument("--channels", type=int, default=3, choices=(1, 3), help="image channels (convnet_v1: 1)")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per batch")
    p.add_argument("--steps", type=int, default=20, help="timed batches for (a) and (b)")
    p.add_argument("--workers", type=int, default=4, help="threads building batches in (b) and (c)")
    p.add_argument("--ids", type=int, default=200, help="ids of the synthetic competition for (b), (c)")
    p.add_argument("--interval", type=int, default=3, help="(c): epochs of the mining interval trained")
    p.add_argument("--data", help="synthetic competition folder to reuse (generated when missing)")
    p.add_argument("--out", help="also write the rates JSON here")
    p.add_argument("--quick", action="store_true",
                   help="CPU smoke run: tiny branch, 32 px, float32 and mixed_bfloat16, few steps")
    args = p.parse_args(argv)
    if args.quick:
        args.branches, args.sizes, args.precisions = "tiny", "32", "float32,mixed_bfloat16"
        args.batch_size, args.steps, args.workers, args.ids, args.interval = 16, 4, 2, 12, 2
    return args


def _rate(pairs: int, seconds: float) -> float:
    return pairs / max(seconds, 1e-9)


def model_only(branch: str, size: int, channels: int, batch: int, steps: int, stem: str | None = None,
               batching: str = "pairs", timings: dict | None = None, inference_steps: int = 0) -> float:
    """(a) pairs/s of ``train_on_batch`` on in-memory float32 ``[batch, size, size, channels]`` arrays
    (two per batch; ``batching="images"``: one, and ``batch`` pairs indexing into it).

    ``timings`` (a dict, optional) receives ``compile_s``: the first step's seconds (tracing and
    compilation); with ``inference_steps`` > 0 also ``inference_images_s``: images/s of the branch's
    ``predict_on_batch`` on ``[2 * batch, size, size, channels]`` (the mining's feature pass) and
    ``inference_compile_s``."""
    from whale.models import build_branch, build_head, build_siamese, compile_siamese

    b = build_branch(branch, (size, size, channels), options={"stem": stem} if stem else None)
    model = build_siamese(b, build_head(int(b.output_shape[-1])), shared=batching == "images")
    compile_siamese(model, 1e-4)
    rng = np.random.default_rng(0)
    xa, xb = (rng.uniform(0, 255, (batch, size, size, channels)).astype(np.float32) for _ in range(2))
    y = (rng.uniform(size=(batch, 1)) > 0.5).astype(np.float32)
    x = [xa, rng.integers(0, batch, (batch, 2)).astype(np.int32)] if batching == "images" else [xa, xb]
    t0 = time.perf_counter()
    np.asarray(model.train_on_batch(x, y))  # tracing and compilation
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = model.train_on_batch(x, y)
    np.asarray(loss)  # wait for the last step (asynchronous dispatch)
    rate = _rate(steps * batch, time.perf_counter() - t0)
    if timings is not None:
        timings["compile_s"] = compile_s
        if inference_steps > 0:
            images = np.concatenate([xa, xb])
            t0 = time.perf_counter()
            np.asarray(b.predict_on_batch(images))
            timings["inference_compile_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(inference_steps):
                out = b.predict_on_batch(images)
            np.asarray(out)
            timings["inference_images_s"] = _rate(inference_steps * len(images), time.perf_counter() - t0)
    return rate


def pipeline_only(data, size: int, channels: int, batch: int, steps: int, workers: int,
                  batching: str = "pairs") -> float:
    """(b) pairs/s of PairDataset (or ``batching="images"``: ImageBatchDataset) batches (crops in memory,
    augmentation) built by ``workers`` threads; padding pairs are not counted."""
    from whale.data import ImageStore, crop_size_for
    from whale.data.augment import build_augmenter
    from whale.mining import positive_pairs
    from whale.training.imagebatches import ImageBatchDataset
    from whale.training.pairs import PairDataset

    rng = np.random.default_rng(0)
    store = ImageStore(data.gallery.paths, data.gallery.boxes, crop_size_for(size), channels=channels)
    for i in range(len(store)):
        store[i]  # decode every crop once, as the trainer's store does over its first epoch
    pos = data.pairs_in_gallery[positive_pairs(data.pairs.ids, rng)]
    # Negatives: each pair image once first, with a random partner (the shape of one LAP match).
    neg = np.stack([pos[:, 0], rng.permutation(len(store))[:len(pos)]], axis=1)
    pairs = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))]).astype(np.float32)
    kind = ImageBatchDataset if batching == "images" else PairDataset
    ds = kind(store, pairs, labels, size, build_augmenter(size, channels=channels),
              batch_size=batch, seed=0, epoch=0)
    index = [i % len(ds) for i in range(steps)]
    ds[0]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        made = sum(float(np.sum(b[2])) if len(b) == 3 else len(b[1]) for b in pool.map(ds.__getitem__, index))
    return _rate(made, time.perf_counter() - t0)


def end_to_end(branch: str, size: int, channels: int, precision: str, args, data_dir: Path,
               stem: str | None = None, batching: str = "pairs", timings: dict | None = None) -> float:
    """(c) pairs/s of the trainer's ``fit`` epochs over one mining interval (first epoch left out).

    ``args``: anything with ``batch_size``, ``workers`` and ``interval`` (epochs timed). ``timings``
    (a dict, optional) receives ``first_epoch_s`` (the epoch left out: tracing and compilation) and
    ``run_s`` (the whole trainer run: model building, mining, compilation, epochs)."""
    from whale.config import config_from_dict
    from whale.data import fold_data, load_competition
    from whale.training.trainer import Trainer

    epochs = args.interval + 1
    cfg = config_from_dict({
        "name": "bench", "seed": 0, "batch_size": args.batch_size, "mining_interval": epochs,
        "workers": args.workers, "precision": precision, "val_new_whale": False, "batching": batching,
        "model": {"branch": branch, "channels": channels, **({"stem": stem} if stem else {})},
        "stages": [{"epochs": epochs, "k": 1.0, "lr": 1.0e-4, "image_size": size, "dataset": "main"}]})
    timed = []

    class TimedTrainer(Trainer):
        def _fit_epoch(self, dataset, ep, negatives):
            t0 = time.perf_counter()
            hist = super()._fit_epoch(dataset, ep, negatives)
            timed.append((2 * len(dataset.pairs), time.perf_counter() - t0))
            return hist

    data = fold_data(load_competition(data_dir), -1, 0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        TimedTrainer(cfg, data, Path(out), verbose=0, log=lambda *_: None).run()
    if timings is not None:
        timings.update(first_epoch_s=timed[0][1], run_s=time.perf_counter() - t0)
    pairs = sum(p for p, _ in timed[1:])
    return _rate(pairs, sum(s for _, s in timed[1:]))


def main(argv=None) -> int:
    args = parse_args(argv)
    import keras

    from whale.data import fold_data, load_competition
    from whale.data.synth import generate
    from whale.models import precision_scope

    t_start = time.time()
    backend = keras.backend.backend()
    tmp = tempfile.TemporaryDirectory()
    data_dir = Path(args.data or Path(tmp.name) / "data")
    if not (data_dir / "train.csv").exists():
        generate(data_dir, n_ids=args.ids, seed=0, size=256, progress=False)
    data = fold_data(load_competition(data_dir), -1, 0)
    rows = []
    print(f"backend {backend}; batch {args.batch_size} pairs; {args.workers} workers; "
          f"{len(data.pairs)} pair images ({args.ids} synthetic ids)")
    print(f"{'branch':>12} {'stem':>6} {'size':>5} {'precision':>15} {'batching':>8} {'model':>9} {'pipeline':>9} "
          f"{'end_to_end':>10} {'e2e/model':>9}")
    stems = args.stems.split(",") if args.stems else [None]
    combos = [(b, s, int(z), p, m) for b in args.branches.split(",") for s in stems
              for z in args.sizes.split(",") for p in args.precisions.split(",") for m in args.batchings.split(",")]
    channels = args.channels
    for branch, stem, size, precision, batching in combos:
        keras.utils.set_random_seed(0)
        with precision_scope(precision):
            a = model_only(branch, size, channels, args.batch_size, args.steps, stem, batching)
        b = pipeline_only(data, size, channels, args.batch_size, args.steps, args.workers, batching)
        c = end_to_end(branch, size, channels, precision, args, data_dir, stem, batching)
        row = {"branch": branch, **({"stem": stem} if stem else {}), "image_size": size, "precision": precision,
               **({"batching": batching} if batching != "pairs" else {}),
               "model_pairs_s": round(a, 2), "pipeline_pairs_s": round(b, 2),
               "end_to_end_pairs_s": round(c, 2), "end_to_end_over_model": round(c / a, 3)}
        rows.append(row)
        print(f"{branch:>12} {stem or '-':>6} {size:>5} {precision:>15} {batching:>8} {a:9.1f} {b:9.1f} {c:10.1f} "
              f"{c / a:9.2f}", flush=True)
    for row in rows:  # images over pairs, end to end, for each combination measured both ways
        twin = next((r for r in rows if r.get("batching") is None and all(
            r.get(k) == row.get(k) for k in ("branch", "stem", "image_size", "precision"))), None)
        if row.get("batching") == "images" and twin:
            row["end_to_end_over_pairs"] = round(row["end_to_end_pairs_s"] / twin["end_to_end_pairs_s"], 3)
            print(f"batching images / pairs, end to end: {row['end_to_end_over_pairs']:.2f}x "
                  f"({row['branch']} {row['image_size']} px {row['precision']})")
    result = {"benchmark": "bench_train", "backend": backend, "device": _device(backend),
              "batch_size": args.batch_size, "workers": args.workers, "rates": rows,
              "seconds": round(time.time() - t_start, 1)}
    if args.out:
        from whale.core.files import write_json_atomic

        write_json_atomic(Path(args.out), result)
    tmp.cleanup()
    print(json.dumps(result))
    return 0


def _device(backend: str) -> str:
    if backend == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return gpus[0].name if gpus else "CPU"
    return backend


if __name__ == "__main__":
    raise SystemExit(main())
