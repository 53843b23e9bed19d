"""The VGG box regressor's two heads side by side: the paper's dense head vs the integral head. Not a test.

    python benchmarks/seeds/box_heads.py --out runs/bench_box_heads [--seeds 0,1,2] [--labels 1200]
                                   [--heads dense,integral] [--refine] [--set KEY=VALUE ...] [--quick]

On the same labelling competition and the same 1,200 labels as ``benchmarks/seeds/boxes.py`` (synthetic
seed 1, labels chosen with seed 7), for each seed (the box config's ``seed``: fold split and
initial weights) and each head (``vgg_head: dense``, the paper's four regressed outputs, and
``vgg_head: integral``, a soft argmax per edge; see :mod:`whale.boxes.vgg`), the VGG regressor is
cross-validated exactly as ``python -m whale.boxes train --model vgg`` does (``train_run``), with
``configs/boxes.yaml`` and the ``--set`` overrides, without the refiner (the heads alone).
With ``--refine`` the last head's run also trains the refiner (:mod:`whale.boxes.refine`, from
that head's boxes) and its cross-validated IoU is reported as one more row; when the config's
``refine_margins`` has several margins, the same fold refiners are also scored looking at the
training margin alone (one more row, and the gain of the margins over it). Prints the
cross-validated mean IoU per seed, the mean +- sd over seeds and the gains (integral - dense,
refined - head), and the training seconds of each row (its ratio to the first row's; the
refiner's row counts the refiner alone). The last line is one JSON object.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402
from benchmarks.seeds.boxes import label_subset  # noqa: E402

HEADS = ("dense", "integral")


def refined_one_margin(labels, run_dir: Path, start: str) -> float:
    """Cross-validated IoU of ``run_dir``'s fold refiners looking from ``start``'s out-of-fold boxes
    at the training margin alone (``refine_margins: null``): the side-by-side row for ``refine_margins``."""
    import dataclasses

    from whale.boxes.predict import load_run
    from whale.boxes.refine import load_images, refine_passes
    from whale.boxes.train import build_model, cv_summary

    cfg, files, _ = load_run(run_dir)
    oof = np.load(run_dir / "oof.npz")
    first, fold = oof[start], oof["fold"]
    one = dataclasses.replace(cfg, refine_margins=None)
    images = load_images(labels.paths)
    out = np.full_like(first, np.nan)
    for k, path in enumerate(files["refine"]):
        held = np.flatnonzero(fold == k)
        model = build_model("refine", cfg)
        model.load_weights(str(path))
        out[held] = refine_passes([model], [images[i] for i in held], first[held], one)
    return cv_summary(labels, {"one_margin": out})[0]["one_margin"]["mean_iou"]


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated box config seeds")
    p.add_argument("--labels", type=int, default=1200, help="labelled training images")
    p.add_argument("--box-config", default=str(common.repo_root() / "configs" / "boxes.yaml"))
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a box config key")
    p.add_argument("--heads", default=",".join(HEADS), help="comma-separated VGG heads (dense, integral)")
    p.add_argument("--refine", action="store_true",
                   help="also train the refiner on the last head's run (whale.boxes.refine) and report it")
    p.add_argument("--quick", action="store_true", help="tiny settings for development")
    args = p.parse_args(argv)
    t0 = time.time()
    common.setup_tensorflow()
    from whale.config.overrides import overrides
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
        extra.update(image_size=32, folds=2, epochs=1, cycle_epochs=1, vgg_width=0.0625, refine_size=32,
                     refine_epochs=1, refine_passes=1)
    seeds = [int(s) for s in args.seeds.split(",")]
    heads = [h for h in args.heads.split(",") if h]
    unknown = sorted(set(heads) - set(HEADS))
    if unknown:
        raise SystemExit(f"--heads: unknown {unknown}; expected some of {HEADS}")
    shipped = load_box_config(args.box_config, extra)
    margins = args.refine and len(shipped.refine_margins or ()) > 1
    # refined: the last head's run, its refiner; one_margin: the same refiners at the training margin alone
    rows = heads + (["refined"] if args.refine else []) + (["one_margin"] if margins else [])
    iou = {r: [] for r in rows}
    seconds = {r: 0.0 for r in rows}
    for seed in seeds:
        for head in heads:
            refine = args.refine and head == heads[-1]
            cfg = load_box_config(args.box_config, {**extra, "seed": seed, "vgg_head": head, "refine": refine})
            t = time.time()
            meta = train_run(cfg, labels, out / f"{head}_seed{seed}", ("vgg",), log=lambda *_: None)
            seconds[head] += meta["seconds"]["vgg"]
            iou[head].append(meta["cv"]["vgg"]["mean_iou"])
            print(f"seed {seed}, {head} head: cross-validated mean IoU {iou[head][-1]:.4f} "
                  f"({cfg.folds} folds, {cfg.epochs} epochs, {cfg.image_size} px, {meta['seconds']['vgg']:.0f} s)",
                  flush=True)
            if refine:
                seconds["refined"] += meta["seconds"]["refine"]
                iou["refined"].append(meta["cv"]["refined"]["mean_iou"])
                print(f"seed {seed}, {head} head + refiner: cross-validated mean IoU {iou['refined'][-1]:.4f} "
                      f"({cfg.refine_epochs} refiner epochs at {cfg.refine_size} px, {cfg.refine_passes} passes, "
                      f"{meta['seconds']['refine']:.0f} s more; {time.time() - t:.0f} s in all)", flush=True)
            if refine and margins:
                iou["one_margin"].append(refined_one_margin(labels, out / f"{head}_seed{seed}", meta["refine_from"]))
                print(f"seed {seed}, {head} head + refiner at margin {cfg.refine_margin} alone: cross-validated "
                      f"mean IoU {iou['one_margin'][-1]:.4f} (margins {list(cfg.refine_margins)}: "
                      f"{iou['refined'][-1]:.4f})", flush=True)
    stats = {r: common.mean_sd(iou[r]) for r in rows}
    base = rows[0]
    names = {"refined": f"{heads[-1]} + refiner" + (f", margins {list(shipped.refine_margins)}" if margins else ""),
             "one_margin": f"{heads[-1]} + refiner, margin {shipped.refine_margin} alone (same refiners)"}
    print(common.results_table(
        [{"head": names.get(r, r), "iou": stats[r]["mean"], "sd": stats[r]["sd"],
          "s": round(seconds[r]), "ratio": seconds[r] / seconds[base]} for r in rows],
        [("head", f"VGG head ({len(seeds)} seeds, {len(labels.names)} labels)"),
         ("iou", "cross-validated mean IoU"), ("sd", "sd over seeds"), ("s", "seconds (all seeds)"),
         ("ratio", f"time / {base}'s")]))
    metrics = {f"iou_{r}": stats[r]["mean"] for r in rows}
    metrics.update({f"iou_{r}_sd": stats[r]["sd"] for r in rows})
    metrics.update({f"seconds_{r}": round(seconds[r], 1) for r in rows})
    for a, b, key in (("integral", "dense", "gain"), ("refined", heads[-1], "gain_refined"),
                      ("refined", "one_margin", "gain_margins")):
        if a in iou and b in iou and a != b:
            g = common.mean_sd(np.subtract(iou[a], iou[b]))
            print(f"{a} - {b}: {g['mean']:+.4f} +- {g['sd']:.4f} (mean +- sd over {len(seeds)} seeds)")
            metrics.update({key: g["mean"], f"{key}_sd": g["sd"]})
    metrics["seeds"] = seeds
    print(common.final_json("box_heads", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
