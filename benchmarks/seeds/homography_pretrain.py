"""Homography pairs as self-supervised pre-training: with vs without, same optimiser steps. Not a test.

    python benchmarks/seeds/homography_pretrain.py --out runs/bench_homopre [--sets synthetic,omniglot]
        [--seeds 0,1,2] [--fractions 0.25,0.5] [--epochs-scale F] [--ids N] [--size PX] [--quick]

Per set and seed, the paper's head (``objective: head``) trains fold 0 of the set's training data under
its config (``--epochs-scale`` x every stage) three ways at **the same number of optimiser steps**:

* ``none``: the config's schedule;
* ``homography f`` (each ``f`` of ``--fractions``): a ``dataset: homography`` stage first (the first
  stage's learning rate and image size, :mod:`whale.data.unlabelled`: two random homographies of one
  photo = positive, two photos = negative, then the usual augmentation; ``homography.R`` and ``phi`` at
  their defaults), whose steps are taken from the first stage's: that stage keeps ``(1 - f)`` of its
  epochs and the homography stage gets the steps of the other ``f`` (whole epochs of its own photos,
  rounded up: the optimiser steps each run took are printed beside it).

The stage length ``f`` is chosen on **validation** only: the ``f`` with the highest mean over the seeds
of the run's best validation MAP@5 (fold 0 of the training data, the checkpoint the run keeps); test
figures of every ``f`` are printed too, labelled. Sets (``benchmarks/seeds/objectives.py``'s):

* ``synthetic``: the demo's competition (``--ids``, ``--size``, data seed = seed), ``configs/demo.yaml``;
  the homography photos are the default: the test images and the ``new_whale`` training images outside
  fold 0's validation (transductive use of the unlabelled test images, as on Kaggle). Test MAP@5.
* ``omniglot``: the leak-free protocol (characters never trained on); the homography photos are the
  training images of fold 0 (labels dropped: no image the labelled stages do not see, none of the
  evaluation characters). 20-way one-shot accuracy and MAP@5 on the held-out characters.

Results go to ``OUT/results.json`` as each run ends (a killed benchmark resumes: finished rows kept, run
folders resumed); the last lines print the tables and one JSON object.
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402
from benchmarks.seeds import objectives  # noqa: E402

SETS = ("synthetic", "omniglot")
METRICS = {"synthetic": ("map5", "val_map5"), "omniglot": ("one_shot", "map5", "val_map5")}


def steps_per_epoch(pair_images: int, batch_size: int) -> int:
    """Optimiser steps of one epoch of a pair objective: ``ceil(2 n / B)``."""
    return math.ceil(2 * pair_images / batch_size)


def with_homography(cfg, fraction: float, main_images: int, photos: list[str] | None):
    """``cfg`` with a ``dataset: homography`` stage first, its steps taken from the first stage (module doc).

    ``main_images``: fold 0's training images with a partner (``FoldData.pairs``); ``photos``: the
    ``homography.photos`` folders (None: the default photos).
    """
    from whale.config import config_from_dict

    d = cfg.to_dict()
    first = d["stages"][0]
    moved = max(1, int(round(fraction * first["epochs"])))
    if moved >= first["epochs"]:
        raise ValueError(f"fraction {fraction}: the first stage has {first['epochs']} epochs, too few to give {moved}")
    first["epochs"] -= moved
    steps = moved * steps_per_epoch(main_images, cfg.batch_size)
    stage = {"steps": steps, "lr": first["lr"], "image_size": first["image_size"], "dataset": "homography"}
    d["stages"] = [stage, *d["stages"]]
    d["name"] = f"{cfg.name}-homography{fraction:g}"
    if photos:
        d["homography"] = {"photos": photos}
    return config_from_dict(d, source=d["name"])


def run_steps(run_dir: Path, main_images: int, views: int, batch_size: int) -> int:
    """Optimiser steps a finished run took: its sized stages' epochs x steps per epoch of their dataset
    (``views``: the homography stage's training images, two per photo)."""
    from whale.config import load_config

    cfg = load_config(run_dir / "config.yaml")
    return sum(s.epochs * steps_per_epoch(views if s.dataset == "homography" else main_images, batch_size)
               for s in cfg.stages)


def omniglot_photos(train_dir: Path, seed: int, out: Path) -> Path:
    """A folder of links to fold 0's training images of ``train_dir`` (no validation image, no labels)."""
    from whale.data import fold_data, load_competition

    data = fold_data(load_competition(train_dir), 0, seed)
    out.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(data.gallery.paths):
        link = out / f"{i:05d}{Path(path).suffix}"
        if not link.exists():
            os.symlink(Path(path).resolve(), link)
    return out


def run_one(set_name: str, variant: str, seed: int, args, sets: dict, log) -> dict:
    from whale.data import fold_data, load_competition
    from whale.data.unlabelled import homography_views

    out = Path(args.out) / set_name / f"seed{seed}"
    if (set_name, seed) not in sets:
        sets[(set_name, seed)] = objectives.make_set(set_name, out, seed, args)
    data = sets[(set_name, seed)]
    base = objectives.objective_config(common.repo_root() / "configs" / objectives.CONFIGS[set_name], "head",
                                       seed, args.epochs_scale)
    comp = load_competition(data.train_dir)
    fold = fold_data(comp, 0, seed, val_new_whale=base.val_new_whale)
    if variant == "none":
        cfg = base
    else:
        photos = [str(omniglot_photos(data.train_dir, seed, out / "photos"))] if set_name == "omniglot" else None
        cfg = with_homography(base, float(variant), len(fold.pairs), photos)
    run_dir = out / f"homography{variant}" if variant != "none" else out / "none"
    views = homography_views(cfg, comp, fold.val.names, log=lambda m: None)
    t0 = time.time()
    trained = _train(cfg, data.train_dir, run_dir)
    method = common.SiameseMethod(run_dir, "head")
    row = {k: float(v) for k, v in data.evaluate(method).items() if k in METRICS[set_name]}
    row.update(set=set_name, variant=variant, seed=seed, train_val_map5=trained.best_val_map5,
               steps=run_steps(run_dir, len(fold.pairs), len(views.pairs) if views else 0, cfg.batch_size),
               homography_photos=len(views.pairs) // 2 if views else 0,
               train_s=round(trained.seconds, 1), seconds=round(time.time() - t0, 1))
    log(f"{set_name} seed {seed} homography {variant}: " + ", ".join(
        f"{k} {row[k]:.3f}" for k in METRICS[set_name]) + f", train val MAP@5 {row['train_val_map5']:.3f}, "
        f"{row['steps']} steps, {row['seconds']:.0f} s")
    return row


def _train(cfg, train_dir: Path, run_dir: Path) -> common.Variant:
    from whale.training.trainer import train_fold

    t0 = time.time()
    res = train_fold(cfg, train_dir, 0, run_dir, resume=True, verbose=0, log=lambda m: None)
    return common.Variant(run_dir.name, run_dir, res.best_val_map5, time.time() - t0, res.epochs_done,
                          res.epochs_total)


def summary(rows: list[dict], fractions: list[str]) -> tuple[str, dict]:
    """Per set: the stage length chosen on validation, and a table of mean +- sd and per-seed figures."""
    lines, out = [], {}
    for set_name in SETS:
        mine = [r for r in rows if r["set"] == set_name]
        if not mine:
            continue
        val = {f: common.mean_sd([r["train_val_map5"] for r in mine if r["variant"] == f])["mean"]
               for f in fractions if any(r["variant"] == f for r in mine)}
        chosen = max(val, key=val.get) if val else None
        keys = (*METRICS[set_name], "train_val_map5", "steps")
        lines += [f"### {set_name}" + (f" (homography stage length chosen on validation: f = {chosen})"
                                       if chosen else ""), "",
                  "| variant | seeds | " + " | ".join(keys) + " | per seed (" + METRICS[set_name][0] + ") |",
                  "| --- | --- | " + " | ".join("---" for _ in keys) + " | --- |"]
        for variant in ["none", *fractions]:
            these = sorted((r for r in mine if r["variant"] == variant), key=lambda r: r["seed"])
            if not these:
                continue
            stats = {k: common.mean_sd([r[k] for r in these]) for k in keys}
            label = "none" if variant == "none" else f"homography f={variant}" + (
                " (chosen)" if variant == chosen else " (not chosen)")
            out[f"{set_name}/{variant}"] = {**stats, "seeds": [r["seed"] for r in these],
                                            "per_seed": {k: [r[k] for r in these] for k in keys}}
            cells = [f"{stats[k]['mean']:.3f} +- {stats[k]['sd']:.3f}" if k != "steps" else f"{stats[k]['mean']:.0f}"
                     for k in keys]
            per_seed = ", ".join(f"{r['seed']}: {r[METRICS[set_name][0]]:.3f}" for r in these)
            lines.append(f"| {label} | {len(these)} | " + " | ".join(cells) + f" | {per_seed} |")
        out[f"{set_name}/chosen"] = chosen
        lines.append("")
    return "\n".join(lines), out


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (data, run folders, results.json)", seeds="0,1,2",
                       seeds_help="comma-separated seeds (data split and training)", report=True)
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from {', '.join(SETS)}")
    p.add_argument("--fractions", default="0.25,0.5", help="homography stage lengths to choose from on validation "
                   "(share of the first stage's steps)")
    p.add_argument("--epochs-scale", type=float, default=1.0, help="every stage's length x F")
    p.add_argument("--ids", type=int, default=200, help="identities of the synthetic competition")
    p.add_argument("--size", type=int, default=256, help="image side of the synthetic competition")
    p.add_argument("--quick", action="store_true", help="small sets (Omniglot 8 drawers, 30 ids at 96 px) and "
                   "0.1 of the epochs")
    args = p.parse_args(argv)
    t0 = time.time()
    sets_wanted = [s for s in args.sets.split(",") if s]
    fractions = [f for f in args.fractions.split(",") if f]
    if [s for s in sets_wanted if s not in SETS] or not all(0 < float(f) < 1 for f in fractions):
        p.error(f"--sets from {', '.join(SETS)}; --fractions in (0, 1)")
    results = harness.RowFile(Path(args.out) / "results.json", ("set", "variant", "seed"))
    if args.report:
        return harness.finish("homography_pretrain", results.rows(), lambda rows: summary(rows, fractions))
    if args.quick:
        args.ids, args.size, args.epochs_scale = min(args.ids, 30), min(args.size, 96), args.epochs_scale * 0.1
    common.setup_tensorflow()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    sets: dict = {}
    jobs = [harness.Job((set_name, variant, seed), lambda s=set_name, v=variant, seed=seed: run_one(
                s, v, seed, args, sets, lambda m: print(m, flush=True)), set_name)
            for set_name in sets_wanted for seed in harness.seed_list(args.seeds) for variant in ["none", *fractions]]
    rows = harness.run_jobs(results, jobs, args=vars(args))
    return harness.finish("homography_pretrain", rows, lambda rows: summary(rows, fractions), seconds=time.time() - t0)


if __name__ == "__main__":
    sys.exit(main())
