"""A fluke mask from the photo itself: water and sky dropped before keypoints are detected (``features.mask``).

No training and no weights: OpenCV's GrabCut (Rother, Kolmogorov & Blake 2004) on the photo shrunk to
:data:`SIDE` pixels, started from a rectangle :data:`INSET` inside the photo's border (a fluke photo is framed on
the fluke: the border is water or sky), its foreground grown by :data:`GROW` pixels of the shrunk photo so the
trailing edge's keypoints, whose patches straddle the outline, stay. GrabCut's colour models start from k-means,
seeded by OpenCV's global random generator: it is reseeded before each photo, so a photo's mask is the same
whatever ran before. A mask that keeps less than :data:`LEAST` of the photo (GrabCut lost the fluke) or a photo
too small or too flat to model keeps the whole photo.
"""
from __future__ import annotations

import numpy as np

SIDE = 160
"""Longer side, in pixels, of the photo GrabCut segments (~0.1 s a photo on one core)."""
INSET = 0.03
"""Share of each side between the photo's border and GrabCut's starting rectangle."""
ITERATIONS = 5
"""GrabCut's rounds of colour models and graph cut."""
GROW = 2
"""Pixels of the shrunk photo the foreground is grown by (about 1% of the photo's longer side)."""
LEAST = 0.05
"""Share of the photo below which a mask is taken for GrabCut's failure, and the whole photo kept."""
SEED = 0
"""OpenCV's random generator's seed before each photo."""


def fluke_mask(rgb: np.ndarray, side: int = SIDE, inset: float = INSET, grow: int = GROW) -> np.ndarray:
    """``[H, W] bool``: the fluke (and what GrabCut could not tell from it) in the ``[H, W, 3] uint8`` photo;
    ``side``, ``inset``, ``grow``: :data:`SIDE`, :data:`INSET`, :data:`GROW` by default (the trailing-edge benchmark,
    ``benchmarks/flukes/edge_curves.py``, keeps the outline as it is: a finer photo, the rectangle nearer the
    border, nothing grown)."""
    import cv2

    h, w = rgb.shape[:2]
    keep_all = np.ones((h, w), bool)
    shrink = min(1.0, side / max(h, w))
    small = cv2.resize(rgb, (max(1, round(w * shrink)), max(1, round(h * shrink))), interpolation=cv2.INTER_AREA)
    sh, sw = small.shape[:2]
    x0, y0 = int(sw * inset), int(sh * inset)
    if sw - 2 * x0 < 8 or sh - 2 * y0 < 8:
        return keep_all
    labels = np.zeros((sh, sw), np.uint8)
    background, foreground = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.setRNGSeed(SEED)
    try:
        cv2.grabCut(np.ascontiguousarray(small), labels, (x0, y0, sw - 2 * x0, sh - 2 * y0), background,
                    foreground, ITERATIONS, cv2.GC_INIT_WITH_RECT)
    except cv2.error:  # too few distinct colours to fit its models (a flat photo)
        return keep_all
    fluke = ((labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD)).astype(np.uint8)
    if fluke.mean() < LEAST:
        return keep_all
    if grow:
        fluke = cv2.dilate(fluke, np.ones((2 * grow + 1, 2 * grow + 1), np.uint8))
    return cv2.resize(fluke, (w, h), interpolation=cv2.INTER_NEAREST).astype(bool)
