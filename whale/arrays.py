"""Checked arrays shared by mining, scoring and inference: feature matrices and id codes."""

from __future__ import annotations

import numpy as np


def as_features(f, name: str, d: int | None = None) -> np.ndarray:
    f = np.asarray(f)
    if f.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D [n, d] feature array, received shape {f.shape}")
    if d is not None and f.shape[1] != d:
        raise ValueError(f"{name}: expected feature dimension d={d}, received shape {f.shape}")
    if not np.issubdtype(f.dtype, np.floating):
        raise ValueError(f"{name}: expected float features, received dtype {f.dtype}")
    return np.ascontiguousarray(f, dtype=np.float32)


def id_codes(ids, n: int | None = None, name: str = "ids") -> np.ndarray:
    """``[n]`` int64 group codes for labels of any dtype (equal labels -> equal codes).

    ``n`` given: the labels must be one per row of the array they describe.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of labels, received shape {ids.shape}")
    if n is not None and len(ids) != n:
        raise ValueError(f"{name}: expected {n} labels (one per row), received {len(ids)}")
    _, codes = np.unique(ids, return_inverse=True)
    return codes.reshape(-1).astype(np.int64)
