"""The images of a review folder: thumbnails, larger copies, heatmaps and keypoint match views.

Each is a JPEG named by the hash of its content (``thumbs/``, ``large/``, ``heatmaps/``, ``matches/`` +
``<20 hex>.jpg``), written atomically and only when not there yet, so a folder written again (or by the
review server after the static page) adds only what is new. The static page (:mod:`whale.catalogue.report`)
and the review server (:mod:`whale.catalogue.reviewdata`) link to the same files.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from whale.core.errors import DataError

JPEG_QUALITY = 88
LARGE = 1024
"""Longest side of the copy an image links to (click to enlarge; never enlarged past the original)."""
NAME = r"(thumbs|large|heatmaps|matches)/[0-9a-f]{20}\.jpg"
"""What every image's name (relative to the review folder) looks like: the only files the review server serves."""


class ReviewImages:
    """A review folder's images, written once per source image into ``out_dir``; their names relative to it.

    ``side``: the thumbnails' longest side; ``explainer``: draws heatmaps (:class:`whale.explain.cli.Explainer`);
    ``views``: draws keypoint match views (:class:`whale.catalogue.matchview.MatchViews`).
    """

    def __init__(self, out_dir: Path, side: int, explainer=None, views=None):
        self.out_dir, self.side, self.explainer, self.views = out_dir, side, explainer, views
        self.done: dict[tuple, str] = {}
        self.n_matches: dict[tuple[Path, Path], int] = {}

    def _save(self, folder: str, rgb: np.ndarray) -> str:
        """``uint8 [H, W, 3]`` RGB -> ``folder/<hash>.jpg`` (written unless there), the name returned."""
        import cv2

        from whale.core.files import atomic_write

        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            raise DataError(f"{self.out_dir}: could not encode a {rgb.shape} image as JPEG")
        data = buf.tobytes()
        name = f"{folder}/{hashlib.sha256(data).hexdigest()[:20]}.jpg"
        target = self.out_dir / name
        if not target.is_file():
            atomic_write(target, lambda tmp: tmp.write_bytes(data))
        return name

    def thumb(self, path: Path, folder: str = "thumbs") -> str:
        """The thumbnail of ``path``: the whole image, longest side ``side`` (``folder="large"``:
        :data:`LARGE`), never enlarged."""
        import cv2

        from whale.data import load_image

        key = (folder, path)
        if key not in self.done:
            img = load_image(path, channels=3)
            side = self.side if folder == "thumbs" else LARGE
            scale = min(1.0, side / max(img.shape[:2]))
            size = (max(1, round(img.shape[1] * scale)), max(1, round(img.shape[0] * scale)))
            small = cv2.resize(img, size, interpolation=cv2.INTER_AREA) if scale < 1 else img
            self.done[key] = self._save(folder, small)
        return self.done[key]

    def large(self, path: Path) -> str:
        """The copy of ``path`` its thumbnail links to (longest side :data:`LARGE`)."""
        return self.thumb(path, "large")

    def match(self, query: Path, candidate: Path) -> tuple[str, int] | None:
        """``(name, verified matches)`` of the pair's match view, or None without ``views``."""
        if self.views is None:
            return None
        key = ("matches", query, candidate)
        if key not in self.done:
            image, n = self.views.draw(query, candidate)
            self.done[key] = self._save("matches", image)
            self.n_matches[(query, candidate)] = n
        return self.done[key], self.n_matches[(query, candidate)]

    def heatmap(self, path: Path) -> str | None:
        """The paper's heatmap over ``path`` as the model sees it (a ``side`` square), or None without a run."""
        if self.explainer is None:
            return None
        from whale.explain.heatmap import heatmap, overlay

        key = ("heatmaps", path)
        if key not in self.done:
            ex = self.explainer
            x = ex.crop(path, None, ex.tap.size, ex.tap.channels)[None].astype(np.float32)
            self.done[key] = self._save("heatmaps", overlay(ex.crop(path, None, self.side, 3), heatmap(ex.tap(x)[0])))
        return self.done[key]
