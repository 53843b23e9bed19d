"""What a verified candidate's geometric verification saw, as a row of numbers (the matcher's learned check).

Today's score (:mod:`whale.keypoints.scoring`) reads one number of a verified match: the LNBNN weight of its
inliers. The 2019 competition's 4th place checked each homography with a gradient-boosted classifier of more
(inliers, their spread, the transform's shape); :mod:`whale.keypoints.check` does so with the rows made here.
Every row describes one (query, gallery photo) candidate that verification fitted:

========================  ================================================================================
``inliers``               verified correspondences
``log_correspondences``   log(1 + the candidate's voting correspondences, inliers or not)
``inlier_ratio``          inliers / correspondences
``log_evidence``          log(1 + summed LNBNN weight of the inliers): today's evidence
``log_votes``             log(1 + the candidate's LNBNN votes)
``evidence_share``        evidence / the query's best verified evidence (1: the best candidate)
``q_spread_x/_y``         the inliers' 10th-90th percentile span over the query's keypoints' (x, y)
``g_spread_x/_y``         the same in the gallery photo
``log_scale``             log of the transform's scale, photo sizes divided out (0: same framing)
``anisotropy``            log of the ratio of its linear part's singular values (0: no shear nor squeeze)
``rotation``              absolute rotation of its linear part, radians
``perspective``           size of its projective terms times the query's diagonal (0: affine)
``similarity_agreement``  share of the inliers a similarity transform (a second, stricter robust fit) keeps
========================  ================================================================================
"""
from __future__ import annotations

import numpy as np

from whale.core.percentile import percentile_span
from whale.keypoints.extract import Features

NAMES = ("inliers", "log_correspondences", "inlier_ratio", "log_evidence", "log_votes", "evidence_share",
         "q_spread_x", "q_spread_y", "g_spread_x", "g_spread_y", "log_scale", "anisotropy", "rotation",
         "perspective", "similarity_agreement")
"""The columns of a row (module docstring); ``evidence_share`` is filled in once a query's candidates are all
verified (:func:`share_of_best`)."""
EVIDENCE_SHARE = NAMES.index("evidence_share")
LOG_EVIDENCE = NAMES.index("log_evidence")


def _spread(points: np.ndarray, photo: Features) -> np.ndarray:
    """``[2]``: the 10th-90th percentile span of ``points`` over that of all ``photo``'s keypoints (x, y, its
    :attr:`~whale.keypoints.extract.Features.xy_span`, sorted once a photo), in [0, ~1]."""
    if len(points) < 2 or len(photo) < 2:
        return np.zeros(2)
    return percentile_span(points) / np.maximum(photo.xy_span, 1.0)


def _diagonal(f: Features) -> float:
    h, w = f.photo_size if len(f.photo_size) == 2 and min(f.photo_size) > 0 else (1, 1)
    return float(np.hypot(h, w))


def transform_shape(model: np.ndarray | None, q: Features, g: Features) -> np.ndarray:
    """``[4]``: ``log_scale``, ``anisotropy``, ``rotation``, ``perspective`` of ``model`` (a ``3x3`` homography or
    ``2x3`` affine from ``q``'s pixels to ``g``'s; None: zeros)."""
    if model is None or not np.isfinite(model).all():
        return np.zeros(4)
    m = np.asarray(model, np.float64)
    if m.shape == (3, 3) and abs(m[2, 2]) > 1e-12:
        m = m / m[2, 2]
    linear = m[:2, :2]
    singular = np.linalg.svd(linear, compute_uv=False)
    if singular[1] <= 1e-12:
        return np.zeros(4)
    log_scale = 0.5 * np.log(singular[0] * singular[1]) - np.log(_diagonal(g) / _diagonal(q))
    rotation = abs(np.arctan2(linear[1, 0] - linear[0, 1], linear[0, 0] + linear[1, 1]))
    perspective = float(np.hypot(m[2, 0], m[2, 1]) * _diagonal(q)) if m.shape == (3, 3) else 0.0
    return np.array([log_scale, np.log(singular[0] / singular[1]), rotation, perspective])


def pair_row(q: Features, g: Features, src: np.ndarray, dst: np.ndarray, mask: np.ndarray, weight: np.ndarray,
             votes: float, model: np.ndarray | None, agreement: float) -> np.ndarray:
    """``[len(NAMES)] float32``: the row of one verified candidate (module docstring) from its correspondences
    ``src`` (query pixels) to ``dst`` (gallery pixels), their inlier ``mask`` and LNBNN ``weight``, the
    candidate's ``votes``, the fitted ``model`` and the second fit's ``agreement``; ``evidence_share`` 1 until
    :func:`share_of_best`."""
    inliers = int(mask.sum())
    evidence = float(weight[mask].sum())
    return np.concatenate([[inliers, np.log1p(len(src)), inliers / max(len(src), 1), np.log1p(evidence),
                            np.log1p(votes), 1.0], _spread(src[mask], q), _spread(dst[mask], g),
                           transform_shape(model, q, g), [agreement]]).astype(np.float32)


def share_of_best(rows: np.ndarray) -> np.ndarray:
    """``rows`` (one query's verified candidates) with ``evidence_share`` filled in: each one's evidence over the
    best of them."""
    if len(rows):
        evidence = np.expm1(rows[:, LOG_EVIDENCE].astype(np.float64))
        rows[:, EVIDENCE_SHARE] = evidence / max(evidence.max(), 1e-9)
    return rows
