"""Geometric verification: a candidate photo's correspondences with the query fitted by one transform (step 2).

The ``shortlist`` gallery photos with the most LNBNN votes (:mod:`whale.keypoints.votes`) are verified: their
voting correspondences are fitted by a homography, affine or similarity transform (OpenCV USAC MAGSAC++ or
RANSAC); the LNBNN weight of the inliers is the photo's evidence (:mod:`whale.keypoints.scoring` turns it into
a score). :class:`GeometricVerifier` is the rule built once from the config
(:class:`~whale.keypoints.config.VerifyConfig`); the matcher and the display's
:func:`~whale.keypoints.pairs.pair_matches` fit through the same one.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from whale.keypoints.config import VerifyConfig
from whale.keypoints.extract import Features
from whale.keypoints.pairstats import pair_row


def fit_model(src: np.ndarray, dst: np.ndarray, cfg: VerifyConfig, geometry: str | None = None):
    """``(model, inliers)``: the transform of ``geometry`` (None: ``cfg.geometry``) from ``src`` to ``dst``
    (``[n, 2] float32`` pixels; ``3x3`` or ``2x3``) and its ``[n] bool`` inliers, or ``(None, None)`` when there
    are too few points or no transform fits."""
    import cv2

    if len(src) < cfg.min_matches:
        return None, None
    geometry = cfg.geometry if geometry is None else geometry
    method = cv2.USAC_MAGSAC if cfg.robust == "magsac" else cv2.RANSAC
    if geometry == "homography":
        model, mask = cv2.findHomography(src, dst, method, cfg.reproj_px)
    elif geometry == "affine":
        model, mask = cv2.estimateAffine2D(src, dst, method=method, ransacReprojThreshold=cfg.reproj_px)
    else:  # OpenCV has no USAC estimator of a similarity: RANSAC whatever ``robust`` says
        model, mask = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=cfg.reproj_px)
    return (None, None) if mask is None else (model, mask.ravel().astype(bool))


def fit_geometry(src: np.ndarray, dst: np.ndarray, cfg: VerifyConfig) -> np.ndarray | None:
    """``[n] bool`` inliers of the transform of ``cfg.geometry`` from ``src`` to ``dst`` (``[n, 2] float32``
    pixels), or None when there are too few points or no transform fits."""
    return fit_model(src, dst, cfg)[1]


@contextlib.contextmanager
def opencv_threads(n: int) -> Iterator[None]:
    """OpenCV's thread count set to ``n`` inside the block and restored after it (``cv2.setNumThreads`` is
    process-wide: a call must not leave it changed for the caller)."""
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(n)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


class GeometricVerifier:
    """Verification of a query's best candidates by ``cfg``'s transform (module docstring).

    Example:
        >>> verifier = GeometricVerifier(cfg.verify)                          # doctest: +SKIP
        >>> mask = verifier.fit(src_xy, dst_xy)                               # [n] bool inliers, or None
    """

    def __init__(self, cfg: VerifyConfig):
        self.cfg = cfg

    def fit(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
        """:func:`fit_geometry` under this verifier's settings (with its :meth:`second` fit)."""
        mask = fit_geometry(src, dst, self.cfg)
        return None if mask is None else self.second(src, dst, mask)

    def second(self, src: np.ndarray, dst: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``mask`` with the inliers of a second fit of the first one's outliers added, when ``second_fit`` asks
        for it and that fit holds at least that many (the config's ``second_fit``)."""
        need = self.cfg.second_fit
        rest = np.flatnonzero(~mask)
        if not need or len(rest) < max(need, self.cfg.min_matches):
            return mask
        _, again = fit_model(src[rest], dst[rest], self.cfg)
        if again is None or again.sum() < need:
            return mask
        both = mask.copy()
        both[rest[again]] = True
        return both

    def describe(self, q: Features, g: Features, src: np.ndarray, dst: np.ndarray, mask: np.ndarray,
                 weight: np.ndarray, votes: float, model: np.ndarray | None) -> np.ndarray:
        """The :func:`~whale.keypoints.pairstats.pair_row` of one verified candidate, with a similarity transform
        fitted again to its inliers as the second robust fit."""
        inliers = int(mask.sum())
        _, again = fit_model(src[mask], dst[mask], self.cfg, geometry="similarity")
        agreement = 0.0 if again is None else float(again.sum()) / max(inliers, 1)
        return pair_row(q, g, src, dst, mask, weight, votes, model, agreement)

    def candidates(self, votes: np.ndarray) -> np.ndarray:
        """``[c] int`` gallery photos to verify: the ``shortlist`` with the most votes among those with any
        (``votes`` ``[n_gallery] float32``), in no particular order."""
        n = min(self.cfg.shortlist, int((votes > 0).sum()))
        if n == 0:
            return np.zeros(0, np.int64)
        return np.argpartition(-votes, n - 1)[:n] if n < len(votes) else np.arange(len(votes))

    def verify(self, q: Features, gallery: Sequence[Features], local: np.ndarray, votes: np.ndarray,
               feat: np.ndarray, photo: np.ndarray, row: np.ndarray, weight: np.ndarray,
               evidence_row: np.ndarray, inlier_row: np.ndarray, report: Callable | None = None,
               rows: list | None = None, also: np.ndarray | None = None) -> None:
        """Verify query ``q``'s :meth:`candidates` among ``gallery`` from its kept votes (``feat``, ``photo``,
        ``row``, ``weight`` ``[v]``: :func:`~whale.keypoints.votes.lnbnn_votes`; ``local`` ``[N] int32``: each
        index row's keypoint within its photo), writing each verified candidate's inlier weight into
        ``evidence_row`` and its inlier count into ``inlier_row`` (``[n_gallery]``). ``report``:
        ``f(photo, query_keys, photo_keys)`` with the inlier keypoints of every verified candidate. ``rows``: a
        list given to receive ``(photo, row)`` of every verified candidate (:func:`whale.keypoints.pairstats.pair_row`;
        its ``evidence_share`` still 1). ``also``: ``[c] int`` gallery photos to verify besides the
        :meth:`candidates` (another source's shortlist: :mod:`whale.identify`); one without a vote is not verified."""
        if not len(photo) or (self.cfg.shortlist == 0 and also is None):
            return
        cand = self.candidates(votes)
        if also is not None and len(also):
            cand = np.union1d(cand, also)
        order = np.argsort(photo, kind="stable")
        sorted_photo = photo[order]
        for c in cand:
            lo, hi = np.searchsorted(sorted_photo, [c, c + 1])
            sel = order[lo:hi]
            if len(sel) < self.cfg.min_matches:
                continue
            src, dst = q.xy[feat[sel]], gallery[c].xy[local[row[sel]]]
            model, mask = fit_model(src, dst, self.cfg)
            if mask is None:
                continue
            mask = self.second(src, dst, mask)
            evidence_row[c] = weight[sel][mask].sum()
            inlier_row[c] = int(mask.sum())
            if rows is not None:
                rows.append((int(c), self.describe(q, gallery[c], src, dst, mask, weight[sel], float(votes[c]), model)))
            if report is not None:
                report(int(c), feat[sel][mask], local[row[sel]][mask])
