"""Box models on the synthetic competition (true boxes known): cross-validated IoU, then MAP@5 with predicted boxes. Not a test.

    python benchmarks/boxes.py --out runs/bench_boxes [--labels 1200] [--demo-scale 0.25] [--quick]
                               [--set KEY=VALUE ...] [--no-probe]

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
   The difference isolates what the boxes cost; training on predicted boxes is not measured.

Prints wall and CPU seconds per step and, last, one JSON line. First, the machine's speed in the
same run (``--no-probe`` skips it): images/s of the refiner's training step under each Keras backend
installed (TensorFlow, JAX), each in its own subprocess, so that a time can be read against the
machine it ran on. On a 2-core CPU the box models' cross-validation ran in about half the time under
JAX (``KERAS_BACKEND=jax python benchmarks/boxes.py ...``; README, "Bounding boxes").
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402


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


def label_subset(comp_dir: Path, n: int, seed: int, out_csv: Path) -> Path:
    """``n`` training images of ``comp_dir`` (seeded choice) with their true boxes, as a labels CSV."""
    from whale.boxes.predict import write_boxes_csv
    from whale.data import load_competition

    comp = load_competition(comp_dir)
    names = list(comp.train["Image"])
    if n > len(names):
        raise SystemExit(f"--labels {n}: the labelling competition has only {len(names)} training images")
    pick = sorted(np.random.default_rng(seed).choice(len(names), n, replace=False))
    return write_boxes_csv(out_csv, [names[i] for i in pick], np.array([comp.boxes[names[i]] for i in pick]))


def predicted_folder(comp_dir: Path, out_dir: Path, boxes_csv: Path) -> Path:
    """A copy of ``comp_dir``'s CSVs with ``boxes_csv`` as its boxes; ``train/`` and ``test/`` are links."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train.csv", "sample_submission.csv", "test_solution.csv"):
        shutil.copy(comp_dir / name, out_dir / name)
    for d in ("train", "test"):
        if not (out_dir / d).exists():
            os.symlink((comp_dir / d).resolve(), out_dir / d)
    shutil.copy(boxes_csv, out_dir / "bounding_boxes.csv")
    return out_dir


