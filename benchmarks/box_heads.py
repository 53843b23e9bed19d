"""The VGG box regressor's two heads side by side: the paper's dense head vs the integral head. Not a test.

    python benchmarks/box_heads.py --out runs/bench_box_heads [--seeds 0,1,2] [--labels 1200]
                                   [--set KEY=VALUE ...] [--quick]

On the same labelling competition and the same 1,200 labels as ``benchmarks/boxes.py`` (synthetic
seed 1, labels chosen with seed 7), for each seed (the box config's ``seed``: fold split and
initial weights) and each head (``vgg_head: dense``, the paper's four regressed outputs, and
``vgg_head: integral``, a soft argmax per edge; see :mod:`whale.boxes.vgg`), the VGG regressor is
cross-validated exactly as ``python -m whale.boxes train --model vgg`` does (``train_run``), with
``configs/boxes.yaml`` and the ``--set`` overrides. Prints the cross-validated mean IoU per seed,
the mean +- sd over seeds and the gain of the integral head, and the seconds each head took (its
ratio to the dense head's). The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.boxes import label_subset  # noqa: E402

HEADS = ("dense", "integral")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="work folder")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated box config seeds")
    p.add_argument("--labels", type=int, default=1200, help="labelled training images")
    p.add_argument("--box-config", default=str(common.repo_root() / "configs" / "boxes.yaml"))
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a box config key")
    p.add_argument("--quick", action="store_true", help="tiny settings for development")
    args = p.parse_args(argv)
    t0 = time.time()
    common.setup_tensorflow()
    from whale.boxes.cli import overrides
    from whale.boxes.config import load_box_config
    from whale.boxes.labels import read_labels
    from whale.boxes.train import train_run
    from whale.data.synth import generate

    out = Path(args.out)
    lab_dir = out / "labelling"
    if not (lab_dir / "train.csv").exists():
        generate(lab_dir, n_ids=24 if args.quick else 240, seed=1, progress=False)
    n_labels = min(args.labels, 60) if args.quick else args.labels
    labels = read_labels(label_subset(lab_dir, n_labels, 7, out / "labels.csv"), lab_dir)
    extra = overrides(args.set)
    if args.quick:
        extra.update(image_size=32, folds=2, epochs=1, cycle_epochs=1, vgg_width=0.0625)
    seeds = [int(s) for s in args.seeds.split(",")]
    iou = {h: [] for h in HEADS}
    seconds = {h: 0.0 for h in HEADS}
    for seed in seeds:
        for head in HEADS:
            cfg = load_box_config(args.box_config, {**extra, "seed": seed, "vgg_head": head})
            t = time.time()
            meta = train_run(cfg, labels, out / f"{head}_seed{seed}", ("vgg",), log=lambda *_: None)
            seconds[head] += time.time() - t
            iou[head].append(meta["cv"]["vgg"]["mean_iou"])
            print(f"seed {seed}, {head} head: cross-validated mean IoU {iou[head][-1]:.4f} "
                  f"({cfg.folds} folds, {cfg.epochs} epochs, {cfg.image_size} px, {time.time() - t:.0f} s)",
                  flush=True)
    stats = {h: common.mean_sd(iou[h]) for h in HEADS}
    gain = common.mean_sd(np.subtract(iou["integral"], iou["dense"]))
    print(common.results_table(
        [{"head": h, "iou": stats[h]["mean"], "sd": stats[h]["sd"], "s": round(seconds[h]),
          "ratio": seconds[h] / seconds["dense"]} for h in HEADS],
        [("head", f"VGG head ({len(seeds)} seeds, {len(labels.names)} labels)"),
         ("iou", "cross-validated mean IoU"), ("sd", "sd over seeds"), ("s", "seconds (all seeds)"),
         ("ratio", "time / dense head's")]))
    print(f"integral - dense: {gain['mean']:+.4f} +- {gain['sd']:.4f} (mean +- sd over {len(seeds)} seeds)")
    metrics = {f"iou_{h}": stats[h]["mean"] for h in HEADS}
    metrics.update({f"iou_{h}_sd": stats[h]["sd"] for h in HEADS})
    metrics.update(gain=gain["mean"], gain_sd=gain["sd"], seeds=seeds,
                   seconds_dense=round(seconds["dense"], 1), seconds_integral=round(seconds["integral"], 1))
    print(common.final_json("box_heads", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
