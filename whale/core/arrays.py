"""Checked arrays shared by mining, scoring and inference: feature matrices, id codes, and gallery columns grouped
by id (:class:`IdGroups`, the one per-id reduction: ranking, metrics, inference, explain, the catalogue)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whale import NEW_WHALE


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


@dataclass(frozen=True)
class IdGroups:
    """Gallery columns grouped by id: the one per-id reduction of the toolkit.

    Inference, the ensemble, explain and the catalogue reduce a ``[b, n_gallery]`` block of scores
    to each id's maximum (and, where a person looks at it, the column that holds it) through this.

    Attributes:
        names: ``[n_ids]`` ids ascending (str or int codes), the open-set label dropped.
        columns: ``[m]`` int64 gallery columns sorted by id; None = all columns, already in order.
        starts: ``[n_ids]`` int64 offsets into the sorted columns where each id's group starts.

    Example:
        >>> g = IdGroups.of(np.array(["b", "a", "b"]))
        >>> g.max(np.array([[0.1, 0.5, 0.9]], np.float32))
        array([[0.5, 0.9]], dtype=float32)
        >>> g.best_columns(np.array([[0.1, 0.5, 0.9]], np.float32), np.array([[1, 0]]))
        array([[2, 1]])
    """

    names: np.ndarray
    columns: np.ndarray | None
    starts: np.ndarray

    @classmethod
    def of(cls, gallery_ids: np.ndarray, open_label: str | None = NEW_WHALE) -> "IdGroups":
        """Groups of ``gallery_ids`` ``[n_gallery]`` (str or int); columns labelled ``open_label`` dropped."""
        gallery_ids = np.asarray(gallery_ids)
        keep = (np.flatnonzero(gallery_ids != open_label) if open_label is not None and gallery_ids.dtype.kind in "UO"
                else np.arange(gallery_ids.size))
        kept = gallery_ids[keep]
        order = np.argsort(kept, kind="stable")
        columns = keep[order].astype(np.int64)
        names, starts = np.unique(kept[order], return_index=True)
        if columns.size == gallery_ids.size and np.array_equal(columns, np.arange(columns.size)):
            columns = None  # already grouped by id: no gather needed
        return cls(names=names, columns=columns, starts=starts.astype(np.int64))

    def max(self, block: np.ndarray, dtype=np.float32) -> np.ndarray:
        """``[b, n_gallery]`` scores -> ``[b, n_ids]`` ``dtype`` (float32; float64 keeps float64 scores as they
        are, for the metrics), the maximum over each id's columns."""
        if self.names.size == 0:
            return np.empty((block.shape[0], 0), dtype=dtype)
        # np.take is markedly faster than fancy indexing for a column gather.
        grouped = block if self.columns is None else np.take(block, self.columns, axis=1)
        # float16 arithmetic is slow; rounding is monotonic, so casting first keeps the max exact.
        grouped = grouped.astype(dtype, copy=False)
        return np.maximum.reduceat(grouped, self.starts, axis=1)

    def best_columns(self, block: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The gallery column holding the maximum of id ``ids[r, j]`` (an index into ``names``) in row ``r`` of
        ``block`` ``[b, n_gallery]``: ``[b, j]`` int64 (the first such column on a tie)."""
        ends = np.r_[self.starts[1:], self.columns.size if self.columns is not None else block.shape[1]]
        sorted_cols = self.columns if self.columns is not None else np.arange(block.shape[1])
        out = np.empty(ids.shape, np.int64)
        for r, j in np.ndindex(*ids.shape):
            cols = sorted_cols[self.starts[ids[r, j]]:ends[ids[r, j]]]
            out[r, j] = cols[np.argmax(block[r, cols])]
        return out
