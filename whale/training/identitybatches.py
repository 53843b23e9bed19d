"""P x K identity batches for the identity objectives (triplet, global loss, TGLoss, ArcFace).

Seed 002 trains on batches of ``P`` identities with ``K`` images each (15 x 5 for mantas, 15 x 3 for
whales) and mines its triplets inside the batch. :func:`identity_batches` packs one epoch:

- every training image is in the epoch at least once: each identity's images, shuffled, are cut into
  chunks of ``K``; the last chunk is topped up with other images of the same identity, and an identity
  with fewer than ``K`` images repeats its images (the views differ by augmentation). Identities with one
  image are not in the training set (:attr:`whale.data.FoldData.pairs`, as for the paper's pairs);
- every batch has exactly ``P`` chunks, ``P x K`` images (one shape: one compiled train step), of ``P``
  different identities where the epoch allows it; the last batch is topped up with random chunks;
- the adversarial miner seeds the batches: given the mining block's negatives (Algorithm 1, ``(i, x[i])``,
  an image and its mined hard partner of another identity), a batch opened with one identity's chunk is
  filled with chunks of the identities mined as its images' partners (then of their partners), so each
  batch holds identities that the current model confuses. With random negatives (large K) this is a
  random batch; with none it is the seed's random P x K sampler.

:class:`IdentityBatchDataset` is the ``PyDataset`` ``fit`` reads: ``(images [P K, S, S, C] float32,
codes [P K] int32)``, augmentation keyed by ``(seed, epoch, batch, slot)`` so a resumed run sees the same data.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import keras
import numpy as np

from whale.core.arrays import id_codes
from whale.data.augment import build_plain
from whale.imagesize import canonical
from whale.training.imagebatches import load_images

_PURPOSE_AUGMENT_IDS = 104


def _chunks(codes: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    chunks = []
    for code in np.unique(codes):
        members = rng.permutation(np.flatnonzero(codes == code))
        n = len(members)
        for start in range(0, n, k):
            chunk = members[start:start + k]
            if len(chunk) < k:  # top up from the identity's other images (repeating them when n < k)
                others = members[np.arange(k - len(chunk)) % n] if n < k else rng.choice(
                    np.setdiff1d(members, chunk), k - len(chunk), replace=False)
                chunk = np.concatenate([chunk, others])
            chunks.append(chunk)
    return [chunks[i] for i in rng.permutation(len(chunks))]


def identity_batches(ids, ids_per_batch: int, per_id: int, rng: np.random.Generator,
                     negatives: np.ndarray | None = None) -> np.ndarray:
    """One epoch of P x K batches over the images of ``ids``.

    Args:
        ids: ``[n]`` labels of the training images (no ``new_whale``).
        ids_per_batch: P; per_id: K.
        rng: the epoch's generator.
        negatives: optional ``(m, 2)`` int mined pairs ``(i, j)`` of different identities (one epoch of
            :func:`whale.mining.mine_negatives`): batches are filled along them (module docstring).

    Returns:
        ``[n_batches, P * K]`` int64 image indices; every index in ``[0, n)`` appears at least once.
    """
    codes = id_codes(np.asarray(ids))
    p, k = int(ids_per_batch), int(per_id)
    if p < 1 or k < 1:
        raise ValueError(f"identity_batches: P and K must be >= 1, received {p} and {k}")
    if len(codes) == 0:
        raise ValueError("identity_batches: expected at least one training image, received none")
    chunks = _chunks(codes, k, rng)
    by_id: dict[int, deque] = {}
    for c, chunk in enumerate(chunks):
        by_id.setdefault(int(codes[chunk[0]]), deque()).append(c)
    partners: dict[int, list[int]] = {}
    if negatives is not None and len(negatives):
        neg = np.asarray(negatives, np.int64)
        for a, b in zip(codes[neg[:, 0]], codes[neg[:, 1]]):
            partners.setdefault(int(a), []).append(int(b))
    used = np.zeros(len(chunks), bool)
    cursor = [0]  # chunks before it (in the shuffled order) are all used

    def take(code: int) -> int | None:
        queue = by_id.get(code)
        while queue and used[queue[0]]:
            queue.popleft()
        return queue.popleft() if queue else None

    def next_unused(exclude: set) -> int | None:
        while cursor[0] < len(chunks) and used[cursor[0]]:
            cursor[0] += 1
        for c in range(cursor[0], len(chunks)):
            if not used[c] and int(codes[chunks[c][0]]) not in exclude:
                return c
        return None

    batches = []
    while not used.all():
        batch, in_batch, frontier = [], set(), deque()
        while len(batch) < p:
            c = None
            while frontier and c is None:  # the mined partners of the identities already in the batch
                code = frontier.popleft()
                if code not in in_batch:
                    c = take(code)
            if c is None:
                c = next_unused(in_batch)
            if c is None:
                c = next_unused(set())  # only identities already in the batch are left
            if c is None:  # the epoch is used up: top up with random chunks (seen already)
                batch.append(int(rng.integers(len(chunks))))
                continue
            used[c] = True
            batch.append(c)
            code = int(codes[chunks[c][0]])
            in_batch.add(code)
            frontier.extend(partners.get(code, ()))
        batches.append(np.concatenate([chunks[c] for c in batch]))
    return np.asarray(batches, np.int64)


class IdentityBatchDataset(keras.utils.PyDataset):
    """Batches ``(images, codes)`` for ``model.fit`` from :func:`identity_batches`.

    Args:
        store: :class:`whale.data.ImageStore` (or a sequence of ``uint8 [H, W, C]`` images).
        batches: ``[n_batches, B]`` int indices into ``store``.
        codes: ``[len(store)]`` int class codes (the loss's labels; ArcFace's class index).
        image_size, augmenter, seed, epoch, workers: as :class:`whale.training.pairs.PairDataset`.

    Each batch: ``images`` float32 ``[B, S, S, C]`` (0..255), ``codes`` int32 ``[B]``.
    """

    def __init__(self, store, batches: np.ndarray, codes: np.ndarray, image_size,
                 augmenter: Callable | None, seed: int, epoch: int, workers: int = 1,
                 use_multiprocessing: bool = False, max_queue_size: int = 10):
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size)
        self.batches = np.asarray(batches, np.int64)
        self.codes = np.asarray(codes, np.int32)
        if self.batches.ndim != 2 or not self.batches.size:
            raise ValueError(f"batches: expected a non-empty [n_batches, B] array, received {self.batches.shape}")
        if self.batches.min() < 0 or self.batches.max() >= len(store) or len(self.codes) != len(store):
            raise ValueError(f"batches index {len(store)} images with {len(self.codes)} codes; received indices "
                             f"in [{self.batches.min()}, {self.batches.max()}]")
        self.store, self.image_size, self.augmenter = store, canonical(image_size), augmenter
        self.seed, self.epoch = int(seed), int(epoch)
        channels = getattr(store, "channels", None) or np.asarray(store[int(self.batches[0, 0])]).shape[-1]
        self.channels = int(channels)
        self._plain = build_plain(self.image_size, self.channels)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def num_batches(self) -> int:
        return len(self)

    def __getitem__(self, idx: int):
        if not 0 <= idx < len(self):
            raise IndexError(f"batch {idx} out of range for {len(self)} batches")
        rows = self.batches[idx]
        x = load_images(self.store, rows, self.image_size, self.channels, self._plain, self.augmenter,
                        (self.seed, self.epoch, _PURPOSE_AUGMENT_IDS, int(idx)))
        return x, self.codes[rows].copy()


def class_counts(ids) -> np.ndarray:
    """``[n_ids]`` int64 images per identity code (:func:`whale.core.arrays.id_codes` order): ArcFace's classes."""
    return np.bincount(id_codes(np.asarray(ids)))


