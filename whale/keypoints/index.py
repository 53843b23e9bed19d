"""Nearest gallery descriptors of query descriptors: exact (NumPy) or FAISS IVF-PQ fast scan re-ranked exactly.

Every gallery photo's descriptors go into one index; each row remembers its photo (``owner``) and its
position in that photo's features (``local``). ``exact`` compares every pair in blocks of BLAS matrix
products (small galleries, tests); ``ivf`` (FAISS: ``IndexIVFPQFastScan`` inside ``IndexRefine``) visits
``nprobe`` inverted lists of 4-bit product-quantised codes and re-ranks its candidates with the exact
distances, so the distances LNBNN weighs are exact for the neighbours it returns.

Both are built at the width of the gallery's descriptors ``d`` (``desc.shape[1]``: 128 for RootSIFT and a learned
descriptor, 64 for XFeat) and search in the stored bytes' space: a query's :func:`~whale.keypoints.extract.as_float`
values turned back into its bytes, distances out times :func:`~whale.keypoints.extract.byte_step`. The ``ivf``
index's product quantiser has ``d / 2`` sub-quantizers of 2 dimensions, 4 bits each: 64 for RootSIFT's 128
dimensions, 32 for XFeat's 64, the same resolution a dimension (an XFeat row stored twice gave the same 32 codes,
each twice).

The ``ivf`` index holds ``d / 4`` bytes of codes a descriptor (32 for RootSIFT, 16 for XFeat) and re-ranks from the
store's ``uint8`` values, exact (a value is its byte): where every photo's descriptors are rows of one
memory-mapped file (``whale score``'s :class:`whale.keypoints.store.MappedDescriptors`), it reads them there
(:func:`shared_rows`) and keeps no copy; otherwise it keeps one copy as bytes (FAISS's ``QT_8bit_direct`` scalar
quantiser inside ``IndexRefine``). For RootSIFT that is 32 or 160 bytes a descriptor where a float32 copy took 512
and FAISS's flat refine another 512. Rows are added in blocks of :data:`ADD_ROWS`, so no float32 copy of the
gallery is ever made.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from whale.core.errors import DataError
from whale.core.progress import progress_line
from whale.keypoints.config import AUTO_IVF_FROM, AUTO_IVF_PAIRS, SearchConfig
from whale.keypoints.extract import DESCRIPTOR_WIDTH, Features, as_float, byte_step

_BLOCK = 4096  # query rows per exact block: bounds the [block, n] distance matrix
_EXACT_ENTRIES = 1 << 24
"""Distances an exact block holds at most (its rows fewer against a larger gallery): with their order and
temporaries about 400 MB. A fixed :data:`_BLOCK` against a batch's 300 photos as their own gallery (strict, the
catalogue's groups) held 7-8 GB."""
REFINE_FACTOR = 4
"""IVF candidates per neighbour asked for, re-ranked with exact distances."""
ADD_ROWS = 262_144
"""Gallery descriptors turned into float32 and added to the ``ivf`` index at a time (128 MB of RootSIFT's)."""
RERANK_ROWS = 2048
"""Query descriptors whose candidates are re-ranked at a time from the mapped rows (about 40 MB of float32)."""


def _faiss():
    try:
        import faiss
    except ImportError:
        raise DataError("search.index ivf needs FAISS: pip install faiss-cpu (requirements.txt pins it)") from None
    return faiss


def stored_width(features: Sequence[Features]) -> int | None:
    """The bytes of every photo's stored descriptors (``desc.shape[1]``; None without photos).

    Raises:
        ValueError: the photos' descriptors differ in width (features of different kinds in one gallery)."""
    widths = {f.desc.shape[1] for f in features}
    if len(widths) > 1:
        raise ValueError(f"descriptors of {' and '.join(str(w) for w in sorted(widths))} bytes among the photos: "
                         "features of different kinds (RootSIFT, XFeat) cannot be searched together")
    return widths.pop() if widths else None


