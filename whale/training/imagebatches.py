"""Batches that run the branch once per image: ``batching: images``.

In the paper's form (:class:`whale.training.pairs.PairDataset`) a batch of ``B`` pairs feeds
``2B`` images to the branch, each augmented on its own. Yet every epoch of Algorithm 1 uses each
training image three or four times: as the first image of its positive pair, as the partner in
another positive pair of its id, as the first image of its mined negative, and as someone's mined
negative. Here a batch holds at most ``B`` images and ``B`` pairs that index into them
(the ``shared`` siamese model, :func:`whale.models.build_siamese`), so the branch computes about
half as many images for the same pairs.

:func:`pack_pairs` orders the epoch's pairs so that pairs sharing images fall into one batch: it
walks the cycles of the positive derangement (``a -> b -> c -> a`` inside one id), putting each
image's positive pair and its negative pair(s) next to each other; a cycle of ``k`` images then
needs ``2k`` pairs and at most ``2k`` images. Batches are filled greedily up to ``B`` pairs and
``B`` images; what is left of a batch is padding: pairs with weight 0 and images repeated from the
batch (so BatchNorm sees real images). The pairs, their labels and the mining are exactly those
of the paper's form; what differs is which pairs share a batch, and that an image keeps one
augmentation for all its pairs in a batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import keras
import numpy as np

from whale.data.augment import build_plain
from whale.imagesize import as_hw, canonical
from whale.training.pairs import _PURPOSE_SHUFFLE, check_pair_inputs

# Third word of the augmentation seeds (PairDataset's streams use 101 and 102).
_PURPOSE_AUGMENT_IMAGES = 103


@dataclass(frozen=True)
class PackedPairs:
    """An epoch's pairs packed into batches of ``B`` image slots and ``B`` pair slots.

    ``images [n, B]`` store indices; ``index [n, B, 2]`` int32 rows into that batch's images;
    ``labels``, ``weights`` ``[n, B]`` float32 (weight 0 = padding); ``rows [n, B]`` the pair
    each slot holds (-1 for padding). ``unique_images``: images the batches hold, padding left out.
    """

    images: np.ndarray
    index: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    rows: np.ndarray
    unique_images: int

    @property
    def num_pairs(self) -> int:
        return int((self.weights > 0).sum())

    @property
    def images_per_pair(self) -> float:
        """Branch passes per real pair, padding included (the paper's form: 2)."""
        return self.images.size / max(self.num_pairs, 1)


def _walk_order(pairs: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Row order: positive-derangement cycles from random starts, each image's rows together."""
    rows_of: dict[int, list[int]] = {}
    for r in np.flatnonzero(labels > 0.5).tolist() + np.flatnonzero(labels <= 0.5).tolist():
        rows_of.setdefault(int(pairs[r, 0]), []).append(r)  # positives first
    successor = {a: int(pairs[rs[0], 1]) for a, rs in rows_of.items() if labels[rs[0]] > 0.5}
    starts = np.fromiter(rows_of, dtype=np.int64)
    order, seen = [], set()
    for start in starts[rng.permutation(len(starts))].tolist():
        image = start
        while image in rows_of and image not in seen:
            seen.add(image)
            order.extend(rows_of[image])
            image = successor.get(image, -1)
    return order


def pack_pairs(pairs: np.ndarray, labels: np.ndarray, batch_size: int,
               rng: np.random.Generator) -> PackedPairs:
    """Pack ``(m, 2)`` store-index ``pairs`` and their ``labels`` into batches (see the module).

    Every pair lands in exactly one batch once. ``batch_size`` ``B >= 2`` is both the pairs and
    the images of a batch.
    """
    pairs, labels = np.asarray(pairs, np.int64), np.asarray(labels, np.float32).reshape(-1)
    B = int(batch_size)
    if B < 2:
        raise ValueError(f"batching: images needs batch_size >= 2 (a pair has two images), received {B}")
    batches: list[tuple[list[int], dict[int, int]]] = [([], {})]
    for r in _walk_order(pairs, labels, rng):
        rows, slots = batches[-1]
        new = {int(x) for x in pairs[r]} - slots.keys()
        if len(rows) == B or len(slots) + len(new) > B:
            rows, slots = [], {}
            batches.append((rows, slots))
            new = {int(x) for x in pairs[r]}
        for x in sorted(new):
            slots[x] = len(slots)
        rows.append(r)
    n = len(batches)
    out = PackedPairs(images=np.zeros((n, B), np.int64), index=np.zeros((n, B, 2), np.int32),
                      labels=np.zeros((n, B), np.float32), weights=np.zeros((n, B), np.float32),
                      rows=np.full((n, B), -1, np.int64), unique_images=sum(len(s) for _, s in batches))
    for i, (rows, slots) in enumerate(batches):
        held = np.fromiter(slots, np.int64, len(slots))
        out.images[i] = np.resize(held, B)  # padding slots repeat the batch's own images
        k = len(rows)
        out.index[i, :k] = [[slots[int(a)], slots[int(b)]] for a, b in pairs[rows]]
        out.labels[i, :k], out.weights[i, :k], out.rows[i, :k] = labels[rows], 1.0, rows
    return out


def load_images(store, rows, image_size, channels: int, plain: Callable, augmenter: Callable | None,
                keys: tuple[int, ...]) -> np.ndarray:
    """``float32 [len(rows), S, S, C]`` (0..255; ``image_size`` ``S`` or ``(h, w)``): the crops ``store[rows]``, resized by ``plain`` or augmented
    with the generator of ``(*keys, slot)`` (keys: seed, epoch, purpose, batch), whatever worker builds them."""
    x = np.empty((len(rows), *as_hw(image_size), channels), np.float32)
    for j, r in enumerate(rows):
        img = store[int(r)]
        x[j] = plain(img) if augmenter is None else augmenter(img, np.random.default_rng([*keys, j]))
    return x


class ImageBatchDataset(keras.utils.PyDataset):
    """Batches ``((images, pair_index), y, weight)`` for the ``shared`` siamese model's ``fit``.

    Same arguments as :class:`whale.training.pairs.PairDataset` (``batch_size`` counts pairs and
    images alike); the packing comes from ``(seed, epoch)`` and each image slot's augmentation
    from ``(seed, epoch, batch, slot)``, so a batch is the same whichever worker builds it and
    whenever (a resumed run sees the same data). ``images`` float32 ``[B, S, S, C]`` (0..255),
    ``pair_index`` int32 ``[B, 2]``, ``y`` float32 ``[B, 1]``, ``weight`` float32 ``[B]``.
    """

    def __init__(self, store, pairs: np.ndarray, labels: np.ndarray, image_size,
                 augmenter: Callable | None, batch_size: int, seed: int, epoch: int,
                 workers: int = 1, use_multiprocessing: bool = False, max_queue_size: int = 10):
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size)
        pairs, labels = check_pair_inputs(store, pairs, labels, batch_size)
        self.store, self.image_size, self.augmenter = store, canonical(image_size), augmenter
        self.seed, self.epoch = int(seed), int(epoch)
        self.packed = pack_pairs(pairs, labels, batch_size,
                                 np.random.default_rng([self.seed, self.epoch, _PURPOSE_SHUFFLE]))
        channels = getattr(store, "channels", None) or np.asarray(store[int(pairs[0, 0])]).shape[-1]
        self.channels = int(channels)
        self._plain = build_plain(self.image_size, self.channels)

    def __len__(self) -> int:
        return len(self.packed.images)

    @property
    def num_batches(self) -> int:
        return len(self)

    def __getitem__(self, idx: int):
        if not 0 <= idx < len(self):
            raise IndexError(f"batch {idx} out of range for {len(self)} batches")
        p = self.packed
        x = load_images(self.store, p.images[idx], self.image_size, self.channels, self._plain, self.augmenter,
                        (self.seed, self.epoch, _PURPOSE_AUGMENT_IMAGES, int(idx)))
        return (x, p.index[idx].copy()), p.labels[idx].reshape(-1, 1).copy(), p.weights[idx].copy()


def describe(packed: PackedPairs) -> str:
    """``"882 pairs in 29 batches, 1.05 images per pair (paper's batching: 2)"`` for the epoch's log line."""
    return (f"{packed.num_pairs} pairs in {len(packed.images)} batches, "
            f"{packed.images_per_pair:.2f} images per pair (paper's batching: 2)")
