"""Branch features of images: box crops in fixed-size batches, through the branch, once per image.

:class:`ImageBatches` serves un-augmented crops (the same crops training sees, resized to
the model's input) as a Keras ``PyDataset``; :func:`compute_features` runs the branch on
them and returns ``[n, d] float32``.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import keras
import numpy as np

from whale.data.augment import build_view
from whale.imagesize import as_hw, canonical
from whale.core.progress import progress_bar


def first_batch_excess(seconds: list[float]) -> float:
    """How much longer the first of ``seconds`` (per-batch times) took than the median of the others: the one-off
    cost of the first call (tracing and compiling a function: a minute or more for a large network on a GPU);
    0 with fewer than two batches."""
    if len(seconds) < 2:
        return 0.0
    return max(0.0, float(seconds[0] - np.median(seconds[1:])))


def compute_features(branch, batches, n: int | None = None, batch_size: int = 64, progress: bool = True,
                     timing: dict | None = None, pad: bool | None = None):
    """Branch features of every image, computed once, batch by batch.

    Args:
        branch: Keras model, float32 images ``[b, S, S, C]`` (raw 0..255) -> ``[b, d]``.
        batches: an iterable of float32 image batches ``[b, S, S, C]`` (or ``(x, ...)``
            tuples, whose first element is used), a ``keras.utils.PyDataset``, or one
            ``[n, S, S, C]`` array that is cut into ``batch_size`` batches.
        n: number of images expected in total (progress bar; checked at the end). ``None``:
            not checked.
        batch_size: batch size when ``batches`` is one array.
        progress: show a tqdm bar.
        timing: where given, ``timing["compile_s"]`` grows by :func:`first_batch_excess` of the batches.
        pad: whether short batches run padded (below); ``None``: under JAX only.

    Returns:
        ``[n, d]`` float32.

    Under JAX a batch smaller than the pass's batch size (``batch_size``, the dataset's ``batch_size``, else the
    first batch's size) runs padded to it with copies of its last image, and only its own rows are kept: there
    each new batch shape is another compile of the branch (a minute or more for EfficientNet-Lite0 at 224 x 448 on
    a GPU, docs/gpu.md), and every pass's last batch would be one. On TensorFlow the batches run as they come.
    """
    full = 0  # the pass's batch size: 0 until known (then the first batch's)
    if isinstance(batches, np.ndarray):
        arr = batches
        full = int(batch_size)
        if arr.ndim != 4:
            raise ValueError(f"batches: expected an [n, S, S, C] image array, received shape {arr.shape}")
        n = arr.shape[0] if n is None else n
        batches = (arr[i : i + batch_size] for i in range(0, arr.shape[0], batch_size))
        total = math.ceil(arr.shape[0] / batch_size)
    elif hasattr(batches, "__getitem__") and hasattr(batches, "__len__") and not isinstance(batches, (list, tuple)):
        ds = batches  # keras PyDataset (or any Sequence-like of batches)
        total = len(ds)
        full = int(getattr(ds, "batch_size", 0) or 0)
        batches = (ds[i] for i in range(total))
    else:
        total = len(batches) if hasattr(batches, "__len__") else None

    out, seconds = [], []
    count = 0
    pad = keras.backend.backend() == "jax" if pad is None else bool(pad)
    multi_device = _replicas(branch) > 1
    t0 = time.perf_counter()
    for batch in progress_bar(batches, total=total, desc="features", enabled=progress):
        if isinstance(batch, (tuple, list)):
            batch = batch[0]
        x = np.asarray(batch, dtype=np.float32)
        rows = x.shape[0]
        full = full or rows
        if pad and 0 < rows < full:
            x = np.concatenate([x, np.repeat(x[-1:], full - rows, axis=0)])
        # Under a multi-replica MirroredStrategy, Keras 3.15's predict_on_batch returns each
        # row once per replica and predict() fails on batches smaller than the replica
        # count; a direct call runs the batch whole on one device.
        if multi_device:
            f = np.asarray(branch(x, training=False), dtype=np.float32)
        else:
            f = np.asarray(branch.predict_on_batch(x), dtype=np.float32)
        if f.ndim != 2 or f.shape[0] != x.shape[0]:
            raise ValueError(f"branch: expected [b, d] features for a batch of {x.shape[0]}, received {f.shape}")
        f = f[:rows]
        out.append(f)
        count += f.shape[0]
        seconds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
    if n is not None and count != n:
        raise ValueError(f"batches: expected {n} images in total, received {count}")
    if not out:
        raise ValueError("batches: expected at least one batch of images, received none")
    if timing is not None:
        timing["compile_s"] = timing.get("compile_s", 0.0) + first_batch_excess(seconds)
    return np.concatenate(out, axis=0)


def _replicas(model) -> int:
    """Devices the model's batches are split over: ``model.distribute_strategy`` on TensorFlow,
    the global ``keras.distribution`` on JAX (set by ``strategy_scope``), else 1."""
    strategy = getattr(model, "distribute_strategy", None)
    if strategy is not None:
        return int(strategy.num_replicas_in_sync)
    dist = keras.distribution.distribution()
    mesh = getattr(dist, "device_mesh", None)
    return int(mesh.devices.size) if mesh is not None else 1


class ImageBatches(keras.utils.PyDataset):
    """Plain (resized, un-augmented) images of ``store`` at ``indices``, in order, for predict.

    ``ImageBatches(store, indices, image_size, batch_size=64, ...)``; ``indices=None`` means
    every image of the store. Each batch: float32 ``[B, S, S, C]`` (0..255; ``[B, h, w, C]`` for
    ``image_size=(h, w)``); the last batch may be smaller. ``view``: ``plain`` (resized) or a test-time view of
    :func:`whale.data.augment.build_view`; ``plain``: a function of ``store[i]`` in its place (a trunk run's
    maps: :func:`whale.inference.trunk.first_view`).
    """

    def __init__(
        self,
        store,
        indices: Sequence[int] | np.ndarray | None,
        image_size,
        batch_size: int = 64,
        workers: int = 1,
        use_multiprocessing: bool = False,
        max_queue_size: int = 10,
        view: str = "plain",
        plain=None,
    ):
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size)
        self.store = store
        self.indices = np.arange(len(store)) if indices is None else np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(self.indices) and (self.indices.min() < 0 or self.indices.max() >= len(store)):
            raise ValueError(f"indices must be in [0, {len(store)}), received {self.indices.min()}..{self.indices.max()}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size: expected a positive integer, received {batch_size!r}")
        self.image_size = canonical(image_size)
        self.batch_size = int(batch_size)
        channels = getattr(store, "channels", None)
        if channels is None:
            channels = np.asarray(store[int(self.indices[0])]).shape[-1] if len(self.indices) else 3
        self.channels = int(channels)
        self._plain = build_view(view, self.image_size, self.channels) if plain is None else plain

    def __len__(self) -> int:
        return math.ceil(len(self.indices) / self.batch_size)

    @property
    def num_batches(self) -> int:
        return len(self)

    def __getitem__(self, idx: int) -> np.ndarray:
        """Batch ``idx``: float32 ``[B, S, S, C]``."""
        if not 0 <= idx < len(self):
            raise IndexError(f"batch {idx} out of range for {len(self)} batches")
        rows = self.indices[idx * self.batch_size : (idx + 1) * self.batch_size]
        out = np.empty((len(rows), *as_hw(self.image_size), self.channels), np.float32)
        for j, i in enumerate(rows):
            out[j] = self._plain(self.store[int(i)])
        return out


class ChainedBatches:
    """The batches of several :class:`ImageBatches` one after another, as one dataset for :func:`compute_features`
    (one pass, one progress bar): ``ChainedBatches([a, b])[len(a)]`` is ``b[0]``. Their ``batch_size`` is the
    first one's (under JAX each part's short last batch runs padded to it)."""

    def __init__(self, parts: Sequence[ImageBatches]):
        if not parts:
            raise ValueError("ChainedBatches: expected at least one ImageBatches, received none")
        self.parts, self.batch_size = list(parts), parts[0].batch_size
        self._starts = np.cumsum([0] + [len(p) for p in self.parts])  # each part's first batch in the chain

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, idx: int) -> np.ndarray:
        """Batch ``idx`` of the chain: the batch of the part it falls in."""
        if not 0 <= idx < len(self):
            raise IndexError(f"batch {idx} out of range for {len(self)} batches")
        part = int(np.searchsorted(self._starts, idx, side="right")) - 1
        return self.parts[part][idx - int(self._starts[part])]