def epoch_data(store, dataset, cfg, image_size, epoch: int, negatives: np.ndarray | None, augmenter,
               rng: np.random.Generator) -> tuple[IdentityBatchDataset, str]:
    """One epoch of a fold's identity batches for ``fit`` and its line for the log.

    ``dataset``: the :class:`whale.data.FoldData` trained on (``store`` holds its gallery's crops);
    ``cfg``: the run's config (``batch``, ``seed``, ``workers``); ``negatives``: the epoch's mined pairs
    (indices into ``dataset.pairs``) that seed the batches.
    """
    ids = dataset.pairs.ids
    batches = identity_batches(ids, cfg.batch.ids, cfg.batch.per_id, rng, negatives)
    codes = np.zeros(len(store), np.int32)
    codes[dataset.pairs_in_gallery] = id_codes(ids)
    data = IdentityBatchDataset(store, dataset.pairs_in_gallery[batches], codes, image_size, augmenter,
                                seed=cfg.seed, epoch=epoch, workers=cfg.workers)
    return data, describe(batches, len(ids))


def describe(batches: np.ndarray, n_images: int) -> str:
    """One line for the log: ``"12 batches of 32 images (384 slots for 350 images)"``."""
    n, b = batches.shape
    return f"{n} batches of {b} images ({n * b} slots for {n_images} images)"
