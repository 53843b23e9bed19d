"""Ours: a second look at each box, through a crop around it at full resolution (``refine: true``).

The paper's detectors see the whole image at one size: at 64-128 px a fluke that fills a fifth
of the photo's height spans 12-25 rows, so a row of error is already several points of IoU. The
refiner is the same VGG-layout regressor (:func:`whale.boxes.vgg.build_vgg_regressor`, integral
head) looking at a *window*: the first box grown by ``refine_margin`` of its width and height on
each side, cut from the original image and resized to ``refine_size`` square. It predicts the box
in the window's unit coordinates, so the fluke now fills most of its input.

Each look is made twice, on the image and on its mirror, and with ``refine_margins`` at each of
those margins (e.g. 0.2, 0.25, 0.3: the window a little tighter and looser), all boxes averaged; the
refined box is looked at again ``refine_passes`` times (each look corrects part of the first stage's
error). Training windows come from the true boxes, grown by the margin and then moved and scaled at
random by up to ``refine_jitter`` of the box's size (what the first stage's error looks like), half
of them mirrored; the box always stays inside its window (jitter < margin). At prediction the
window is the first box (``refine_from``: the detector or average of highest cross-validated IoU,
or the one named) grown by the margin; the refined box is mapped back to the image. Measured side
by side with the paper's averaged boxes in every cross-validation (``refined`` beside ``average``
in ``run.json`` and ``cv.csv``).

Windows are in integer pixels of the original image (clipped to it), so a crop and its target
share exactly the same geometry.
"""
from __future__ import annotations

import keras
import numpy as np

from whale.boxes import geometry


def windows(unit: np.ndarray, sizes: np.ndarray, margin: float, jitter: float = 0.0,
            rng: np.random.Generator | None = None) -> np.ndarray:
    """Pixel windows ``[n, 4]`` int64 around unit boxes ``[n, 4]`` of images of ``sizes`` ``[n, 2]`` (w, h).

    Each box grows by ``margin`` of its size per side; with ``jitter`` and ``rng`` its centre moves
    by up to ``jitter`` of the box's size and its half-size scales by up to ``1 +- jitter`` per
    axis. The window is clipped to the image and at least 2 pixels per axis.
    """
    unit = np.asarray(unit, np.float64).reshape(-1, 4)
    wh = np.asarray(sizes, np.float64).reshape(-1, 2)
    lo, hi = unit[:, :2] * wh, unit[:, 2:] * wh
    size = np.maximum(hi - lo, 1.0)
    centre, half = (lo + hi) / 2, size * (0.5 + margin)
    if jitter > 0:
        if rng is None:
            raise ValueError("windows: jitter needs an rng")
        centre = centre + rng.uniform(-jitter, jitter, centre.shape) * size
        half = half * (1 + rng.uniform(-jitter, jitter, half.shape))
    x0y0 = np.clip(np.floor(centre - half), 0, wh - 2)
    x1y1 = np.clip(np.ceil(centre + half), x0y0 + 2, wh)
    return np.concatenate([x0y0, x1y1], axis=1).astype(np.int64)


