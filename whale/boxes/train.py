"""Fitting the box models: cyclic learning rate, flips, K-fold cross-validation, the run folder.

:func:`train_run` is what ``python -m whale.boxes train`` runs. The labelled images are split
into ``cfg.folds`` folds (a permutation drawn from ``cfg.seed``); each model is trained once per
fold on the other folds and predicts the held-out one, so every labelled image gets an
out-of-fold box from each model and from their average: the cross-validated mean IoU of the
paper. The K fold models are kept and predict new images together (their unit corners
averaged), so no extra full-data fit is needed. With ``cfg.refine`` (ours, :mod:`whale.boxes.refine`)
a refiner is trained per fold too and looks again at the held-out fold's first boxes (``cfg.refine_from``,
:func:`first_box`): its cross-validated IoU (``refined``) stands beside the paper's (``average``).

Run folder::

    RUN/config.yaml                    resolved BoxConfig
    RUN/run.json                       models, folds, cross-validated IoU, fallbacks, git revision
    RUN/cv.csv                         per labelled image: true box, each model's and the average's
                                       out-of-fold box and IoU
    RUN/oof.npz                        the same out-of-fold unit boxes unrounded, and each image's fold
    RUN/models/{vgg,retinanet,refine}_fold{k}.weights.h5
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import keras
import numpy as np

from whale.boxes import geometry
from whale.boxes.config import BoxConfig, save_box_config
from whale.boxes.labels import BoxLabels, load_inputs
from whale.core.errors import ConfigError
from whale.core.files import atomic_write, git_revision, write_json_atomic, write_text_atomic


class FlipBatches(keras.utils.PyDataset):
    """Shuffled batches of ``(float32 images [b, S, S, 3], targets)``, half of them mirrored.

    Order and flips come from ``np.random.default_rng([seed, epoch])``. ``make_targets`` turns
    unit boxes ``[b, 4]`` into what the model's loss reads.
    """

    def __init__(self, images: np.ndarray, unit: np.ndarray, batch_size: int, seed: int, make_targets):
        super().__init__()
        self.images, self.unit, self.batch_size = images, np.asarray(unit, np.float32), int(batch_size)
        self.seed, self.make_targets, self.epoch = seed, make_targets, 0
        self._draw()

    def _draw(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        self.order = rng.permutation(len(self.images))
        self.flip = rng.random(len(self.images)) < 0.5

    def __len__(self):
        return -(-len(self.images) // self.batch_size)

    def __getitem__(self, i):
        idx = self.order[i * self.batch_size:(i + 1) * self.batch_size]
        x = self.images[idx].astype(np.float32)
        u = self.unit[idx].copy()
        f = self.flip[idx]
        x[f] = x[f][:, :, ::-1]
        u[f] = geometry.flip_unit(u[f])
        return x, self.make_targets(u)

    def on_epoch_end(self):
        self.epoch += 1
        self._draw()


def build_model(kind: str, cfg: BoxConfig, steps_per_epoch: int | None = None):
    """Model ``kind`` ("vgg" | "retinanet" | "refine"); with ``steps_per_epoch``, compiled for training with
    Adam under cosine annealing with restarts (each cycle ``cfg.cycle_epochs`` epochs, restarting at ``cfg.lr``).
    """
    if kind == "refine":
        from whale.boxes.refine import build_refiner

        model = build_refiner(cfg)
    elif kind == "vgg":
        from whale.boxes.vgg import build_vgg_regressor

        model = build_vgg_regressor(cfg.image_size, cfg.vgg_width, cfg.vgg_weights, cfg.vgg_head)
    elif kind == "retinanet":
        from whale.boxes.retinanet import build_retinanet

        model = build_retinanet(cfg.image_size, cfg.retinanet_filters, cfg.retinanet_blocks, cfg.fpn_width,
                                cfg.min_confidence)
    else:
        raise ValueError(f"unknown box model {kind!r}; expected vgg, retinanet or refine")
    if steps_per_epoch is None:
        return model
    schedule = keras.optimizers.schedules.CosineDecayRestarts(
        cfg.lr, first_decay_steps=max(1, cfg.cycle_epochs * steps_per_epoch), t_mul=1.0, m_mul=1.0, alpha=0.01)
    opt = keras.optimizers.Adam(learning_rate=schedule)
    if kind in ("vgg", "refine"):
        from whale.boxes.vgg import box_loss

        model.compile(optimizer=opt, loss=box_loss)
    else:
        from whale.boxes.retinanet import compile_retinanet

        compile_retinanet(model, opt)
    return model


def _targets(kind: str, cfg: BoxConfig):
    if kind == "retinanet":
        from whale.boxes.retinanet import targets

        return lambda u: targets(u, cfg.image_size)
    return lambda u: u


def predict_unit(kind: str, model, images: np.ndarray, cfg: BoxConfig) -> np.ndarray:
    """Unit boxes ``[n, 4]`` float32 of uint8/float32 images ``[n, S, S, 3]``; NaN rows: no detection."""
    if kind == "retinanet":
        from whale.boxes.retinanet import predict_unit as retina_unit

        return retina_unit(model, images, cfg.image_size)
    return np.asarray(model.predict(np.asarray(images, np.float32), batch_size=64, verbose=0), np.float32)


def fit_model(kind: str, cfg: BoxConfig, images: np.ndarray, unit: np.ndarray, seed: int, verbose=0):
    """Train model ``kind`` for ``cfg.epochs`` on uint8 images ``[n, S, S, 3]`` and unit boxes ``[n, 4]``."""
    keras.utils.set_random_seed(seed)
    data = FlipBatches(images, unit, cfg.batch_size, seed, _targets(kind, cfg))
    model = build_model(kind, cfg, len(data))
    from whale.boxes.retinanet import quiet_inputs_warning

    with quiet_inputs_warning() if kind == "retinanet" else contextlib.nullcontext():
        model.fit(data, epochs=cfg.epochs, verbose=verbose)
    return model


def fit_refiner(cfg: BoxConfig, images: list[np.ndarray], unit: np.ndarray, seed: int, verbose=0):
    """Train a refiner for ``cfg.refine_epochs`` on full images (:func:`whale.boxes.refine.load_images`) and unit boxes."""
    from whale.boxes.refine import WindowBatches

    keras.utils.set_random_seed(seed)
    data = WindowBatches(images, unit, cfg, seed)
    model = build_model("refine", cfg, len(data))
    model.fit(data, epochs=cfg.refine_epochs, verbose=verbose)
    return model


def fold_of(n: int, folds: int, seed: int) -> np.ndarray:
    """``[n] int64`` fold of each labelled image: a seeded permutation dealt round-robin."""
    fold = np.empty(n, dtype=np.int64)
    fold[np.random.default_rng([seed, 0xB0C5]).permutation(n)] = np.arange(n) % folds
    return fold


def weights_path(run_dir, kind: str, fold: int) -> Path:
    return Path(run_dir) / "models" / f"{kind}_fold{fold}.weights.h5"


def save_weights(model, path: Path) -> Path:
    """``model.save_weights`` through :func:`whale.core.files.atomic_write` (Keras wants the .weights.h5 ending)."""
    import os

    def write(tmp: Path):
        named = tmp.with_name(tmp.name + ".weights.h5")
        model.save_weights(str(named))
        os.replace(named, tmp)

    return atomic_write(path, write)


def cv_summary(labels: BoxLabels, preds: dict[str, np.ndarray]) -> tuple[dict, list[str]]:
    """Cross-validated IoU of each of ``preds`` (name -> out-of-fold unit boxes), and the rows of ``cv.csv``."""
    summary, columns = {}, {}
    for name, unit in preds.items():
        px, fell = geometry.to_pixels(unit, labels.sizes)
        ious = geometry.iou(px, labels.boxes)
        summary[name] = {"mean_iou": float(ious.mean()), "fallbacks": int(fell.sum())}
        columns[name] = (px, ious)
    head = ["Image", "x0", "y0", "x1", "y1"] + [f"{m}_{c}" for m in columns for c in ("x0", "y0", "x1", "y1", "iou")]
    rows = [",".join(head)]
    for i, name in enumerate(labels.names):
        cells = [name, *map(str, labels.boxes[i])]
        for px, ious in columns.values():
            cells += [*map(str, px[i]), f"{ious[i]:.4f}"]
        rows.append(",".join(cells))
    return summary, rows


def first_box(refine_from: str, models, cv: dict) -> str:
    """Which boxes the refiner starts from: ``refine_from`` itself (``average`` of one model is that
    model), or with ``best`` the candidate (each model, their average) of highest cross-validated IoU
    in ``cv`` (name -> ``{"mean_iou": ...}``). A weak detector drags the paper's average down, and a
    refiner corrects small errors better than large ones (``docs/benchmarks.md``).
    """
    if refine_from == "best":
        return max(cv, key=lambda name: cv[name]["mean_iou"])
    if refine_from == "average":
        return "average" if len(models) > 1 else models[0]
    if refine_from not in models:
        raise ConfigError(f"refine_from: {refine_from!r} was not trained (models: {', '.join(models)})")
    return refine_from


def _cross_validate_refiner(cfg, labels, unit, fold, first, run_dir, log, verbose) -> np.ndarray:
    """Out-of-fold refined boxes: per fold, a refiner trained on the other folds looks at ``first``'s held-out boxes."""
    from whale.boxes.refine import load_images, refine_passes

    t = time.time()
    images = load_images(labels.paths, progress=verbose > 0)
    out = np.full_like(first, np.nan)
    for k in range(cfg.folds):
        train, held = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        model = fit_refiner(cfg, [images[i] for i in train], unit[train], seed=cfg.seed * 1000 + 500 + k, verbose=verbose)
        out[held] = refine_passes([model], [images[i] for i in held], first[held], cfg)
        save_weights(model, weights_path(run_dir, "refine", k))
        iou_k = geometry.iou(geometry.to_pixels(out[held], labels.sizes[held])[0], labels.boxes[held])
        log(f"refine fold {k}: held-out mean IoU {iou_k.mean():.4f} ({len(held)} images, {time.time() - t:.0f} s)")
    return out


