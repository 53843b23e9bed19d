"""A fluke's trailing edge read from its photo, with no training, and the curves of many photos kept by content.

:func:`edge_curve`: the white letterbox cut (:func:`whale.data.images.content_box`), GrabCut's mask
(:func:`whale.keypoints.mask.fluke_mask`) on the photo at :data:`SIDE` px with the rectangle :data:`INSET` from the
border and nothing grown, its largest component, the highest fluke pixel of each column (the trailing edge of an
upright fluke), turned so the two ends (the tips) are level, scaled by the tip-to-tip span and resampled to
:data:`POINTS` points. A photo whose mask is the whole photo (GrabCut's failure) or whose fluke spans under
:data:`LEAST_SPAN` px has no curve.

:class:`CurveStore`: the curves of photos by the BLAKE2b digest of their bytes
(:func:`whale.data.fingerprint.image_hashes`), one ``.npz`` in the feature store's folder, so a photo's outline
is read once whatever folder it is in (about 0.1-0.25 s a photo on one core).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SIDE, INSET, POINTS, LEAST_SPAN = 200, 0.01, 256, 40


def edge_curve(bgr: np.ndarray) -> np.ndarray | None:
    """``[POINTS] float32``: the trailing edge's height at evenly spaced points from tip to tip, in spans (module
    docstring); None where there is no outline to read."""
    import cv2

    from whale.data.images import content_box
    from whale.keypoints.mask import fluke_mask

    x0, y0, x1, y1 = content_box(bgr)
    bgr = bgr[y0:y1, x0:x1]
    mask = fluke_mask(np.ascontiguousarray(bgr[:, :, ::-1]), side=SIDE, inset=INSET, grow=0)
    if mask.all():
        return None
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8))
    if n < 2:
        return None
    fluke = labels == 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    xs = np.flatnonzero(fluke.any(axis=0))
    if xs[-1] - xs[0] < LEAST_SPAN:
        return None
    pts = np.stack([xs - xs[0], fluke[:, xs].argmax(axis=0)], 1).astype(np.float64)
    pts -= pts[0]
    a = -np.arctan2(pts[-1, 1], pts[-1, 0])
    pts = pts @ np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]).T  # the tips level
    span = pts[-1, 0]
    order = np.argsort(pts[:, 0], kind="stable")
    return (np.interp(np.linspace(0, span, POINTS), pts[order, 0], pts[order, 1]) / span).astype(np.float32)


class CurveStore:
    """The curves of photos by content, in ``folder/outline-curves.npz`` (module docstring)."""

    NAME = "outline-curves.npz"
    EVERY = 500
    """Photos read between two saves of the store."""

    def __init__(self, folder):
        self.path = Path(folder) / self.NAME
        self.curves: dict[str, np.ndarray | None] = {}
        if self.path.is_file():
            try:
                with np.load(self.path) as z:
                    keys, curves, ok = z["digests"], z["curves"], z["ok"]
            except (OSError, ValueError, KeyError) as e:
                from whale.core.errors import DataError

                raise DataError(f"{self.path}: not a curve store ({e}); remove it to read the curves again") from e
            if curves.shape[1:] == (POINTS,):
                self.curves = {str(k): (c if o else None) for k, c, o in zip(keys, curves, ok)}

    def of(self, paths, keys, progress: bool = True, log=print, boxes=None) -> tuple[np.ndarray, np.ndarray]:
        """``(curves [n, POINTS] float32, ok [n] bool)`` of the photos ``paths`` whose digests are ``keys``; the
        photos not yet in the store read (a progress bar) and the store written once they are. ``boxes``: per
        photo ``(x0, y0, x1, y1)`` or None (the whole photo; the default for all): the edge read inside the box,
        kept apart from the same photo's other boxes."""
        import cv2

        from whale.core.errors import DataError
        from whale.core.progress import progress_bar
        from whale.data.images import crop_to_box
        from whale.keypoints.store import boxed_key

        boxes = list(boxes) if boxes is not None else [None] * len(keys)
        keys = [boxed_key(k, b) for k, b in zip(keys, boxes)]
        box_of = dict(zip(keys, boxes))
        todo = {k: p for k, p in zip(keys, paths) if k not in self.curves}  # a photo twice in the data: read once
        if todo:
            log(f"outline: reading the trailing edge of {len(todo)} photos (GrabCut, about 0.1-0.25 s a photo; "
                f"kept in {self.path} as they come)")
            for i, (key, path) in enumerate(progress_bar(todo.items(), total=len(todo), desc="trailing edges",
                                                         enabled=progress), 1):
                bgr = cv2.imread(str(path))
                if bgr is None:
                    raise DataError(f"{path}: not a readable image")
                self.curves[key] = edge_curve(crop_to_box(bgr, box_of[key], margin=0.0))
                if i % self.EVERY == 0:
                    self.save()  # a killed run keeps what it read
            self.save()
        out, ok = np.zeros((len(keys), POINTS), np.float32), np.zeros(len(keys), bool)
        for i, key in enumerate(keys):
            c = self.curves[key]
            if c is not None:
                out[i], ok[i] = c, True
        return out, ok

    def save(self) -> None:
        from whale.core.files import atomic_write

        keys = sorted(self.curves)
        curves = np.stack([self.curves[k] if self.curves[k] is not None else np.zeros(POINTS, np.float32)
                           for k in keys]) if keys else np.zeros((0, POINTS), np.float32)
        ok = np.array([self.curves[k] is not None for k in keys], bool)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda tmp: np.savez(tmp, digests=np.array(keys), curves=curves, ok=ok),
                     flag="--cache")
