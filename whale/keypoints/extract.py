"""One photo -> local features: white padding trimmed, contrast normalised, strongest keypoints (RootSIFT by default).

RootSIFT (Arandjelovic & Zisserman 2012): each SIFT descriptor L1-normalised and square-rooted, so the
Euclidean distance between two of them is the Hellinger kernel between the SIFT histograms; the result
has unit L2 norm. Descriptors are kept as ``uint8`` (RootSIFT x :data:`DESCRIPTOR_SCALE`, clipped), a
quarter of float32's memory, and turned back into float32 for search (:func:`as_float`).

A stored descriptor's width is its kind's (:func:`descriptor_width`): 128 bytes for RootSIFT and a learned
descriptor, :data:`XFEAT_WIDTH` (64) for XFeat's. Everything downstream (the store, the index, the votes, the
selection) takes the width from the arrays (``desc.shape[1]``).

``features.mask: grabcut`` keeps only the fluke's keypoints (:mod:`whale.keypoints.mask`).
``features.detector``/``features.descriptor`` ``xfeat`` take XFeat's keypoints or descriptors instead
(:mod:`whale.keypoints.xfeat`; stored as :func:`xfeat_bytes` says); a learned descriptor's folder describes SIFT's
keypoints' patches (:mod:`whale.keypoints.descriptor`).

Keypoint positions are in pixels of the original photo (before trimming and resizing), so the review
page draws matches on the photo a person sees.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from whale.core.percentile import percentile_span
from whale.data.images import content_box, load_image
from whale.keypoints.config import FeatureConfig

DESCRIPTOR_SCALE = 512.0
"""RootSIFT values lie in [0, 1] and rarely above 0.5: x 512 keeps them in uint8 at a resolution of 0.002."""
XFEAT_SCALE = 200.0
"""XFeat's values lie in [-1, 1] and rarely beyond +-0.5: x 200 around 128 keeps them at a resolution of 0.005."""
DESCRIPTOR_WIDTH = 128
"""Bytes of a stored RootSIFT or learned descriptor (a learned one has :func:`whale.keypoints.descriptor.build_net`'s
128 numbers)."""
XFEAT_WIDTH = 64
"""Bytes of a stored XFeat descriptor: its 64 numbers, one byte each (:func:`xfeat_bytes`)."""
XFEAT_STEP = np.float32(np.sqrt(2.0) / DESCRIPTOR_SCALE)
"""What one unit of a stored XFeat byte is worth in :func:`as_float`: ``sqrt(2)`` times a RootSIFT byte's, so that
two XFeat descriptors lie exactly as far apart as when their 64 bytes were stored twice in a 128-byte row at
``1 / DESCRIPTOR_SCALE`` (the store's format 1, :mod:`whale.keypoints.store`): LNBNN's weights, the keypoint
selection, the checks and every figure measured on XFeat stay what they were."""


def descriptor_width(descriptor: str) -> int:
    """Bytes a stored descriptor of ``features.descriptor`` takes: :data:`XFEAT_WIDTH` for ``xfeat``, else
    :data:`DESCRIPTOR_WIDTH` (``rootsift``, a learned descriptor's folder)."""
    return XFEAT_WIDTH if descriptor == "xfeat" else DESCRIPTOR_WIDTH


def byte_step(width: int) -> np.float32:
    """What one unit of a stored byte is worth in :func:`as_float` in a row of ``width`` bytes:
    ``1 / DESCRIPTOR_SCALE`` (exact in float32) in a 128-byte row, :data:`XFEAT_STEP` in XFeat's 64-byte one."""
    return XFEAT_STEP if width == XFEAT_WIDTH else np.float32(1.0 / DESCRIPTOR_SCALE)