def _rows(features: Sequence[Features]) -> tuple[np.ndarray, np.ndarray]:
    """``(owner, local)`` ``[N] int32`` of every descriptor of ``features``, photo after photo."""
    counts = np.array([len(f) for f in features], dtype=np.int64)
    owner = np.repeat(np.arange(len(features), dtype=np.int32), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    local = (np.arange(int(counts.sum()), dtype=np.int64) - starts).astype(np.int32)
    return owner, local


class DescriptorIndex:
    """All descriptors of a gallery, searchable by nearest neighbour.

    Attributes:
        owner: ``[N] int32`` the gallery photo of each row. local: ``[N] int32`` its row in that photo's features.
        kind: ``"exact"`` or ``"ivf"``.
        width: bytes of the gallery's stored descriptors (:func:`stored_width`; None: no gallery photo).
    """

    def __init__(self, features: Sequence[Features], cfg: SearchConfig, seed: int = 0, progress: bool = False,
                 searched_by: int = 0):
        """``progress``: a line on stderr before FAISS trains its index (the one step here that takes long).
        ``searched_by``: the descriptors that will search it, when known (``index: auto`` then also takes ``ivf``
        when exact search would compare :data:`~whale.keypoints.config.AUTO_IVF_PAIRS` pairs or more)."""
        self.owner, self.local = _rows(features)
        self.width = stored_width(features)
        n = len(self.owner)
        large = n >= AUTO_IVF_FROM or n * searched_by >= AUTO_IVF_PAIRS
        self.kind = cfg.index if cfg.index != "auto" else ("ivf" if large else "exact")
        self._desc = None
        self._index = None
        self._mapped = None  # (rows, start): where the ivf index re-ranks from, when the photos share one file
        if self.kind == "ivf" and n:
            self._mapped = shared_rows(features)
            progress_line(f"indexing {n:,} descriptors of {len(features)} photos (FAISS IVF-PQ"
                          + (", re-ranked from the mapped file)" if self._mapped else ")"), progress)
            self._index = self._build_ivf(features, n, cfg, seed)
        else:
            self._desc = np.concatenate([as_float(f.desc) for f in features]) if n else \
                np.zeros((0, self.width or DESCRIPTOR_WIDTH), np.float32)

    def __len__(self) -> int:
        return len(self.owner)

    def _build_ivf(self, features: Sequence[Features], n: int, cfg: SearchConfig, seed: int):
        """The index, its vectors the stored bytes as float32, ``d`` = :attr:`width` of them: ``d / 2`` 4-bit
        sub-quantizers (module docstring)."""
        faiss = _faiss()
        d = self.width
        nlist = int(np.clip(round(np.sqrt(n)), 16, 4096))
        base = faiss.IndexIVFPQFastScan(faiss.IndexFlatL2(d), d, nlist, d // 2, 4)
        index = base if self._mapped else \
            faiss.IndexRefine(base, faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit_direct))
        take = np.arange(n) if n <= 64 * nlist else np.random.default_rng(seed).choice(n, 64 * nlist, replace=False)
        rows, order = np.unique(take, return_inverse=True)  # gathered in the index's order, trained in the draw's
        index.train(_gather(features, self.owner[rows], self.local[rows], d)[order])
        for start in range(0, n, ADD_ROWS):
            owner, local = self.owner[start:start + ADD_ROWS], self.local[start:start + ADD_ROWS]
            index.add(_gather(features, owner, local, d))
        base.nprobe = min(cfg.nprobe, nlist)
        if not self._mapped:
            index.k_factor = REFINE_FACTOR
        return index

    def _rerank(self, scaled: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(squared distances, rows)``: the index's ``REFINE_FACTOR * k`` candidates of each query re-ranked
        with the exact distances of their bytes in the mapped file, as FAISS's ``IndexRefine`` re-ranks them: the
        stored bytes and queries are integers once scaled, so every sum is exact in float32 in any order, and
        equal distances go by row."""
        rows_of, start = self._mapped
        _, cand = self._index.search(scaled, k * REFINE_FACTOR)
        d2 = np.full((len(scaled), k), np.inf, np.float32)
        rows = np.full((len(scaled), k), -1, np.int64)
        for lo in range(0, len(scaled), RERANK_ROWS):
            c = cand[lo:lo + RERANK_ROWS]
            found = c >= 0
            at = np.where(found, c, 0)
            g = rows_of[(start[self.owner[at]] + self.local[at]).ravel()].reshape(*c.shape, self.width)
            diff = g.astype(np.float32) - scaled[lo:lo + RERANK_ROWS, None, :]
            exact = np.einsum("ijk,ijk->ij", diff, diff)
            exact[~found] = np.inf
            order = np.lexsort((c, exact), axis=1)[:, :k]  # ties by row, as FAISS's heaps break them
            best = np.take_along_axis(exact, order, 1)
            d2[lo:lo + len(c), :order.shape[1]] = best
            rows[lo:lo + len(c), :order.shape[1]] = np.where(np.isfinite(best), np.take_along_axis(c, order, 1), -1)
        return d2, rows

    @property
    def exact(self) -> bool:
        """Whether :meth:`search` is brute force (no FAISS index: ``search.index: exact``)."""
        return self._index is None

    def search(self, desc: np.ndarray, k: int, skip: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(dist, rows)``: the ``k`` nearest gallery rows of each query descriptor.

        Args:
            desc: ``[m, w] float32`` stored descriptors as :func:`whale.keypoints.extract.as_float` gives them,
                ``w`` the gallery's :attr:`width`.
            k: neighbours per descriptor.
            skip: ``[m] int``, the gallery photo whose rows each descriptor must not find (-1: none), as if the
                gallery were without it; only for an :attr:`exact` index (a FAISS one is searched deeper instead:
                :func:`whale.keypoints.matcher.search_without`).

        Returns:
            ``dist`` ``[m, k] float32`` Euclidean distances, ascending; ``rows`` ``[m, k] int64`` gallery
            rows, -1 where the gallery has fewer than ``k`` descriptors (their distance is ``inf``).

        Raises:
            ValueError: ``desc`` is not ``[m, w]`` (descriptors of another kind than the gallery's); ``skip`` with
                a FAISS index.
        """
        m = len(desc)
        if skip is not None and not self.exact:
            raise ValueError("DescriptorIndex.search: skip needs an exact index (search_without searches a FAISS one "
                             "deeper)")
        if self.width is not None and (desc.ndim != 2 or desc.shape[1] != self.width):
            raise ValueError(f"DescriptorIndex.search: expected [m, {self.width}] descriptors (the gallery's width), "
                             f"received {list(desc.shape)}")
        if self._index is not None:
            step = byte_step(self.width)
            # the queries' bytes again: as_float's values are bytes times the step, rounded in float32 (XFeat's)
            scaled = np.rint(np.ascontiguousarray(desc, dtype=np.float32) / step)
            d2, rows = self._rerank(scaled, k) if self._mapped else self._index.search(scaled, k)
            dist = (np.sqrt(np.maximum(d2, 0)) * step).astype(np.float32)
            dist[rows < 0] = np.inf
            return dist, rows.astype(np.int64)
        dist = np.full((m, k), np.inf, np.float32)
        rows = np.full((m, k), -1, np.int64)
        g = self._desc
        if not len(g) or not m:
            return dist, rows
        kk = min(k, len(g))
        g_sq = (g * g).sum(axis=1)
        block = max(1, min(_BLOCK, _EXACT_ENTRIES // len(g)))  # each row's search is its own: the same rows
        for start in range(0, m, block):
            q = desc[start:start + block]
            d2 = np.maximum((q * q).sum(axis=1, keepdims=True) - 2 * (q @ g.T) + g_sq, 0)
            if skip is not None:
                d2[self.owner[None, :] == np.asarray(skip)[start:start + block, None]] = np.inf
            part = np.argpartition(d2, kk - 1, axis=1)[:, :kk] if kk < len(g) else \
                np.broadcast_to(np.arange(len(g)), (len(q), len(g))).copy()
            pd = np.take_along_axis(d2, part, axis=1)
            order = np.argsort(pd, axis=1, kind="stable")
            rows[start:start + len(q), :kk] = np.take_along_axis(part, order, axis=1)
            dist[start:start + len(q), :kk] = np.sqrt(np.take_along_axis(pd, order, axis=1))
        if skip is not None:
            rows[~np.isfinite(dist)] = -1  # fewer than k rows of other photos
        return dist, rows


def shared_rows(features: Sequence[Features]) -> tuple[np.ndarray, np.ndarray] | None:
    """``(rows, start)`` when every photo's descriptors are consecutive rows of one memory-mapped ``[N, w] uint8``
    array ``rows`` (photo ``i``'s from row ``start[i]``), else None."""
    root, start = None, np.zeros(len(features), np.int64)
    for i, f in enumerate(features):
        d = f.desc
        if not len(d):
            continue
        base = d
        while isinstance(base.base, np.ndarray):
            base = base.base
        if not isinstance(base, np.memmap) or base is d or base.ndim != 2 or not d.flags.c_contiguous:
            return None
        if root is None:
            root = base
        elif base is not root:
            return None
        start[i] = (d.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // root.strides[0]
    return None if root is None else (root, start)


def _gather(features: Sequence[Features], owner: np.ndarray, local: np.ndarray,
            width: int | None = None) -> np.ndarray:
    """``[len(owner), w] float32``: the stored bytes of the descriptors ``(owner, local)`` (rows of one photo
    consecutive where they are so in the index: sliced, not gathered one by one); ``w``: ``width``, else the
    photos' (:func:`stored_width`)."""
    width = width or stored_width(features) or DESCRIPTOR_WIDTH
    out = np.empty((len(owner), width), np.float32)
    if not len(owner):
        return out
    cut = np.flatnonzero(np.diff(owner)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(owner)]):
        f, rows = features[owner[lo]], local[lo:hi]
        out[lo:hi] = f.desc[rows[0]:rows[-1] + 1] if (np.diff(rows) == 1).all() else f.desc[rows]
    return out
