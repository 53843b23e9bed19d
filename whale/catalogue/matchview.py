"""What the keypoint matcher saw: a query and a candidate side by side, their verified matches drawn between them.

HotSpotter's match view for the review page (:mod:`whale.catalogue.report`): both photos scaled to one
height and placed side by side, each verified correspondence (:func:`whale.keypoints.pair_matches`:
mutual nearest RootSIFT neighbours passing the ratio test, kept by the matcher's geometric verifier) a line from the
query's keypoint to the candidate's, circles at both ends. Features come from a
:class:`whale.keypoints.FeatureStore` (extracted once per photo content).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from whale.data import load_image

HEIGHT = 320
"""Height in pixels of each photo in a match view (a photo is never enlarged past twice its size)."""
GAP = 12
COLOURS = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212))
"""RGB colours the lines cycle through (a qualitative palette: neighbouring lines stay distinguishable)."""


class MatchViews:
    """Match views of photo pairs under one keypoint config, features kept in ``store``."""

    def __init__(self, store, height: int = HEIGHT):
        from whale.keypoints.verify import GeometricVerifier

        self.store, self.cfg, self.height = store, store.cfg, int(height)
        self.verifier = GeometricVerifier(self.cfg.verify)  # the matcher's verification, built once for every view

    def features(self, path: Path):
        return self.store.features([path], workers=1, progress=False)[0]

    def draw(self, query: Path, candidate: Path) -> tuple[np.ndarray, int]:
        """``(uint8 [H, W, 3] RGB image, number of verified matches)`` of ``query`` beside ``candidate``."""
        import cv2

        from whale.keypoints import pair_matches

        q_xy, c_xy = pair_matches(self.features(query), self.features(candidate), self.verifier)
        panels, offsets, scales = [], [], []
        x = 0
        for path in (query, candidate):
            img = load_image(path, channels=3)
            s = min(self.height / img.shape[0], 2.0)
            size = (max(1, round(img.shape[1] * s)), max(1, round(img.shape[0] * s)))
            panels.append(cv2.resize(img, size, interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_CUBIC))
            offsets.append(x)
            scales.append(s)
            x += size[0] + GAP
        canvas = np.full((max(p.shape[0] for p in panels), x - GAP, 3), 255, np.uint8)
        for p, off in zip(panels, offsets):
            canvas[:p.shape[0], off:off + p.shape[1]] = p
        radius = max(3, self.height // 90)
        for i, (a, b) in enumerate(zip(q_xy, c_xy)):
            colour = COLOURS[i % len(COLOURS)]
            pa = (int(round(a[0] * scales[0])) + offsets[0], int(round(a[1] * scales[0])))
            pb = (int(round(b[0] * scales[1])) + offsets[1], int(round(b[1] * scales[1])))
            cv2.line(canvas, pa, pb, colour, 1, cv2.LINE_AA)
            for p in (pa, pb):
                cv2.circle(canvas, p, radius, colour, 2, cv2.LINE_AA)
        return canvas, len(q_xy)