@dataclass(frozen=True)
class Features:
    """The local features of one photo.

    Attributes:
        xy: ``[n, 2] float32`` keypoint positions (x, y) in pixels of the original photo.
        diameter_angle: ``[n, 2] float32`` each keypoint's diameter (original pixels) and angle (degrees).
        desc: ``[n, w] uint8`` stored descriptors: ``w`` 128, RootSIFT (or a learned descriptor) x
            :data:`DESCRIPTOR_SCALE`; ``w`` 64, XFeat's (:func:`xfeat_bytes`).
        photo_size: ``(height, width)`` of the original photo.

    The feature store's files keep the array names ``shape`` and ``size`` of these last two
    (:mod:`whale.keypoints.store`).
    """

    xy: np.ndarray
    diameter_angle: np.ndarray
    desc: np.ndarray
    photo_size: tuple[int, int]

    def __len__(self) -> int:
        return len(self.xy)

    @cached_property
    def xy_span(self) -> np.ndarray:
        """``[2]``: the 10th-90th percentile span of the keypoints' (x, y) (``[0, 0]`` under two keypoints),
        computed at the first ask and kept: every verified pair's row divides by it
        (:func:`whale.keypoints.pairstats.pair_row`), a gallery photo's for each query that reaches it."""
        return percentile_span(self.xy) if len(self.xy) >= 2 else np.zeros(2, self.xy.dtype)

    def take(self, keep) -> "Features":
        """The keypoints ``keep`` (indices or a ``[n] bool`` mask) of the same photo."""
        return Features(self.xy[keep], self.diameter_angle[keep], self.desc[keep], self.photo_size)

    @classmethod
    def empty(cls, photo_size=(0, 0), width: int = DESCRIPTOR_WIDTH) -> "Features":
        """No keypoint, descriptors ``[0, width]`` (:func:`descriptor_width`)."""
        return cls(np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32), np.zeros((0, width), np.uint8),
                   tuple(photo_size))


def as_float(desc: np.ndarray) -> np.ndarray:
    """``[n, w] uint8`` stored descriptors -> ``[n, w] float32``, each byte times :func:`byte_step` of ``w``:
    RootSIFT (about unit L2 norm) for ``w`` 128; for XFeat's ``w`` 64, vectors whose Euclidean distances are
    ``sqrt(2) * XFEAT_SCALE / DESCRIPTOR_SCALE`` (0.55) times the descriptors' own (:data:`XFEAT_STEP`)."""
    return desc.astype(np.float32) * byte_step(desc.shape[1])


def trim_white(gray: np.ndarray) -> tuple[np.ndarray, int, int]:
    """``(crop, x0, y0)``: ``gray`` inside its :func:`whale.data.images.content_box` (the white padding cut)."""
    x0, y0, x1, y1 = content_box(gray)
    return gray[y0:y1, x0:x1], x0, y0


def read_gray(path) -> np.ndarray:
    """``[H, W] uint8`` gray photo (:func:`whale.data.images.load_image`: decoded by content; a missing,
    empty or undecodable file raises :class:`whale.core.errors.DataError` naming it)."""
    return load_image(path, channels=1)[:, :, 0]


def prepare(gray: np.ndarray, cfg: FeatureConfig) -> tuple[np.ndarray, float, int, int]:
    """``(image, scale, x0, y0)``: the photo as SIFT sees it; original = ``image_xy / scale + (x0, y0)``."""
    import cv2

    x0 = y0 = 0
    if cfg.trim_white:
        gray, x0, y0 = trim_white(gray)
    scale = 1.0
    if cfg.max_side and max(gray.shape) > cfg.max_side:
        scale = cfg.max_side / max(gray.shape)
    elif cfg.min_side and max(gray.shape) < cfg.min_side:
        scale = cfg.min_side / max(gray.shape)
    if scale != 1.0:
        size = (max(1, round(gray.shape[1] * scale)), max(1, round(gray.shape[0] * scale)))
        gray = cv2.resize(gray, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
    if cfg.clahe > 0:
        gray = cv2.createCLAHE(clipLimit=cfg.clahe, tileGridSize=(8, 8)).apply(gray)
    return gray, scale, x0, y0


def extract(path, cfg: FeatureConfig, box: tuple | None = None) -> Features:
    """RootSIFT features of the photo at ``path`` (module docstring); no keypoint gives empty arrays.

    ``box``: ``(x0, y0, x1, y1)`` pixels (the competition's ``bounding_boxes.csv``): only that part is
    searched (clipped to the photo); positions stay in the whole photo's pixels.
    """
    import cv2

    rgb = load_image(path, channels=3) if cfg.mask == "grabcut" else None  # the mask segments colour
    original = read_gray(path) if rgb is None else cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)  # read_gray's pixels
    bx = by = 0
    region = original
    if box is not None:
        h, w = original.shape
        bx, by = int(np.clip(box[0], 0, w - 1)), int(np.clip(box[1], 0, h - 1))
        x1, y1 = int(np.clip(np.ceil(box[2]), bx + 1, w)), int(np.clip(np.ceil(box[3]), by + 1, h))
        region = original[by:y1, bx:x1]
    image, scale, x0, y0 = prepare(region, cfg)
    fluke = _fluke(rgb, (bx, by, bx + region.shape[1], by + region.shape[0]), image.shape, scale, x0, y0) \
        if rgb is not None else None
    x0, y0 = x0 + bx, y0 + by
    width = descriptor_width(cfg.descriptor)
    if cfg.detector == "xfeat":
        from whale.keypoints.xfeat import CELL, load as load_xfeat

        xy, _, desc = load_xfeat()(image, cfg.n_features)
        if fluke is not None and len(xy):
            on = fluke[np.clip(xy[:, 1].astype(int), 0, image.shape[0] - 1),
                       np.clip(xy[:, 0].astype(int), 0, image.shape[1] - 1)] > 0
            xy, desc = xy[on], desc[on]
        if not len(xy):
            return Features.empty(original.shape, width)
        diameter_angle = np.zeros((len(xy), 2), np.float32)
        diameter_angle[:, 0] = CELL / scale  # a keypoint is a pixel of its 8 x 8 cell: the cell is its size
        return Features(xy / scale + np.float32([x0, y0]), diameter_angle, xfeat_bytes(desc), tuple(original.shape))
    sift = cv2.SIFT_create(nfeatures=cfg.n_features, contrastThreshold=cfg.contrast, sigma=cfg.sigma)
    keypoints = sift.detect(image, fluke)
    if cfg.upright:
        for kp in keypoints:
            kp.angle = 0.0
    if cfg.descriptor == "rootsift" or not keypoints:
        keypoints, desc = sift.compute(image, keypoints) if keypoints else ((), None)
        if desc is None or not len(keypoints):
            return Features.empty(original.shape, width)
        desc = desc / np.maximum(desc.sum(axis=1, keepdims=True), 1e-7)
        stored = np.clip(np.sqrt(desc) * DESCRIPTOR_SCALE + 0.5, 0, 255).astype(np.uint8)
    else:
        stored = _describe(image, keypoints, cfg.descriptor)
    pts = np.array([kp.pt for kp in keypoints], dtype=np.float32) / scale + np.float32([x0, y0])
    diameter_angle = np.array([(kp.size / scale, kp.angle) for kp in keypoints], dtype=np.float32)
    return Features(pts, diameter_angle, stored, tuple(original.shape))


