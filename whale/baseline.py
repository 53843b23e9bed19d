"""Raw-pixel cosine nearest neighbour: the floor any learned model has to beat.

Each (already cropped and resized) image becomes its flattened pixels, mean-centred per image
and L2-normalised (:func:`pixel_features`); the query-vs-gallery score is the cosine
similarity mapped to [0, 1] as ``(cos + 1) / 2`` (:func:`cosine_scores`), so that the
``new_whale`` threshold of :mod:`whale.ranking` works as it does with siamese probabilities.

Image loading is left to the caller (e.g. ``whale.data.load_crop(path, box, size, channels)``
for each image), which keeps this module free of file handling.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["pixel_features", "cosine_scores"]


def pixel_features(images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Flattened, per-image mean-centred, L2-normalised pixels.

    Args:
        images: ``[n, S, S, C]`` uint8 array, or a sequence of ``n`` ``[S, S, C]`` (or
            ``[S, S]``) uint8 arrays of one common shape.

    Returns:
        ``[n, S*S*C]`` float32, each row of unit L2 norm; a constant image (zero after
        centring) gives a zero row, whose cosine with anything is 0 (score 0.5).

    Raises:
        ValueError: shapes differ between images (the message names the first offending
            index) or the dtype is not uint8.
    """
    if isinstance(images, np.ndarray):
        if images.ndim < 2:
            raise ValueError(f"images: expected [n, S, S, C], got shape {images.shape}")
        batch = images
    else:
        images = list(images)
        if not images:
            raise ValueError("images is empty; expected at least one image")
        first = np.asarray(images[0])
        for i, im in enumerate(images):
            im = np.asarray(im)
            if im.shape != first.shape or im.dtype != first.dtype:
                raise ValueError(
                    f"images[{i}]: shape {im.shape} dtype {im.dtype}, expected {first.shape} "
                    f"{first.dtype} like images[0]; resize every crop to one size first"
                )
        batch = np.stack(images)
    if batch.dtype != np.uint8:
        raise ValueError(f"images: expected uint8 pixels, got dtype {batch.dtype}")
    feats = batch.reshape(batch.shape[0], -1).astype(np.float32)
    feats -= feats.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(feats, axis=1, keepdims=True)
    np.divide(feats, norms, out=feats, where=norms > 0)
    return feats


def cosine_scores(q: np.ndarray, g: np.ndarray, block: int = 1024) -> np.ndarray:
    """Cosine similarity of every query with every gallery row, mapped to [0, 1].

    Args:
        q: ``[n_q, D]`` float32 features, rows L2-normalised (as :func:`pixel_features` gives).
        g: ``[n_g, D]`` float32 features, rows L2-normalised.
        block: query rows per matrix product (bounds temporary memory).

    Returns:
        ``[n_q, n_g]`` float32, ``(cos + 1) / 2`` clipped to [0, 1].

    Raises:
        ValueError: not 2-D, feature sizes differ, or ``block < 1``.
    """
    q = np.asarray(q, dtype=np.float32)
    g = np.asarray(g, dtype=np.float32)
    if q.ndim != 2 or g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise ValueError(f"q {q.shape} and g {g.shape}: expected [n_q, D] and [n_g, D] with equal D")
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    out = np.empty((q.shape[0], g.shape[0]), dtype=np.float32)
    gt = np.ascontiguousarray(g.T)
    for start in range(0, q.shape[0], block):
        part = out[start : start + block]
        np.matmul(q[start : start + block], gt, out=part)
        part += 1.0
        part *= 0.5
        np.clip(part, 0.0, 1.0, out=part)
    return out