def map_with_boxes(run_dir: Path, comp, seed: int) -> tuple[float, float]:
    """``(validation, test)`` MAP@5 of a trained demo run, crops cut with ``comp``'s boxes."""
    from whale.data import ImageSet, fold_data
    from whale.demo import truth
    from whale.inference.runs import RunScorer, load_run_model
    from whale.metrics import map_at_k
    from whale.ranking import predict_top5, tune_threshold

    model, cfg = load_run_model(run_dir, "best")
    rs = RunScorer(model, cfg.model.channels, cfg.box_margin, verbose=False)
    data = fold_data(comp, 0, seed)
    known = ImageSet.known(comp)
    f_known = rs.features(known.paths, known.boxes)  # [mirrors, views, n, d]
    f_val = rs.features(data.val.paths, data.val.boxes)
    val = rs.matrix(f_val, f_known[..., known.positions(data.gallery.names), :]).astype(np.float32)
    t, val_map, _ = tune_threshold(val, data.gallery.ids, data.val.ids)
    test = ImageSet.test(comp)
    preds = predict_top5(rs.matrix(rs.features(test.paths, test.boxes), f_known).astype(np.float32), known.ids, t)
    return float(val_map), float(map_at_k(preds, truth(comp.root, comp.test_images)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="work folder")
    p.add_argument("--labels", type=int, default=1200, help="labelled training images")
    p.add_argument("--box-config", default=str(common.repo_root() / "configs" / "boxes.yaml"))
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a box config key")
    p.add_argument("--demo-scale", type=float, default=0.25, help="demo.yaml epochs x this (shortened)")
    p.add_argument("--quick", action="store_true", help="tiny settings for development")
    p.add_argument("--no-probe", action="store_true", help="skip the per-backend speed probe")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the probe's subprocess
    args = p.parse_args(argv)
    t0, c0 = time.time(), cpu_seconds()
    common.setup_tensorflow()
    from whale.boxes.cli import overrides

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
    if not (demo_dir / "train.csv").exists():
        generate(demo_dir, n_ids=200, seed=0)
    labels_csv = label_subset(lab_dir, args.labels, 7, out / "labels.csv")
    step("data", t, c)

    extra = overrides(args.set)
    if args.quick:
        extra.update(folds=2, epochs=1, cycle_epochs=1, refine_epochs=1)
    cfg = load_box_config(args.box_config, extra)
    t, c = time.time(), cpu_seconds()
    meta = train_run(cfg, read_labels(labels_csv, lab_dir), out / "box_run", ("vgg", "retinanet"))
    step("box models (cross-validation)", t, c)

    t, c = time.time(), cpu_seconds()
    comp = load_competition(demo_dir)
    names = list(comp.train["Image"]) + list(comp.test_images)
    paths = [comp.train_path(n) for n in comp.train["Image"]] + [comp.test_path(n) for n in comp.test_images]
    pred = predict_boxes(out / "box_run", paths, progress=False)
    true = np.array([comp.boxes[n] for n in names])
    per_model = dict(pred.per_model)
    per_model["average"] = geometry.average([u for k, u in pred.per_model.items() if k != "refined"])
    demo_iou = {k: float(geometry.iou(geometry.to_pixels(u, pred.sizes)[0], true).mean()) for k, u in per_model.items()}
    final = "refined" if cfg.refine else "average"
    demo_iou[final] = float(geometry.iou(pred.boxes, true).mean())
    boxes_csv = write_boxes_csv(out / "predicted_bounding_boxes.csv", names, pred.boxes)
    pred_dir = predicted_folder(demo_dir, out / "demo_data_predicted", boxes_csv)
    step("predict demo folder", t, c)

    t, c = time.time(), cpu_seconds()
    demo_cfg = common.quick_config(load_config(common.repo_root() / "configs" / "demo.yaml"), args.demo_scale)
    if args.quick:
        demo_cfg = common.quick_config(demo_cfg, 0.01)
    train_fold(demo_cfg, demo_dir, 0, out / "demo_run", overwrite=True, verbose=0)
    step(f"demo model (demo.yaml epochs x {args.demo_scale})", t, c)

    t, c = time.time(), cpu_seconds()
    val_true, test_true = map_with_boxes(out / "demo_run", comp, demo_cfg.seed)
    val_pred, test_pred = map_with_boxes(out / "demo_run", load_competition(pred_dir), demo_cfg.seed)
    step("MAP@5 true vs predicted boxes", t, c)

    cv = meta["cv"]
    print(common.results_table([
        {"what": f"{k}: cross-validated IoU ({cfg.folds} folds, {args.labels} labels)", "iou": v["mean_iou"],
         "fallbacks": v["fallbacks"]} for k, v in cv.items()] + [
        {"what": f"{k}: IoU on the demo's {len(names)} unlabelled images", "iou": v,
         "fallbacks": int(pred.fallback.sum()) if k == final else None} for k, v in demo_iou.items()],
        [("what", "boxes"), ("iou", "mean IoU"), ("fallbacks", "whole-image fallbacks")]))
    print(common.results_table([
        {"boxes": "true", "val": val_true, "test": test_true},
        {"boxes": f"predicted ({'refined from ' + meta['refine_from'] if cfg.refine else 'averaged models'})",
         "val": val_pred, "test": test_pred}],
        [("boxes", "crops from"), ("val", "validation MAP@5"), ("test", "test MAP@5")]))
    print(f"target: {final} IoU >= 0.93 -> {cv[final]['mean_iou']:.4f}; "
          f"|test MAP@5 predicted - true| <= 0.01 -> {abs(test_pred - test_true):.3f}")
    print(f"in all {time.time() - t0:.0f} s wall, {cpu_seconds() - c0:.0f} s CPU (this process; backend {backend}"
          + "".join(f", {b} probe {r:.0f} img/s" for b, r in rates.items()) + ")")
    metrics = {f"cv_iou_{k}": v["mean_iou"] for k, v in cv.items()}
    metrics.update({f"demo_iou_{k}": v for k, v in demo_iou.items()})
    metrics.update({f"probe_img_s_{b}": r for b, r in rates.items()})
    metrics.update(backend=backend, test_map_true=test_true, test_map_predicted=test_pred, val_map_true=val_true,
                   val_map_predicted=val_pred, fallbacks=int(pred.fallback.sum()))
    print(common.final_json("boxes", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
