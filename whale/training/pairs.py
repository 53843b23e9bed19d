"""Training pairs fed to Keras: one epoch's pairs and the batch sequence ``fit`` reads.

Crops come from a :class:`whale.data.ImageStore`.

- :func:`make_epoch_pairs`: one epoch's positive (label 1) and negative (label 0) pairs, half
  each.
- :class:`PairDataset`: ``keras.utils.PyDataset`` of ``((a, b), y)`` batches for ``fit`` (the
  paper's batching; :mod:`whale.training.imagebatches` has the one that shares images).
  The batch order comes from ``(seed, epoch)`` and every image's augmentation from
  ``(seed, epoch, pair index, side)``, so a batch is the same whatever worker builds it and
  whenever it is built; a resumed run sees the same data as an uninterrupted one.
Keras is imported with this module: the sequence subclasses PyDataset.
"""
from __future__ import annotations

import math
from typing import Callable

import keras
import numpy as np

from whale.data.augment import build_plain
from whale.imagesize import as_hw, canonical

# Third word of the rng seeds ``[seed, epoch, purpose, ...]`` (one stream per use).
_PURPOSE_SHUFFLE = 101
_PURPOSE_AUGMENT = 102


def _check_pairs(pairs: np.ndarray, what: str) -> np.ndarray:
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not (
        pairs.size == 0 or np.issubdtype(pairs.dtype, np.integer)
    ):
        raise ValueError(f"{what}: expected an (n, 2) integer array, received {pairs.dtype} {pairs.shape}")
    return pairs.astype(np.int64, copy=False)


def _resample(pairs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n >= len(pairs)`` rows: every pair once, then extra ones drawn without replacement
    (repeating the whole set as many times as needed)."""
    m = len(pairs)
    reps, rest = divmod(n, m)
    extra = rng.choice(m, size=rest, replace=False)
    return np.concatenate([np.tile(pairs, (reps, 1)), pairs[extra]])


def make_epoch_pairs(
    positive: np.ndarray, negative: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One epoch's training pairs, half positive.

    Args:
        positive: ``(p, 2)`` int image-index pairs of the same id (e.g. ``miner.positive_pairs``).
        negative: ``(q, 2)`` int pairs of different ids (e.g. one epoch of ``mine_negatives``).
        rng: used only when ``p != q``.

    Returns:
        ``pairs`` ``(2 * max(p, q), 2)`` int64 and ``labels`` ``(2 * max(p, q),)`` float32:
        the positives (label 1) first, then the negatives (label 0); :class:`PairDataset`
        shuffles. When ``p != q`` the smaller set is repeated to match the larger one: all of
        its pairs once (or several times), plus a random subset of it. Nothing is dropped, so
        every image keeps all of its negative (and positive) pairs; in the paper's setting
        (positives = one derangement per id, negatives = one LAP match per image over the
        same images) ``p == q`` and both are used as they are.
    """
    pos = _check_pairs(positive, "positive")
    neg = _check_pairs(negative, "negative")
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(
            f"expected at least one positive and one negative pair, received {len(pos)} "
            f"positive and {len(neg)} negative pairs"
        )
    n = max(len(pos), len(neg))
    if len(pos) < n:
        pos = _resample(pos, n, rng)
    if len(neg) < n:
        neg = _resample(neg, n, rng)
    pairs = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(n, np.float32), np.zeros(n, np.float32)])
    return pairs, labels