def train_run(cfg: BoxConfig, labels: BoxLabels, run_dir, models=("vgg", "retinanet"), log=print,
              verbose=0) -> dict:
    """Cross-validate and keep every fold model of each of ``models``; returns ``run.json``'s content."""
    run_dir = Path(run_dir)
    t0 = time.time()
    save_box_config(cfg, run_dir / "config.yaml")
    images, _ = load_inputs(labels.paths, cfg.image_size, progress=verbose > 0)
    unit = geometry.to_unit(labels.boxes, labels.sizes)
    fold = fold_of(len(labels.names), cfg.folds, cfg.seed)
    oof, seconds = {}, {}
    for kind in models:
        t = time.time()
        oof[kind] = np.full((len(unit), 4), np.nan, np.float32)
        for k in range(cfg.folds):
            train, held = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            model = fit_model(kind, cfg, images[train], unit[train], seed=cfg.seed * 1000 + k, verbose=verbose)
            oof[kind][held] = predict_unit(kind, model, images[held], cfg)
            save_weights(model, weights_path(run_dir, kind, k))
            iou_k = geometry.iou(geometry.to_pixels(oof[kind][held], labels.sizes[held])[0], labels.boxes[held])
            log(f"{kind} fold {k}: held-out mean IoU {iou_k.mean():.4f} ({len(held)} images, {time.time() - t:.0f} s)")
        seconds[kind] = round(time.time() - t, 1)
    if len(models) > 1:
        oof["average"] = geometry.average([oof[m] for m in models])
    start = None
    if cfg.refine:
        t = time.time()
        start = first_box(cfg.refine_from, models, cv_summary(labels, oof)[0])
        log(f"refining from {start}")
        oof["refined"] = _cross_validate_refiner(cfg, labels, unit, fold, oof[start], run_dir, log, verbose)
        seconds["refine"] = round(time.time() - t, 1)
    summary, rows = cv_summary(labels, oof)
    write_text_atomic(run_dir / "cv.csv", "\n".join(rows) + "\n")
    atomic_write(run_dir / "oof.npz", lambda tmp: np.savez(tmp, fold=fold, names=np.array(labels.names), **oof))
    meta = {"models": list(models), "refine": cfg.refine, "refine_from": start, "folds": cfg.folds, "labelled_images": len(labels.names),
            "cv": summary, "seconds": seconds, "total_seconds": round(time.time() - t0, 1),
            "seed": cfg.seed, "git_revision": git_revision(), "backend": keras.backend.backend()}
    write_json_atomic(run_dir / "run.json", meta)
    for name, s in summary.items():
        log(f"cross-validated mean IoU {name}: {s['mean_iou']:.4f} ({s['fallbacks']} whole-image fallbacks)")
    return meta
