"""Boxes from a trained run: every fold model of every model, averaged; the whole-image fallback counted.

:func:`predict_boxes` is what ``python -m whale.boxes predict`` and ``eval`` run;
:func:`write_boxes_csv` writes ``bounding_boxes.csv`` in the format
:func:`whale.data.read_boxes` reads.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.boxes import geometry
from whale.boxes.config import load_box_config
from whale.boxes.labels import load_inputs
from whale.core.errors import CheckpointError
from whale.core.files import write_text_atomic


@dataclass(frozen=True)
class Prediction:
    """Boxes of ``n`` images: ``boxes`` ``[n, 4]`` int64 pixels, ``fallback`` ``[n]`` bool (whole image),
    ``per_model`` name -> ``[n, 4]`` float32 unit boxes (NaN: that model found nothing), ``sizes``
    ``[n, 2]`` int64 (width, height)."""

    boxes: np.ndarray
    fallback: np.ndarray
    per_model: dict
    sizes: np.ndarray


def load_run(run_dir):
    """``(BoxConfig, {model: [fold weight files]}, run.json)`` of a box run (``refine``: the refiners,
    when trained); raises CheckpointError naming what is missing."""
    run_dir = Path(run_dir)
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{run_dir / 'run.json'}: not a finished box run ({exc})") from None
    cfg = load_box_config(run_dir / "config.yaml")
    from whale.boxes.train import weights_path

    kinds = list(meta["models"]) + (["refine"] if meta.get("refine") else [])
    files = {m: [weights_path(run_dir, m, k) for k in range(meta["folds"])] for m in kinds}
    missing = [str(p) for ps in files.values() for p in ps if not p.is_file()]
    if missing:
        raise CheckpointError(f"{run_dir}: model weights missing: {', '.join(missing)}")
    return cfg, files, meta


def predict_boxes(run_dir, paths, batch: int = 256, progress: bool = True) -> Prediction:
    """Boxes for image files ``paths`` (any size) from every fold model of the run.

    Each model's fold predictions are averaged (a fold model that finds nothing is left out),
    then the models are averaged (:func:`whale.boxes.geometry.average`); a run trained with
    ``refine`` then looks again with its fold refiners (:func:`whale.boxes.refine.refine_passes`;
    ``per_model["refined"]``) from the boxes its training chose (``run.json``'s ``refine_from``).
    Corners outside the image are clipped and an image no model found a box in falls back to the
    whole image.
    """
    from whale.boxes.train import build_model, predict_unit
    from whale.core.progress import progress_bar

    cfg, files, meta = load_run(run_dir)
    models = {}
    for kind, fold_files in files.items():
        models[kind] = []
        for path in fold_files:
            m = build_model(kind, cfg)
            m.load_weights(str(path))
            models[kind].append(m)
    refiners = models.pop("refine", None)
    per_model = {k: np.empty((len(paths), 4), np.float32) for k in [*models, *(["refined"] if refiners else [])]}
    if refiners:
        from whale.boxes.refine import load_images, refine_passes

        start = meta.get("refine_from") or "average"
        first_of = [start] if start in models else list(models)  # "average": every model
    sizes = np.empty((len(paths), 2), np.int64)
    starts = range(0, len(paths), batch)
    for s in progress_bar(starts, total=len(starts), desc="boxes", enabled=progress):
        images, sizes[s:s + batch] = load_inputs(paths[s:s + batch], cfg.image_size, progress=False)
        for kind, fold_models in models.items():
            per_model[kind][s:s + batch] = geometry.average([predict_unit(kind, m, images, cfg) for m in fold_models])
        if refiners:
            first = geometry.average([per_model[k][s:s + batch] for k in first_of])
            per_model["refined"][s:s + batch] = refine_passes(refiners, load_images(paths[s:s + batch]), first, cfg)
    final = per_model["refined"] if refiners else geometry.average([per_model[k] for k in models])
    boxes, fallback = geometry.to_pixels(final, sizes)
    return Prediction(boxes, fallback, per_model, sizes)


def write_boxes_csv(out, names, boxes: np.ndarray) -> Path:
    """``bounding_boxes.csv`` (``Image,x0,y0,x1,y1``, sorted by image name), written atomically."""
    rows = sorted(zip(names, np.asarray(boxes, np.int64).tolist()))
    text = "Image,x0,y0,x1,y1\n" + "".join(f"{n},{b[0]},{b[1]},{b[2]},{b[3]}\n" for n, b in rows)
    return write_text_atomic(out, text)


def iou_report(ious: np.ndarray, names, worst: int = 10) -> str:
    """Mean IoU, a histogram over [0, .5, .7, .8, .9, .95, 1] and the ``worst`` lowest images, as text."""
    edges = np.array([0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0 + 1e-9])
    counts, _ = np.histogram(ious, bins=edges)
    lines = [f"mean IoU {ious.mean():.4f} over {len(ious)} images (median {np.median(ious):.4f})",
             "IoU histogram:"]
    for lo, hi, c in zip(edges[:-1], edges[1:], counts):
        lines.append(f"  [{lo:.2f}, {min(hi, 1.0):.2f}{']' if hi > 1 else ')'} {c:6d} {'#' * int(round(40 * c / max(1, len(ious))))}")
    lines.append(f"worst {min(worst, len(ious))}:")
    for i in np.argsort(ious, kind="stable")[:worst]:
        lines.append(f"  {names[i]}  IoU {ious[i]:.3f}")
    return "\n".join(lines)
