"""Arrays kept in a memory-mapped file with no name instead of the process's own memory.

:class:`MappedRows` appends fixed-shape rows (a trunk run's maps: :mod:`whale.inference.trunk`) to a file created
in a given folder and unlinked at once, so nothing stays behind, even when the process is killed. Each append hands
back a view of the mapped file. The kernel keeps those pages as it keeps any file's cache: they count in the
resident memory while touched, but under pressure (a memory cgroup, a small machine) it writes them out and reads
them again when needed, where arrays in the process's own memory would have to stay or be killed. What a store of
them costs the process itself is then a few bytes a row, whatever the rows' size.

The file grows in chunks (each mapped once, never moved), so a view handed out stays valid while later rows come.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

CHUNK_BYTES = 64 * 2 ** 20
"""The file grows by about this much at a time (one mapping each); a chunk holds at least one append."""


class MappedRows:
    """Rows of ``shape`` and ``dtype`` appended to one unnamed file and memory-mapped.

    Args:
        shape: one row's shape (e.g. a trunk map's ``(h, w, c)``).
        dtype: the rows' type.
        folder: where the file is made: a folder on disk (a cache's), not a RAM-backed temporary folder, so the
            kernel can write the pages out; the system's temporary folder when None or when ``folder`` cannot take
            it.
        chunk_bytes: bytes the file grows by at a time (tests make it small).

    Example:
        >>> rows = MappedRows((2, 3), np.float16)
        >>> block = rows.append(np.ones((4, 2, 3), np.float16))   # 4 rows: a read-only view of the file
        >>> block.shape, float(block.sum()), rows.rows
        ((4, 2, 3), 24.0, 4)
    """

    def __init__(self, shape, dtype, folder=None, chunk_bytes: int = CHUNK_BYTES):
        self.shape, self.dtype = tuple(int(v) for v in shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.chunk_rows = max(1, int(chunk_bytes) // max(1, self.row_bytes))
        self._file = None
        self._folder = folder
        self._chunk: np.memmap | None = None  # the chunk being filled
        self._used = 0  # its rows handed out
        self._size = 0  # the file's bytes
        self.rows = 0
        """Rows handed out so far."""

    def _open(self):
        if self._folder is not None:
            try:
                Path(self._folder).mkdir(parents=True, exist_ok=True)
                return tempfile.TemporaryFile(dir=self._folder)
            except OSError:
                pass
        return tempfile.TemporaryFile()

    def __deepcopy__(self, memo) -> "MappedRows":
        return self  # one file, not copied: the views handed out name it

    def append(self, block: np.ndarray) -> np.ndarray:
        """``block`` (``[n, *shape]``, cast to ``dtype``) written to the file: its ``[n, *shape]`` read-only view
        there, consecutive rows of one chunk.

        Raises:
            ValueError: ``block``'s rows are not of ``shape``."""
        block = np.asarray(block)
        if block.ndim != 1 + len(self.shape) or tuple(block.shape[1:]) != self.shape:
            raise ValueError(f"MappedRows.append: expected rows of shape {list(self.shape)}, got an array of "
                             f"shape {list(block.shape)}")
        n = len(block)
        if self._chunk is None or self._used + n > len(self._chunk):
            self._grow(max(n, self.chunk_rows))
        view = self._chunk[self._used:self._used + n]
        view[...] = block
        self._used += n
        self.rows += n
        out = view.view(np.ndarray)
        out.flags.writeable = False
        return out

    def _grow(self, rows: int) -> None:
        if self._file is None:
            self._file = self._open()
        offset = self._size
        self._size += rows * self.row_bytes
        os.ftruncate(self._file.fileno(), self._size)
        self._chunk = np.memmap(self._file, dtype=self.dtype, mode="r+", offset=offset, shape=(rows, *self.shape))
        self._used = 0
