"""The verified correspondences of two photos, for showing a person what the matcher saw.

Not the matcher's search (:mod:`whale.keypoints.matcher` votes over the whole gallery): the two photos' mutual
nearest neighbours passing Lowe's ratio test, fitted by the matcher's own verifier
(:class:`~whale.keypoints.verify.GeometricVerifier`), so a view draws what a candidate's verification keeps.
"""
from __future__ import annotations

import numpy as np

from whale.keypoints.config import KeypointConfig
from whale.keypoints.extract import Features, as_float
from whale.keypoints.verify import GeometricVerifier


def pair_matches(fq: Features, fg: Features, verifier: GeometricVerifier | KeypointConfig, ratio: float = 0.85):
    """The verified correspondences of ``fq`` and ``fg``: mutual nearest neighbours passing Lowe's ratio test,
    kept by ``verifier`` (a :class:`KeypointConfig`: the verifier of its ``verify`` settings).

    Returns:
        ``(q_xy [n, 2], g_xy [n, 2])`` float32 inlier positions in the two original photos (n may be 0).
    """
    if isinstance(verifier, KeypointConfig):
        verifier = GeometricVerifier(verifier.verify)
    none = (np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32))
    if len(fq) < 2 or len(fg) < 2:
        return none
    a, b = as_float(fq.desc), as_float(fg.desc)
    d2 = np.maximum((a * a).sum(1)[:, None] - 2 * a @ b.T + (b * b).sum(1)[None], 0)
    two = np.argpartition(d2, 1, axis=1)[:, :2]
    pd = np.take_along_axis(d2, two, axis=1)
    swap = pd[:, 0] > pd[:, 1]
    best = np.where(swap, two[:, 1], two[:, 0])
    d_best, d_second = np.minimum(pd[:, 0], pd[:, 1]), np.maximum(pd[:, 0], pd[:, 1])
    ok = (d_best < ratio * ratio * d_second) & (d2.argmin(axis=0)[best] == np.arange(len(a)))
    qi = np.flatnonzero(ok)
    mask = verifier.fit(fq.xy[qi], fg.xy[best[qi]])
    if mask is None:
        return none
    return fq.xy[qi[mask]], fg.xy[best[qi[mask]]]
