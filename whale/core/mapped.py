"""Arrays kept in a memory-mapped file with no name instead of the process's own memory.

:class:`MappedRows` appends fixed-shape rows (a trunk run's maps: :mod:`whale.inference.trunk`) to a file created
in a given folder and unlinked at once, so nothing stays behind, even when the process is killed. Each append hands
back a view of the mapped file. The kernel keeps those pages as it keeps any file's cache: they count in the
resident memory while touched, but under pressure (a memory cgroup, a small machine) it writes them out and reads
them again when needed, where arrays in the process's own memory would have to stay or be killed. What a store of
them costs the process itself is then a few bytes a row, whatever the rows' size.

The file grows in chunks (each mapped once, read-only, never moved), so a view handed out stays valid while later
rows come. Rows are written with ``pwrite`` through the page cache, not through the mapping, after each chunk's blocks
were reserved on the disk (``posix_fallocate``): a full disk is an :class:`~whale.core.errors.OutputError` naming the
folder, never a page of the mapping with nowhere to go (which the kernel answers by killing the process with
``SIGBUS``). Once the rows are in, :meth:`MappedRows.random_access` tells the kernel they are read in no order.
"""
from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

from whale.core.errors import OutputError, describe_write_error

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
        flag: the option that chose ``folder``, which a full disk's message says to change.

    Example:
        >>> rows = MappedRows((2, 3), np.float16)
        >>> block = rows.append(np.ones((4, 2, 3), np.float16))   # 4 rows: a read-only view of the file
        >>> block.shape, float(block.sum()), rows.rows
        ((4, 2, 3), 24.0, 4)
    """

    def __init__(self, shape, dtype, folder=None, chunk_bytes: int = CHUNK_BYTES, flag: str = "folder"):
        self.shape, self.dtype = tuple(int(v) for v in shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.chunk_rows = max(1, int(chunk_bytes) // max(1, self.row_bytes))
        self._file = None
        self._folder, self._flag = folder, flag
        self._where: str | None = None  # the folder the file was made in
        self._chunk: np.ndarray | None = None  # the chunk being filled: a view of its mapping
        self._handles: list[mmap.mmap] = []  # every chunk's mapping
        self._chunk_offset = 0  # its first byte in the file
        self._used = 0  # its rows handed out
        self._size = 0  # the file's bytes
        self.rows = 0
        """Rows handed out so far."""

    def _open(self):
        if self._folder is not None:
            try:
                Path(self._folder).mkdir(parents=True, exist_ok=True)
                self._where = str(self._folder)
                return tempfile.TemporaryFile(dir=self._folder)
            except OSError:
                pass
        self._where = tempfile.gettempdir()
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
        data = memoryview(np.ascontiguousarray(block, dtype=self.dtype)).cast("B")
        at = self._chunk_offset + self._used * self.row_bytes
        while len(data):  # through the page cache, not the mapping: no page faults on pages about to be overwritten
            try:
                written = os.pwrite(self._file.fileno(), data, at)
            except OSError as exc:
                raise self._refused(exc, len(data)) from exc
            data, at = data[written:], at + written
        view = self._chunk[self._used:self._used + n]
        self._used += n
        self.rows += n
        return view

    def random_access(self) -> None:
        """Tell the kernel the rows are now read in no order (``madvise(MADV_RANDOM)``; nothing where the platform
        lacks it): a page it has dropped is then read back alone, not with the next hundred kilobytes, which under
        memory pressure are other rows that push out more. Call it once the rows are in; the appends go on as
        before."""
        advice = getattr(mmap, "MADV_RANDOM", None)
        for handle in self._handles:
            if advice is not None and hasattr(handle, "madvise"):
                handle.madvise(advice)

    def _grow(self, rows: int) -> None:
        if self._file is None:
            self._file = self._open()
        offset = -(-self._size // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY  # where a mapping may start
        size = rows * self.row_bytes
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(self._file.fileno(), offset, size)
            else:  # no way to reserve the blocks here (macOS): the file is only made long enough
                os.ftruncate(self._file.fileno(), offset + size)
        except OSError as exc:
            raise self._refused(exc, size) from exc
        self._size = offset + size
        handle = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ, offset=offset)
        count = rows * int(np.prod(self.shape))
        self._chunk = np.frombuffer(handle, self.dtype, count=count).reshape(rows, *self.shape)
        self._chunk_offset, self._used = offset, 0
        self._handles.append(handle)

    def _refused(self, exc: OSError, size: int) -> OutputError:
        return OutputError(describe_write_error(f"{self._where} (a mapped file of {size / 2 ** 20:,.0f} MB more)",
                                                exc, flag=self._flag))
