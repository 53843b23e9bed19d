"""Square patches at keypoints, and the same keypoints seen through random homographies (self-supervised pairs).

A patch is the image around a keypoint, its side :data:`PATCH_SCALE` times the keypoint's diameter, resampled
to ``size x size`` pixels (one :func:`cv2.remap` for every keypoint of a photo). Keypoints are upright (the
matcher's ``features.upright``), so a patch is axis-aligned.

Training pairs (:func:`homography_pairs`), seed 000's equivalence on real photos: a photo and its warp by a
random homography (:func:`whale.data.homography.random_homography`'s corner displacement, scaled to the photo)
show the same fluke points; a keypoint's patch in the photo and the patch at its mapped position in the warp
(its diameter scaled by the homography's local scale) are a matching pair, every other keypoint's patch is not.
"""
from __future__ import annotations

import numpy as np

PATCH_SCALE = 2.5
"""Patch side over keypoint diameter (OpenCV's ``KeyPoint.size``): about the window SIFT's descriptor reads."""
PATCH_SIZE = 32
"""Pixels per patch side."""


def patches(image: np.ndarray, xy: np.ndarray, diameter: np.ndarray, size: int = PATCH_SIZE) -> np.ndarray:
    """``[n, size, size] uint8`` patches of ``image`` (``[H, W] uint8``) centred at ``xy`` (``[n, 2]`` pixels
    of ``image``), side ``PATCH_SCALE x diameter`` pixels; outside the image reads as its nearest border."""
    import cv2

    n = len(xy)
    if n == 0:
        return np.zeros((0, size, size), np.uint8)
    unit = (np.arange(size, dtype=np.float32) + 0.5) / size - 0.5  # [-0.5, 0.5): the patch's sample positions
    side = (PATCH_SCALE * np.asarray(diameter, np.float32))[:, None, None]
    map_x = xy[:, 0, None, None].astype(np.float32) + side * unit[None, None, :]
    map_y = xy[:, 1, None, None].astype(np.float32) + side * unit[None, :, None]
    map_x = np.broadcast_to(map_x, (n, size, size)).reshape(n * size, size)
    map_y = np.broadcast_to(map_y, (n, size, size)).reshape(n * size, size)
    out = cv2.remap(image, np.ascontiguousarray(map_x), np.ascontiguousarray(map_y), cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_REPLICATE)
    return out.reshape(n, size, size)


def detect(image: np.ndarray, n_features: int, contrast: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """``(xy [n, 2] float32, diameter [n] float32)``: the strongest upright SIFT keypoints of ``image``."""
    import cv2

    sift = cv2.SIFT_create(nfeatures=n_features, contrastThreshold=contrast, sigma=sigma)
    kps = sift.detect(image, None)
    if not kps:
        return np.zeros((0, 2), np.float32), np.zeros(0, np.float32)
    return (np.array([k.pt for k in kps], np.float32), np.array([k.size for k in kps], np.float32))


def photo_homography(rng: np.random.Generator, height: int, width: int, shift: float) -> np.ndarray:
    """``[3, 3]``: a random homography of a ``height x width`` photo, each corner displaced by up to ``shift``
    of the photo's size in x and y (uniform), as seed 000's corner displacements, then fitted exactly."""
    import cv2

    corners = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
    moved = corners + rng.uniform(-shift, shift, (4, 2)).astype(np.float32) * np.float32([width, height])
    return cv2.getPerspectiveTransform(corners, moved).astype(np.float64)


def local_scale(H: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """``[n]``: how much ``H`` enlarges lengths near each point (the square root of its Jacobian's determinant)."""
    x, y = xy[:, 0].astype(np.float64), xy[:, 1].astype(np.float64)
    w = H[2, 0] * x + H[2, 1] * y + H[2, 2]
    return np.sqrt(np.abs(np.linalg.det(H)) / np.abs(w) ** 3)


def homography_pairs(image: np.ndarray, rng: np.random.Generator, n_features: int, contrast: float, sigma: float,
                     shift: float = 0.15, per_photo: int = 64, size: int = PATCH_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``: ``[m, size, size] uint8`` patches of up to ``per_photo`` keypoints of ``image`` and of the
    same points in ``image`` warped by a random :func:`photo_homography` (module docstring); ``m`` may be 0."""
    import cv2

    h, w = image.shape
    xy, diameter = detect(image, n_features, contrast, sigma)
    if not len(xy):
        return np.zeros((0, size, size), np.uint8), np.zeros((0, size, size), np.uint8)
    H = photo_homography(rng, h, w, shift)
    warped = cv2.warpPerspective(image, H, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    moved = cv2.perspectiveTransform(xy[None].astype(np.float64), H)[0].astype(np.float32)
    margin = diameter * PATCH_SCALE / 2
    inside = ((moved[:, 0] >= margin) & (moved[:, 1] >= margin) & (moved[:, 0] < w - margin)
              & (moved[:, 1] < h - margin))
    keep = np.flatnonzero(inside)
    if len(keep) > per_photo:
        keep = rng.choice(keep, per_photo, replace=False)
    a = patches(image, xy[keep], diameter[keep], size)
    b = patches(warped, moved[keep], diameter[keep] * local_scale(H, xy[keep]).astype(np.float32), size)
    return a, b