def _fluke(rgb: np.ndarray, region: tuple, shape: tuple, scale: float, x0: int, y0: int) -> np.ndarray:
    """``[h, w] uint8`` (255: fluke) :func:`whale.keypoints.mask.fluke_mask` of the image SIFT sees (``shape``: the
    photo's ``region``, ``(x0, y0, x1, y1)`` pixels, trimmed at ``(x0, y0)`` of it and resized by ``scale``;
    :func:`prepare`), segmented in colour (``rgb``: the whole photo), without the white padding."""
    import cv2

    from whale.keypoints.mask import fluke_mask

    h, w = shape
    rx0, ry0 = region[0] + x0, region[1] + y0
    rx1, ry1 = min(region[2], rx0 + max(1, round(w / scale))), min(region[3], ry0 + max(1, round(h / scale)))
    mask = fluke_mask(rgb[ry0:ry1, rx0:rx1]).astype(np.uint8) * 255
    return cv2.resize(mask, (w, h), interpolation=cv2.INTER_NEAREST)


def _describe(image: np.ndarray, keypoints, descriptor: str) -> np.ndarray:
    """``[n, w] uint8`` stored descriptors of SIFT's ``keypoints`` by ``descriptor`` (``xfeat``: ``w`` 64, or a
    learned descriptor's folder: ``w`` 128)."""
    xy = np.array([kp.pt for kp in keypoints], np.float32)
    if descriptor == "xfeat":
        from whale.keypoints.xfeat import load as load_xfeat

        return xfeat_bytes(load_xfeat().describe(image, xy))
    from whale.keypoints.descriptor import load
    from whale.keypoints.patches import patches

    described = load(descriptor)
    learned = described(patches(image, xy, np.array([kp.size for kp in keypoints], np.float32), described.size))
    return np.clip(learned * DESCRIPTOR_SCALE + 0.5, 0, 255).astype(np.uint8)


def xfeat_bytes(desc: np.ndarray) -> np.ndarray:
    """``[n, 64]`` XFeat unit descriptors -> ``[n, 64] uint8`` stored ones: each value ``x`` as ``128 +``
    :data:`XFEAT_SCALE` ``x`` (clipped; |x| rarely passes 0.5). :func:`as_float` gives them back at
    :data:`XFEAT_STEP` a byte: distances between stored XFeat descriptors are
    ``sqrt(2) * XFEAT_SCALE / DESCRIPTOR_SCALE`` (0.55) times the descriptors' own, one scale for every pair."""
    return np.clip(np.rint(desc * XFEAT_SCALE) + 128, 0, 255).astype(np.uint8)
