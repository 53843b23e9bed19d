"""Box models on the synthetic competition (true boxes known): cross-validated IoU, then MAP@5 with predicted boxes. Not a test.

    python benchmarks/seeds/boxes.py --out runs/bench_boxes [--labels 1200] [--demo-scale 0.25] [--quick]
                               [--set KEY=VALUE ...] [--no-probe] [--demo-runs RUN [RUN ...]]
                               [--tta VIEW,VIEW,...]

In one run:

1. a *labelling* competition (synthetic, seed 1, 240 ids, ~1,207 training images) from which
   ``--labels`` training images (1,200, like the paper's hand-labelled set) get their true box;
2. ``configs/boxes.yaml`` (overridable with ``--set``) trained on them: 4-fold cross-validated
   mean IoU of the VGG regressor, the keras-cv RetinaNet and their average (and, with
   ``refine: true``, of the refined average: :mod:`whale.boxes.refine`);
3. boxes predicted (all fold models, both detectors, averaged, refined if trained) for every train and test image
   of the demo's competition (seed 0, 200 ids; none of its images was labelled), their IoU
   against the true boxes, and the number of whole-image fallbacks;
4. the demo's model (``configs/demo.yaml``, each stage's epochs times ``--demo-scale``: a
   shortened schedule, labelled as such) trained once on fold 0 with the true boxes, then
   validation and test MAP@5 scored twice with that same model: crops from the true boxes and
   crops from the predicted boxes (threshold tuned on validation fold 0 under the same boxes).
   The difference isolates what the boxes cost; training on predicted boxes is
   ``benchmarks/seeds/synthetic.py --boxes`` (with this run's ``predicted_bounding_boxes*.csv``).
   ``--demo-runs RUN [RUN ...]`` scores trained runs instead (e.g. the full demo config on 3 seeds
   from ``benchmarks/seeds/synthetic.py``): each on its own competition (``run.json``: data, fold), with
   boxes predicted for that competition, and the mean +- sd of the MAP@5 gaps. ``--tta
   shift_left,shift_right,zoom`` scores every run a second time, true and predicted boxes alike,
   with those test-time views' features averaged (a run's ``tta`` key; :data:`whale.config.TTA_VIEWS`).

The labelled images never include an image whose bytes are in a scored competition (checked
here: the synthetic generator can repeat an image across seeds).

Prints wall and CPU seconds per step and, last, one JSON line. First, the machine's speed in the
same run (``--no-probe`` skips it): images/s of the refiner's training step under each Keras backend
installed (TensorFlow, JAX), each in its own subprocess, so that a time can be read against the
machine it ran on. On a 2-core CPU the box models' cross-validation ran in about half the time under
JAX (``KERAS_BACKEND=jax python benchmarks/seeds/boxes.py ...``; README, "Bounding boxes").
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def probe_rate(box_config: str, extra: dict, steps: int = 30) -> float:
    """Images/s of the refiner's training step (``train_on_batch`` on a fixed batch) in this process's backend."""
    from whale.boxes.config import load_box_config
    from whale.boxes.train import build_model

    cfg = load_box_config(box_config, extra)
    model = build_model("refine", cfg, steps_per_epoch=steps)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (cfg.batch_size, cfg.refine_size, cfg.refine_size, 3)).astype(np.float32)
    y = np.tile(np.array([[0.2, 0.3, 0.7, 0.8]], np.float32), (cfg.batch_size, 1))
    model.train_on_batch(x, y)  # tracing and compilation
    t = time.perf_counter()
    for _ in range(steps):
        loss = model.train_on_batch(x, y)
    np.asarray(loss)
    return steps * cfg.batch_size / (time.perf_counter() - t)


def backend_rates(argv_sets: list[str] | None, box_config: str) -> dict[str, float]:
    """:func:`probe_rate` under each Keras backend that imports here, each in a fresh subprocess."""
    import subprocess

    rates = {}
    for backend in ("tensorflow", "jax"):
        cmd = [sys.executable, __file__, "--out", "-", "--probe", "--box-config", box_config]
        for kv in argv_sets or []:
            cmd += ["--set", kv]
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode == 0:
            rates[backend] = float(res.stdout.strip().splitlines()[-1])
        else:
            print(f"probe under {backend} failed: {res.stderr.strip().splitlines()[-1:]}")
    return rates


def label_subset(comp_dir: Path, n: int, seed: int, out_csv: Path, unseen: set[str] = frozenset()) -> Path:
    """``n`` training images of ``comp_dir`` (seeded choice) with their true boxes, as a labels CSV.

    Images whose bytes' digest (:func:`common.byte_digests`) is in ``unseen`` (the scored
    competitions' images) are never chosen; how many were left out is printed.
    """
    from whale.boxes.predict import write_boxes_csv
    from whale.data import load_competition

    comp = load_competition(comp_dir)
    every = list(comp.train["Image"])
    digests = common.byte_digests([comp.train_path(m) for m in every])
    names = [m for m, d in zip(every, digests) if d not in unseen]
    if n > len(names):
        raise SystemExit(f"--labels {n}: the labelling competition has only {len(names)} training images "
                         "not in a scored competition")
    print(f"labels: {n} of the labelling competition's {len(every)} training images; "
          f"{len(every) - len(names)} left out (byte-identical to a scored image)")
    pick = sorted(np.random.default_rng(seed).choice(len(names), n, replace=False))
    return write_boxes_csv(out_csv, [names[i] for i in pick], np.array([comp.boxes[names[i]] for i in pick]))


def competition_digests(comp_dir: Path) -> set[str]:
    """Digests of every training and test image of a competition folder."""
    from whale.data import load_competition

    comp = load_competition(comp_dir)
    paths = [comp.train_path(m) for m in comp.train["Image"]] + [comp.test_path(m) for m in comp.test_images]
    return set(common.byte_digests(paths))


def scored_runs(run_dirs: list[str]) -> list[dict]:
    """``{"run", "data", "fold"}`` of each ``--demo-runs`` folder, from its ``run.json``."""
    from whale.training.runlog import read_run_json

    runs = []
    for r in run_dirs:
        meta = read_run_json(Path(r))
        if meta is None:
            raise SystemExit(f"--demo-runs {r}: no run.json there (not a run folder)")
        data = Path(meta["data"])
        if not (data / "train.csv").is_file():
            raise SystemExit(f"--demo-runs {r}: the competition it trained on ({data}, run.json 'data') is missing")
        if int(meta["fold"]) < 0:
            raise SystemExit(f"--demo-runs {r}: trained on fold -1 (every image): no validation fold to score")
        runs.append({"run": Path(r), "data": data, "fold": int(meta["fold"])})
    return runs


def map_with_boxes(run_dir: Path, comp, fold: int = 0, views: tuple[str, ...] = ()) -> tuple[float, float]:
    """``(validation, test)`` MAP@5 of a trained run (checkpoint ``best``), crops cut with ``comp``'s boxes.

    The validation fold is the run's (``fold``, the run's config's seed and ``val_new_whale``);
    ``views``: test-time views whose features are averaged with the plain crop's.
    """
    from whale.data import ImageSet, fold_data
    from whale.demo import truth
    from whale.inference.runs import RunScorer, load_run_model
    from whale.metrics import map_at_k
    from whale.ranking import predict_top5, tune_threshold

    model, cfg = load_run_model(run_dir, "best")
    rs = RunScorer(model, cfg.model.channels, cfg.box_margin, verbose=False, views=tuple(views))
    data = fold_data(comp, fold, cfg.seed, val_new_whale=cfg.val_new_whale)
    known = ImageSet.known(comp)
    f_known = rs.features(known.paths, known.boxes)  # [mirrors, views, n, d]
    f_val = rs.features(data.val.paths, data.val.boxes)
    val = rs.matrix(f_val, f_known[..., known.positions(data.gallery.names), :]).astype(np.float32)
    t, val_map, _ = tune_threshold(val, data.gallery.ids, data.val.ids)
    test = ImageSet.test(comp)
    preds = predict_top5(rs.matrix(rs.features(test.paths, test.boxes), f_known).astype(np.float32), known.ids, t)
    return float(val_map), float(map_at_k(preds, truth(comp.root, comp.test_images)))


def tta_views(text: str) -> tuple[str, ...]:
    """``--tta``'s comma-separated views, each one of :data:`whale.config.TTA_VIEWS`."""
    from whale.config import TTA_VIEWS

    views = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in views if v not in TTA_VIEWS]
    if bad or not views:
        raise argparse.ArgumentTypeError(f"{text!r}: expected views from {', '.join(TTA_VIEWS)}, comma-separated")
    return views


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder")
    p.add_argument("--labels", type=int, default=1200, help="labelled training images")
    p.add_argument("--box-config", default=str(common.repo_root() / "configs" / "boxes.yaml"))
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a box config key")
    p.add_argument("--demo-scale", type=float, default=0.25, help="demo.yaml epochs x this (shortened)")
    p.add_argument("--quick", action="store_true", help="tiny settings for development")
    p.add_argument("--no-probe", action="store_true", help="skip the per-backend speed probe")
    p.add_argument("--demo-runs", nargs="+", metavar="RUN", help="score these trained runs (each on the "
                   "competition its run.json names) instead of training the shortened demo model")
    p.add_argument("--tta", type=tta_views, default=(), metavar="VIEW,VIEW,...",
                   help="also score with these test-time views (e.g. shift_left,shift_right,zoom)")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the probe's subprocess
    args = p.parse_args(argv)
    t0, c0 = time.time(), cpu_seconds()
    common.setup_tensorflow()
    from whale.config.overrides import overrides

    if args.probe:
        print(f"{probe_rate(args.box_config, overrides(args.set)):.2f}")
        return 0
    t = time.time()
    rates = {} if args.no_probe else backend_rates(args.set, args.box_config)
    import keras

    backend = keras.backend.backend()
    print(f"backend {backend}; this machine's refiner train step: "
          + ", ".join(f"{b} {r:.0f} img/s" for b, r in rates.items()) + f" [probe: {time.time() - t:.0f} s wall]",
          flush=True)
    from whale.boxes import geometry
    from whale.boxes.config import load_box_config
    from whale.boxes.labels import read_labels
    from whale.boxes.predict import predict_boxes, write_boxes_csv
    from whale.boxes.train import train_run
    from whale.config import load_config
    from whale.data import load_competition
    from whale.data.synth import generate
    from whale.training.trainer import train_fold

    out = Path(args.out)
    steps = {}

    def step(name, t, c):
        steps[name] = (round(time.time() - t, 1), round(cpu_seconds() - c, 1))
        print(f"[{name}: {steps[name][0]:.0f} s wall, {steps[name][1]:.0f} s CPU]", flush=True)

    t, c = time.time(), cpu_seconds()
    lab_dir, demo_dir = out / "labelling", out / "demo_data"
    if not (lab_dir / "train.csv").exists():
        generate(lab_dir, n_ids=240, seed=1)
    runs = scored_runs(args.demo_runs) if args.demo_runs else None
    if runs is None and not (demo_dir / "train.csv").exists():
        generate(demo_dir, n_ids=200, seed=0)
    comp_dirs = list(dict.fromkeys(r["data"].resolve() for r in runs)) if runs else [demo_dir.resolve()]
    unseen = set().union(*(competition_digests(d) for d in comp_dirs))
    labels_csv = label_subset(lab_dir, args.labels, 7, out / "labels.csv", unseen)
    step("data", t, c)

    extra = overrides(args.set)
    if args.quick:
        extra.update(folds=2, epochs=1, cycle_epochs=1, refine_epochs=1)
    cfg = load_box_config(args.box_config, extra)
    t, c = time.time(), cpu_seconds()
    meta = train_run(cfg, read_labels(labels_csv, lab_dir), out / "box_run", ("vgg", "retinanet"))
    step("box models (cross-validation)", t, c)

    t, c = time.time(), cpu_seconds()
    final = "refined" if cfg.refine else "average"
    predicted, iou_rows, first_ious, fallbacks = {}, [], None, 0
    for i, comp_dir in enumerate(comp_dirs):
        tag = "" if runs is None else f"_{i}"
        comp = load_competition(comp_dir)
        names = list(comp.train["Image"]) + list(comp.test_images)
        paths = [comp.train_path(n) for n in comp.train["Image"]] + [comp.test_path(n) for n in comp.test_images]
        pred = predict_boxes(out / "box_run", paths, progress=False)
        true = np.array([comp.boxes[n] for n in names])
        per_model = dict(pred.per_model)
        per_model["average"] = geometry.average([u for k, u in pred.per_model.items() if k != "refined"])
        ious = {k: float(geometry.iou(geometry.to_pixels(u, pred.sizes)[0], true).mean()) for k, u in per_model.items()}
        ious[final] = float(geometry.iou(pred.boxes, true).mean())
        first_ious = first_ious or ious
        fallbacks += int(pred.fallback.sum())
        where = "the demo's" if runs is None else f"{comp_dir.name if comp_dir.name != 'data' else comp_dir.parent.name}'s"
        iou_rows += [{"what": f"{k}: IoU on {where} {len(names)} unlabelled images", "iou": v,
                      "fallbacks": int(pred.fallback.sum()) if k == final else None}
                     for k, v in ious.items()]
        boxes_csv = write_boxes_csv(out / f"predicted_bounding_boxes{tag}.csv", names, pred.boxes)
        predicted[comp_dir] = common.with_boxes(comp_dir, boxes_csv, out / f"demo_data_predicted{tag}")
    step("predict the scored folders", t, c)

    if runs is None:
        t, c = time.time(), cpu_seconds()
        demo_cfg = common.quick_config(load_config(common.repo_root() / "configs" / "demo.yaml"), args.demo_scale)
        if args.quick:
            demo_cfg = common.quick_config(demo_cfg, 0.01)
        train_fold(demo_cfg, demo_dir, 0, out / "demo_run", overwrite=True, verbose=0)
        step(f"demo model (demo.yaml epochs x {args.demo_scale})", t, c)
        runs = [{"run": out / "demo_run", "data": demo_dir, "fold": 0}]

    t, c = time.time(), cpu_seconds()
    scorings = {"plain": ()} | ({"tta": args.tta} if args.tta else {})
    scored = {k: [] for k in scorings}
    for r in runs:
        true_comp, pred_comp = load_competition(r["data"]), load_competition(predicted[r["data"].resolve()])
        for how, views in scorings.items():
            val_true, test_true = map_with_boxes(r["run"], true_comp, r["fold"], views)
            val_pred, test_pred = map_with_boxes(r["run"], pred_comp, r["fold"], views)
            row = {"val_true": val_true, "val_pred": val_pred, "test_true": test_true, "test_pred": test_pred,
                   "val_gap": val_pred - val_true, "test_gap": test_pred - test_true}
            scored[how].append({"run": str(r["run"]), "scoring": "+".join(("plain",) + views),
                                **{k: round(v, 4) for k, v in row.items()}})
    step("MAP@5 true vs predicted boxes", t, c)

    cv = meta["cv"]
    print(common.results_table([
        {"what": f"{k}: cross-validated IoU ({cfg.folds} folds, {args.labels} labels)", "iou": v["mean_iou"],
         "fallbacks": v["fallbacks"]} for k, v in cv.items()] + iou_rows,
        [("what", "boxes"), ("iou", "mean IoU"), ("fallbacks", "whole-image fallbacks")]))
    how = f"refined from {meta['refine_from']}" if cfg.refine else "averaged models"
    print(common.results_table([r for rows in scored.values() for r in rows], [
        ("run", "run"), ("scoring", "views"), ("val_true", "val MAP@5, true boxes"),
        ("val_pred", f"val, predicted ({how})"), ("val_gap", "gap"), ("test_true", "test MAP@5, true boxes"),
        ("test_pred", "test, predicted"), ("test_gap", "gap")]))
    gaps = {how: {k: common.mean_sd([r[k] for r in rows]) for k in ("val_gap", "test_gap")}
            for how, rows in scored.items()}
    for how, g in gaps.items():
        if len(runs) > 1:
            print(f"mean +- sd over the runs ({how}): " + ", ".join(
                f"{k.replace('_gap', '')} gap {v['mean']:+.3f} +- {v['sd']:.3f}" for k, v in g.items()))
    print(f"target: {final} IoU >= 0.93 -> {cv[final]['mean_iou']:.4f}; |test MAP@5 predicted - true| <= 0.01 -> "
          + ", ".join(f"{abs(g['test_gap']['mean']):.3f} ({how})" for how, g in gaps.items())
          + (f" (mean of {len(runs)} runs)" if len(runs) > 1 else ""))
    print(f"in all {time.time() - t0:.0f} s wall, {cpu_seconds() - c0:.0f} s CPU (this process; backend {backend}"
          + "".join(f", {b} probe {r:.0f} img/s" for b, r in rates.items()) + ")")
    metrics = {f"cv_iou_{k}": v["mean_iou"] for k, v in cv.items()}
    metrics.update({f"demo_iou_{k}": v for k, v in first_ious.items()})
    metrics.update({f"probe_img_s_{b}": r for b, r in rates.items()})
    first = scored["plain"][0]
    metrics.update(backend=backend, test_map_true=first["test_true"], test_map_predicted=first["test_pred"],
                   val_map_true=first["val_true"], val_map_predicted=first["val_pred"], fallbacks=fallbacks,
                   runs=[r for rows in scored.values() for r in rows], tta=list(args.tta),
                   **{f"{k}{'' if how == 'plain' else '_' + how}_{stat}": v[stat]
                      for how, g in gaps.items() for k, v in g.items() for stat in ("mean", "sd")})
    print(common.final_json("boxes", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
