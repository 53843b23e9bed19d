"""Nearest gallery descriptors of query descriptors: exact (NumPy) or FAISS IVF-PQ fast scan re-ranked exactly.

Every gallery photo's descriptors go into one index; each row remembers its photo (``owner``) and its
position in that photo's features (``local``). ``exact`` compares every pair in blocks of BLAS matrix
products (small galleries, tests); ``ivf`` (FAISS: ``IndexIVFPQFastScan`` inside ``IndexRefineFlat``)
visits ``nprobe`` inverted lists of 4-bit product-quantised codes and re-ranks its candidates with the
exact distances, so the distances LNBNN weighs are exact for the neighbours it returns.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from whale.core.errors import DataError
from whale.core.progress import progress_line
from whale.keypoints.config import AUTO_IVF_FROM, SearchConfig
from whale.keypoints.extract import Features, as_float

_BLOCK = 4096  # query rows per exact block: bounds the [block, n] distance matrix
REFINE_FACTOR = 4
"""IVF candidates per neighbour asked for, re-ranked with exact distances."""


def _faiss():
    try:
        import faiss
    except ImportError:
        raise DataError("search.index ivf needs FAISS: pip install faiss-cpu (requirements.txt pins it)") from None
    return faiss


class DescriptorIndex:
    """All descriptors of a gallery, searchable by nearest neighbour.

    Attributes:
        owner: ``[N] int64`` the gallery photo of each row. local: ``[N] int64`` its row in that photo's features.
        kind: ``"exact"`` or ``"ivf"``.
    """

    def __init__(self, features: Sequence[Features], cfg: SearchConfig, seed: int = 0, progress: bool = False):
        """``progress``: a line on stderr before FAISS trains its index (the one step here that takes long)."""
        counts = np.array([len(f) for f in features], dtype=np.int64)
        self.owner = np.repeat(np.arange(len(features), dtype=np.int64), counts)
        self.local = np.concatenate([np.arange(c, dtype=np.int64) for c in counts]) if len(counts) else \
            np.zeros(0, np.int64)
        n = int(counts.sum())
        self.kind = cfg.index if cfg.index != "auto" else ("ivf" if n >= AUTO_IVF_FROM else "exact")
        self._desc = np.concatenate([as_float(f.desc) for f in features]) if n else np.zeros((0, 128), np.float32)
        self._index = None
        if self.kind == "ivf" and n:
            progress_line(f"indexing {n:,} descriptors of {len(features)} photos (FAISS IVF-PQ)", progress)
            self._index = self._build_ivf(cfg, seed)

    def __len__(self) -> int:
        return len(self.owner)

    def _build_ivf(self, cfg: SearchConfig, seed: int):
        faiss = _faiss()
        n = len(self._desc)
        nlist = int(np.clip(round(np.sqrt(n)), 16, 4096))
        quantiser = faiss.IndexFlatL2(128)
        base = faiss.IndexIVFPQFastScan(quantiser, 128, nlist, 64, 4)
        index = faiss.IndexRefineFlat(base)
        sample = self._desc
        if n > 64 * nlist:
            sample = self._desc[np.random.default_rng(seed).choice(n, 64 * nlist, replace=False)]
        index.train(sample)
        index.add(self._desc)
        base.nprobe = min(cfg.nprobe, nlist)
        index.k_factor = REFINE_FACTOR
        self._desc = None  # the refine index holds its own copy
        return index

    def search(self, desc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(dist, rows)``: the ``k`` nearest gallery rows of each query descriptor.

        Args:
            desc: ``[m, 128] float32`` RootSIFT (:func:`whale.keypoints.extract.as_float`).
            k: neighbours per descriptor.

        Returns:
            ``dist`` ``[m, k] float32`` Euclidean distances, ascending; ``rows`` ``[m, k] int64`` gallery
            rows, -1 where the gallery has fewer than ``k`` descriptors (their distance is ``inf``).
        """
        m = len(desc)
        if self._index is not None:
            d2, rows = self._index.search(np.ascontiguousarray(desc, dtype=np.float32), k)
            dist = np.sqrt(np.maximum(d2, 0)).astype(np.float32)
            dist[rows < 0] = np.inf
            return dist, rows.astype(np.int64)
        dist = np.full((m, k), np.inf, np.float32)
        rows = np.full((m, k), -1, np.int64)
        g = self._desc
        if not len(g) or not m:
            return dist, rows
        kk = min(k, len(g))
        g_sq = (g * g).sum(axis=1)
        for start in range(0, m, _BLOCK):
            q = desc[start:start + _BLOCK]
            d2 = np.maximum((q * q).sum(axis=1, keepdims=True) - 2 * (q @ g.T) + g_sq, 0)
            part = np.argpartition(d2, kk - 1, axis=1)[:, :kk] if kk < len(g) else \
                np.broadcast_to(np.arange(len(g)), (len(q), len(g))).copy()
            pd = np.take_along_axis(d2, part, axis=1)
            order = np.argsort(pd, axis=1, kind="stable")
            rows[start:start + len(q), :kk] = np.take_along_axis(part, order, axis=1)
            dist[start:start + len(q), :kk] = np.sqrt(np.take_along_axis(pd, order, axis=1))
        return dist, rows
