"""Box arithmetic in numpy: IoU, unit <-> pixel coordinates, clipping, averaging, the whole-image fallback.

Boxes are ``(x0, y0, x1, y1)``. In pixels of the original image x1/y1 are exclusive (as in
``bounding_boxes.csv``); the models work in *unit* coordinates, the same corners divided by
the image's width and height, so every box of every image lies in ``[0, 1]``. IoU does not
change under a per-axis scaling, so a unit-coordinate IoU is the pixel IoU.
"""
from __future__ import annotations

import numpy as np


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of matching rows.

    Args:
        a, b: ``[n, 4]`` float or int ``(x0, y0, x1, y1)`` in the same coordinates.

    Returns:
        ``[n]`` float64 in [0, 1]; 0 where either box is empty.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]), 0, None)
    inter = iw * ih
    area = lambda x: np.clip(x[:, 2] - x[:, 0], 0, None) * np.clip(x[:, 3] - x[:, 1], 0, None)  # noqa: E731
    union = area(a) + area(b) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def to_unit(boxes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Pixel boxes ``[n, 4]`` of images of ``sizes`` ``[n, 2]`` (width, height) -> float32 unit boxes."""
    wh = np.asarray(sizes, dtype=np.float64)
    scale = np.concatenate([wh, wh], axis=1)
    return (np.asarray(boxes, dtype=np.float64) / scale).astype(np.float32)


def to_pixels(unit: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit boxes -> integer pixel boxes inside the image, and which rows fell back.

    A corner outside ``[0, 1]`` is clipped to the image; a box that is empty after rounding
    (or has a NaN corner: a failed detection) becomes the whole image.

    Args:
        unit: ``[n, 4]`` float unit boxes (NaN rows allowed).
        sizes: ``[n, 2]`` int (width, height) of each image.

    Returns:
        ``(boxes [n, 4] int64, fallback [n] bool)``.
    """
    unit = np.asarray(unit, dtype=np.float64).reshape(-1, 4)
    wh = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    scale = np.concatenate([wh, wh], axis=1).astype(np.float64)
    px = np.round(np.clip(np.nan_to_num(unit, nan=0.0), 0.0, 1.0) * scale).astype(np.int64)
    failed = ~np.isfinite(unit).all(axis=1) | (px[:, 2] <= px[:, 0]) | (px[:, 3] <= px[:, 1])
    whole = np.concatenate([np.zeros_like(wh), wh], axis=1)
    return np.where(failed[:, None], whole, px), failed


def found(unit: np.ndarray) -> np.ndarray:
    """Which boxes ``[..., 4]`` are real: finite corners with ``x1 > x0`` and ``y1 > y0`` (bool ``[...]``)."""
    unit = np.asarray(unit)
    with np.errstate(invalid="ignore"):
        return np.isfinite(unit).all(axis=-1) & (unit[..., 2] > unit[..., 0]) & (unit[..., 3] > unit[..., 1])


def average(predictions: list[np.ndarray]) -> np.ndarray:
    """Mean of several models' unit boxes, row by row, over the models that found a box.

    One whale per image, so the paper averages the detectors' corners. A model's failed row
    (NaN, or inverted or empty corners) is left out of that row's mean; a row every model
    failed stays NaN.

    Args:
        predictions: list of ``[n, 4]`` float unit boxes.

    Returns:
        ``[n, 4]`` float32.
    """
    stack = np.stack([np.asarray(p, dtype=np.float64).reshape(-1, 4) for p in predictions])
    ok = found(stack)[..., None]
    count = ok.sum(axis=0)
    total = np.where(ok, stack, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)


def flip_unit(unit: np.ndarray) -> np.ndarray:
    """Unit boxes ``[n, 4]`` of horizontally flipped images."""
    unit = np.asarray(unit)
    return np.stack([1 - unit[:, 2], unit[:, 1], 1 - unit[:, 0], unit[:, 3]], axis=1).astype(unit.dtype)