def to_window(unit: np.ndarray, sizes: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Image unit boxes -> unit boxes of the pixel windows ``win`` (float32)."""
    wh = np.asarray(sizes, np.float64).reshape(-1, 2)
    px = np.asarray(unit, np.float64).reshape(-1, 4) * np.concatenate([wh, wh], axis=1)
    w = np.asarray(win, np.float64)
    span = np.concatenate([w[:, 2:] - w[:, :2]] * 2, axis=1)
    return ((px - np.concatenate([w[:, :2]] * 2, axis=1)) / span).astype(np.float32)


def from_window(unit_w: np.ndarray, sizes: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Unit boxes of the pixel windows ``win`` -> image unit boxes (float32): :func:`to_window`'s inverse."""
    wh = np.asarray(sizes, np.float64).reshape(-1, 2)
    w = np.asarray(win, np.float64)
    span = np.concatenate([w[:, 2:] - w[:, :2]] * 2, axis=1)
    px = np.asarray(unit_w, np.float64).reshape(-1, 4) * span + np.concatenate([w[:, :2]] * 2, axis=1)
    return (px / np.concatenate([wh, wh], axis=1)).astype(np.float32)


def crops(images: list[np.ndarray], win: np.ndarray, size: int) -> np.ndarray:
    """``[n, size, size, 3]`` uint8: each image's pixel window resized to a square (INTER_AREA)."""
    import cv2

    out = np.empty((len(images), size, size, 3), np.uint8)
    for i, (img, (x0, y0, x1, y1)) in enumerate(zip(images, np.asarray(win, np.int64))):
        out[i] = cv2.resize(np.ascontiguousarray(img[y0:y1, x0:x1]), (size, size), interpolation=cv2.INTER_AREA)
    return out


class WindowBatches(keras.utils.PyDataset):
    """Shuffled batches of jittered windows around the true boxes, half mirrored, with their targets.

    Order, jitter and flips come from ``np.random.default_rng([seed, epoch])``, so every epoch
    sees new windows and a run is repeatable.
    """

    def __init__(self, images: list[np.ndarray], unit: np.ndarray, cfg, seed: int):
        super().__init__()
        self.images, self.unit, self.cfg, self.seed, self.epoch = images, np.asarray(unit, np.float32), cfg, seed, 0
        self.sizes = np.array([(im.shape[1], im.shape[0]) for im in images], np.int64)
        self._draw()

    def _draw(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        self.order = rng.permutation(len(self.images))
        self.win = windows(self.unit, self.sizes, self.cfg.refine_margin, self.cfg.refine_jitter, rng)
        self.flip = rng.random(len(self.images)) < 0.5

    def __len__(self):
        return -(-len(self.images) // self.cfg.batch_size)

    def __getitem__(self, i):
        idx = self.order[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        x = crops([self.images[j] for j in idx], self.win[idx], self.cfg.refine_size).astype(np.float32)
        t = to_window(self.unit[idx], self.sizes[idx], self.win[idx])
        f = self.flip[idx]
        x[f] = x[f][:, :, ::-1]
        t[f] = geometry.flip_unit(t[f])
        return x, t

    def on_epoch_end(self):
        self.epoch += 1
        self._draw()


def build_refiner(cfg) -> keras.Model:
    """The refiner: the VGG-layout integral regressor at ``cfg.refine_size`` (see module doc)."""
    from whale.boxes.vgg import build_vgg_regressor

    return build_vgg_regressor(cfg.refine_size, cfg.vgg_width, None, "integral")


def look(models: list, images: list[np.ndarray], unit: np.ndarray, cfg, margin: float | None = None) -> np.ndarray:
    """One look: image unit boxes ``[n, 4]`` float32 refined from boxes ``unit`` (NaN rows stay NaN).

    The windows are the boxes grown by ``margin`` (default ``cfg.refine_margin``, the training
    margin). Every refiner in ``models`` (one per fold) reads the same windows; their boxes are averaged.
    """
    unit = np.asarray(unit, np.float32).reshape(-1, 4)
    ok = geometry.found(unit)
    out = np.full_like(unit, np.nan)
    if not ok.any():
        return out
    keep = np.flatnonzero(ok)
    sizes = np.array([(images[i].shape[1], images[i].shape[0]) for i in keep], np.int64)
    clipped = np.clip(unit[keep], 0.0, 1.0)
    win = windows(clipped, sizes, cfg.refine_margin if margin is None else margin)
    x = crops([images[i] for i in keep], win, cfg.refine_size).astype(np.float32)
    pred = geometry.average([np.asarray(m.predict(x, batch_size=64, verbose=0), np.float32) for m in models])
    out[keep] = from_window(pred, sizes, win)
    return out


def view_margins(cfg) -> tuple[float, ...]:
    """The margins a look reads windows at: ``cfg.refine_margins``, or the training margin alone."""
    return tuple(cfg.refine_margins or (cfg.refine_margin,))


def refine_passes(models: list, images: list[np.ndarray], unit: np.ndarray, cfg) -> np.ndarray:
    """``cfg.refine_passes`` looks, each from the last box: the mean of the views, a look at the
    images and one at their mirrors (mapped back), the refiners' test-time flip, for each margin
    of :func:`view_margins` (windows a little tighter and looser than the training margin, whose
    errors partly cancel). Returns ``[n, 4]`` float32 unit boxes."""
    mirrored = [im[:, ::-1] for im in images]
    unit = np.asarray(unit, np.float32).reshape(-1, 4)
    for _ in range(cfg.refine_passes):
        views = []
        for margin in view_margins(cfg):
            views.append(look(models, images, unit, cfg, margin))
            views.append(geometry.flip_unit(look(models, mirrored, geometry.flip_unit(unit), cfg, margin)))
        unit = geometry.average(views)
    return unit


MAX_SIDE = 512  # the longest side images are shrunk to for the refiner's crops (see load_images)


def load_images(paths, max_side: int = MAX_SIDE, progress: bool = False) -> list[np.ndarray]:
    """RGB uint8 images, each shrunk (INTER_AREA) so that its longer side is at most ``max_side``.

    Unit boxes do not change under the shrink, so a window read in the shrunk image is the same
    box; the cap keeps 1,200 large photos in memory.
    """
    import cv2

    from whale.data.images import load_image
    from whale.core.progress import progress_bar

    out = []
    for p in progress_bar(paths, total=len(paths), desc="images", enabled=progress):
        img = load_image(p, channels=3)
        scale = max_side / max(img.shape[:2])
        if scale < 1:
            img = cv2.resize(img, (max(2, round(img.shape[1] * scale)), max(2, round(img.shape[0] * scale))),
                             interpolation=cv2.INTER_AREA)
        out.append(img)
    return out