def check_pair_inputs(store, pairs, labels, batch_size) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs int64 (m, 2), labels float32 (m,))`` checked against ``store`` and ``batch_size``."""
    pairs = _check_pairs(pairs, "pairs")
    labels = np.asarray(labels, dtype=np.float32).reshape(-1)
    if len(labels) != len(pairs):
        raise ValueError(f"expected one label per pair: received {len(pairs)} pairs and {len(labels)} labels")
    if len(pairs) == 0:
        raise ValueError("expected at least one pair, received none")
    if pairs.min() < 0 or pairs.max() >= len(store):
        raise ValueError(
            f"pair indices must be in [0, {len(store)}), received values in "
            f"[{pairs.min()}, {pairs.max()}]"
        )
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: expected a positive integer, received {batch_size!r}")
    return pairs, labels


def _item_rng(seed: int, epoch: int, index: int, side: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(epoch), _PURPOSE_AUGMENT, int(index), int(side)])


class PairDataset(keras.utils.PyDataset):
    """Batches of image pairs for ``model.fit``: ``((a, b), y)``.

    Args:
        store: :class:`whale.data.ImageStore` (or any sequence of ``uint8 [H, W, C]`` images).
        pairs: ``(m, 2)`` int indices into ``store``.
        labels: ``(m,)`` float (1 = same id, 0 = different ids).
        image_size: model input side S, or ``(height, width)``.
        augmenter: ``aug(uint8 image, rng) -> uint8 [S, S, C]`` (see :mod:`whale.data.augment`), or
            None for resize only. The two images of a pair are augmented independently.
        batch_size: pairs per batch. The last batch is topped up with the first pairs of the
            epoch's order, so every batch is full: BatchNorm never sees a batch of one, and
            under a multi-replica strategy no replica gets an empty slice.
        seed, epoch: fix the order (``shuffle``) and the augmentation of every item.
        shuffle: shuffle the pairs (by ``(seed, epoch)``); False keeps the given order.
        workers, use_multiprocessing, max_queue_size: passed to ``keras.utils.PyDataset``.

    Each batch: ``a``, ``b`` float32 ``[B, S, S, C]`` (pixel values 0..255), ``y`` float32 ``[B, 1]``.
    Build one dataset per epoch (the pairs change every epoch anyway).
    """

    def __init__(
        self,
        store,
        pairs: np.ndarray,
        labels: np.ndarray,
        image_size,
        augmenter: Callable | None,
        batch_size: int,
        seed: int,
        epoch: int,
        shuffle: bool = True,
        workers: int = 1,
        use_multiprocessing: bool = False,
        max_queue_size: int = 10,
    ):
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size)
        pairs, labels = check_pair_inputs(store, pairs, labels, batch_size)
        self.store = store
        self.pairs = pairs
        self.labels = labels
        self.image_size = canonical(image_size)
        self.augmenter = augmenter
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.epoch = int(epoch)
        channels = getattr(store, "channels", None) or np.asarray(store[int(pairs[0, 0])]).shape[-1]
        self.channels = int(channels)
        self._plain = build_plain(self.image_size, self.channels)
        if shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, _PURPOSE_SHUFFLE])
            self.order = rng.permutation(len(pairs))
        else:
            self.order = np.arange(len(pairs))

    def __len__(self) -> int:
        return math.ceil(len(self.pairs) / self.batch_size)

    @property
    def num_batches(self) -> int:
        return len(self)

    def _image(self, pair_index: int, side: int) -> np.ndarray:
        img = self.store[int(self.pairs[pair_index, side])]
        if self.augmenter is None:
            return self._plain(img)
        return self.augmenter(img, _item_rng(self.seed, self.epoch, pair_index, side))

    def __getitem__(self, idx: int):
        """Batch ``idx``: ``((a, b), y)``, a/b float32 ``[B, S, S, C]``, y float32 ``[B, 1]``."""
        if not 0 <= idx < len(self):
            raise IndexError(f"batch {idx} out of range for {len(self)} batches")
        rows = self.order[idx * self.batch_size : (idx + 1) * self.batch_size]
        short = min(self.batch_size, len(self.order)) - len(rows)
        if short > 0:
            rows = np.concatenate([rows, self.order[:short]])
        shape = (len(rows), *as_hw(self.image_size), self.channels)
        a = np.empty(shape, np.float32)
        b = np.empty(shape, np.float32)
        for j, r in enumerate(rows):
            a[j] = self._image(r, 0)
            b[j] = self._image(r, 1)
        y = self.labels[rows].reshape(-1, 1).copy()
        return (a, b), y
