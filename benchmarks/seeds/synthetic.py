"""Miner ablation on the synthetic competition of ``make demo``. Not a test.

    python benchmarks/seeds/synthetic.py --out runs/bench_synthetic [--ids 200] [--seed 0] [--quick]
                                   [--batching pairs|images] [--epochs-scale F] [--boxes CSV]

Generates (or reuses) the synthetic competition in ``OUT/data``, then measures, in one run:
the raw-pixel cosine nearest neighbour on box crops; the ``configs/demo.yaml`` model trained
with random negatives only (K = 1000 in every stage, same epochs and learning rates); and the
same model under the config's adversarial schedule (Algorithm 1, K decaying to 0.05).
Thresholds are tuned on validation fold 0; test MAP@5 is scored against the synthetic truth.
``--boxes CSV`` crops every image with those boxes (e.g. predicted by ``benchmarks/seeds/boxes.py
--demo-runs``) for training, the baseline and scoring alike: the whole pipeline on predicted boxes.
Prints a table, a verdict on the miner, and as its last line one JSON object.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (data, run folders)")
    p.add_argument("--ids", type=int, default=200, help="ids of the synthetic competition")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the training")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "demo.yaml"))
    p.add_argument("--quick", action="store_true", help="reduced settings for development")
    p.add_argument("--batching", choices=("pairs", "images"), help="override the config's batching")
    p.add_argument("--epochs-scale", type=float, help="every stage's length x F (rounded, at least 1)")
    p.add_argument("--boxes", metavar="CSV", help="train and score on these boxes instead of the true ones "
                   "(a copy of the competition in OUT/data_boxes; '{seed}' in the name is the seed), e.g. "
                   "benchmarks/seeds/boxes.py's predicted_bounding_boxes_{seed}.csv")
    harness.add_seed_arguments(p)
    args = p.parse_args(argv)
    t0 = time.time()
    if args.seeds:
        return harness.several_seeds(
            Path(__file__), args, argv if argv is not None else sys.argv[1:], SEED_KEYS, "synthetic",
            f"Synthetic competition ({args.ids} ids), test MAP@5, config {args.config}", t0)

    cfg, out = common.prepare(args)
    if args.batching or args.epochs_scale:
        cfg = variant_config(cfg, args.batching, args.epochs_scale)
        print(f"config {args.config} with batching {cfg.batching}, stages of "
              + ", ".join(str(st.epochs) for st in cfg.stages) + " epochs")
    from whale.data import load_competition
    from whale.demo import ensure_competition, pixel_baseline, submission_from_run, truth
    from whale.metrics import map_at_k
    from whale.data import fold_data

    data_dir = ensure_competition(out / "data", n_ids=args.ids, seed=args.seed)
    if args.boxes:
        boxes_csv = Path(args.boxes.format(seed=args.seed))
        data_dir = common.with_boxes(data_dir, boxes_csv, out / "data_boxes")
        print(f"boxes: {boxes_csv} (not the generator's true boxes)")
    comp = load_competition(data_dir)
    pix_val, pix_test, _ = pixel_baseline(comp, fold_data(comp, 0, cfg.seed))
    rows = [{"method": "pixel NN (cosine)", "val_map5": pix_val, "map5": pix_test}]
    actual = truth(data_dir, comp.test_images)
    methods = tuple(m for m in args.methods.split(",") if m)
    for v in common.train_variants(cfg, data_dir, out / "runs", methods=methods):
        val_map, t, preds = submission_from_run(v.run_dir, comp, v.run_dir / "submission.csv")
        rows.append({"method": f"siamese, {v.label} negatives", "val_map5": val_map,
                     "map5": map_at_k(preds, actual), "threshold": t, "train_s": round(v.seconds),
                     "epochs": f"{v.epochs_done}/{v.epochs_total}"})

    print()
    print(f"Synthetic competition {data_dir} ({args.ids} ids, seed {args.seed}); fold 0"
          f"{' (--quick)' if args.quick else ''}")
    print(common.results_table(rows, [("method", "method"), ("map5", "test MAP@5"),
                                      ("val_map5", "val MAP@5"), ("threshold", "threshold"),
                                      ("epochs", "epochs"), ("train_s", "train s")]))
    metrics = {"map5_pixel": rows[0]["map5"], "val_map5_pixel": rows[0]["val_map5"], "quick": bool(args.quick)}
    for label, r in zip(methods, rows[1:]):
        metrics.update({f"map5_{label}": r["map5"], f"val_map5_{label}": r["val_map5"],
                        f"train_s_{label}": r["train_s"], f"epochs_{label}": r["epochs"]})
    metrics = common.with_miner_gaps(metrics)
    if "miner_gap_map5" in metrics:
        print(common.miner_verdict(metrics["map5_adversarial"], metrics["map5_random"], "test MAP@5"))
    print(common.final_json("synthetic", metrics, time.time() - t0))
    return 0


def variant_config(cfg, batching: str | None = None, epochs_scale: float | None = None):
    """``cfg`` with ``batching`` (when given) and every stage's length x ``epochs_scale`` (when given)."""
    from whale.config import config_from_dict

    cfg = config_from_dict({**cfg.to_dict(), "batching": batching or cfg.batching}, source=cfg.name)
    return common.quick_config(cfg, epochs_scale, label=f"epochs x {epochs_scale:g}") if epochs_scale else cfg


SEED_KEYS = [("map5_adversarial", "test MAP@5 adversarial"), ("map5_random", "test MAP@5 random"),
             ("map5_pixel", "test MAP@5 pixels"), ("miner_gap_map5", "miner gap test MAP@5"),
             ("val_map5_adversarial", "val MAP@5 adversarial"), ("val_map5_random", "val MAP@5 random"),
             ("train_s_adversarial", "train s adv."), ("train_s_random", "train s random")]


if __name__ == "__main__":
    sys.exit(main())
