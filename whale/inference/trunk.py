"""Trunk maps: each photo through a run's frozen trunk once, kept by content (:mod:`whale.models.trunk`).

A run with ``trunk: {layer: L, views: V}`` trains and scores its branch's top on the maps of its trunk (the
branch up to layer ``L``). :class:`TrunkMaps` computes them for a list of photos: the plain crop's map (what
scoring and validation read) and, for the photos a run trains on, the maps of ``V`` augmented crops (the
training's augmentation, drawn once per photo and view: each epoch then picks one of them, as an augmenter
draws a new crop). Maps are ``float16``, kept in a memory-mapped file with no name (:class:`whale.core.mapped.
MappedRows`, made in the cache folder: the kernel can drop their pages under pressure and read them again, so a
competition-sized store does not have to fit in the process's own memory) and, with a ``cache`` folder, on disk by
the photo's content (SHA-1 of its bytes and its box) under a folder named by everything that makes a map
(:meth:`TrunkMaps.fingerprint`: the branch, its weights, the cut, input size, channels, crop rule, margin,
views, augmentation): runs and split seeds on the same photos share them, and a killed run resumes without
computing them again.

Each map file is a sealed array file (:mod:`whale.core.sealed`): the maps with the photo's key and the kind of
view they are, under a content hash written with them. A file that is empty, cut short, altered (a map of zeros
or NaN, another photo's maps, bytes flipped), of the wrong shape or not finite is never trained on nor scored: it
is computed again and replaced, with one line naming it (:attr:`TrunkMaps.notes`).
"""
from __future__ import annotations

import hashlib
import json
import random
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from whale.core.files import atomic_write
from whale.core.mapped import MappedRows
from whale.core.progress import progress_bar
from whale.core.sealed import SealError, read_sealed, write_sealed

FORMAT = 2
"""The layout of the cache folder; a new one makes a new fingerprint (1: plain ``.npy`` maps, never read now)."""


def first_view(maps: np.ndarray) -> np.ndarray:
    """``float32 [h, w, c]``: the plain crop's map of a photo's ``[1 + V, h, w, c]`` maps (the ``plain`` of a
    trunk run's batches)."""
    return np.asarray(maps[0], np.float32)


def any_view(maps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``float32 [h, w, c]``: one of a photo's ``V`` augmented views, drawn with ``rng`` (the plain one when it has
    none): a trunk run's augmenter."""
    return np.asarray(maps[int(rng.integers(1, len(maps))) if len(maps) > 1 else 0], np.float32)


def trunk_reader(augment: bool):
    """A trunk run's augmenter: :func:`any_view` (``augment``), else the plain view whatever the generator."""
    return any_view if augment else (lambda maps, rng: first_view(maps))


class MapStore:
    """``store[i]`` -> ``float16 [1 + V, h, w, c]``: the maps of photo ``i`` (plain first); a drop-in for an
    :class:`whale.data.ImageStore` in the training and scoring batches, with :func:`first_view` as their plain
    resize and :func:`any_view` as their augmenter."""

    def __init__(self, maps: list[np.ndarray]):
        self._maps = maps
        self.channels = int(maps[0].shape[-1]) if maps else 0

    def __len__(self) -> int:
        return len(self._maps)

    def __getitem__(self, i: int) -> np.ndarray:
        return self._maps[int(i)]

    @property
    def map_size(self) -> tuple[int, int]:
        return tuple(int(v) for v in self._maps[0].shape[1:3])


@contextmanager
def seeded_draws(seed: int | None):
    """Python's ``random`` seeded with ``seed`` inside (None: left alone), its state given back after. Keras draws
    the seed of every initializer given none from it, so a branch built inside has the same weights at each build
    (those ``keras.utils.set_random_seed(seed)`` gives), while the caller's streams (Python's, NumPy's, the
    backend's) go on as if nothing had been built."""
    if seed is None:
        yield
        return
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


class TrunkMaps:
    """The maps of photos through ``trunk`` (a frozen model, raw pixels -> maps).

    Args:
        trunk: from :func:`whale.models.trunk.split_branch`.
        image_size: ``(height, width)`` of its input.
        channels, margin, crop: how a photo becomes the trunk's input (:func:`whale.data.images.load_crop` at
            :func:`whale.data.crop_size_for` of ``image_size``, then the plain resize or the augmenter).
        views: augmented views per training photo; ``augment_style``: :func:`whale.data.augment.build_augmenter`'s.
        identity: what else makes the maps what they are (branch, weights, cut), for :meth:`fingerprint`.
        cache: a folder to keep them in (None: memory only).
        log: where a line about a cache file that is not used goes (None: stderr); each is kept in :attr:`notes`.
    """

    def __init__(self, trunk, image_size, channels: int, margin: float, crop: str, views: int,
                 augment_style: str, identity: dict, cache=None, batch_size: int = 32, progress: bool = True,
                 log=None):
        self.trunk, self.image_size = trunk, tuple(int(v) for v in image_size)
        self.channels, self.margin, self.crop, self.views = int(channels), float(margin), crop, int(views)
        self.augment_style, self.identity, self.batch_size, self.progress = augment_style, identity, batch_size, progress
        self.folder = None if cache is None else Path(cache) / self.fingerprint()[:16]
        self._memory: dict[tuple[str, str], np.ndarray] = {}  # views of self._rows
        self._joined: dict[str, np.ndarray] = {}  # a training photo's [1 + V] maps, which both kinds' entries view
        self._rows: MappedRows | None = None
        self._log = log
        self.notes: list[str] = []
        """One line per cache file found unusable and computed again."""

    @classmethod
    def for_config(cls, cfg, cache=None, progress: bool = True) -> tuple["TrunkMaps", object]:
        """``(maps, top)`` of a trunk run's config: its branch built (with its weights), cut at ``trunk.layer``."""
        from whale.imagesize import input_size
        from whale.models import build_branch
        from whale.models.trunk import split_branch

        size = input_size(cfg.stages[0].image_size, cfg.aspect)
        m = cfg.model
        # a frozen trunk of random weights: the same ones at every build (training, a resumed run, scoring, the
        # catalogue), as the maps cached under its fingerprint are
        with seeded_draws(cfg.seed if m.weights is None else None):
            branch = build_branch(m.branch, (*size, m.channels), weights=m.weights, options=m.branch_options())
        trunk, top = split_branch(branch, cfg.trunk.layer)
        weights = m.weights
        if weights not in (None, "imagenet") and Path(weights).is_file():
            weights = f"{Path(weights).name}:{hashlib.sha1(Path(weights).read_bytes()).hexdigest()}"
        identity = {"branch": m.branch, "weights": weights, "options": m.branch_options(), "layer": cfg.trunk.layer}
        return cls(trunk, size, m.channels, cfg.box_margin, cfg.crop, cfg.trunk.views, cfg.augment_style,
                   identity, cache=cache, progress=progress), top

    def fingerprint(self) -> str:
        """SHA-256 (hex) of everything that makes a photo's maps: two runs share maps exactly when it is equal."""
        spec = {"format": FORMAT, **self.identity, "input": list(self.image_size), "channels": self.channels,
                "margin": self.margin, "crop": self.crop, "views": self.views, "augment": self.augment_style}
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    def store(self, paths, boxes=None, views: bool = False) -> MapStore:
        """The maps of ``paths`` (with their ``boxes``), computed where neither memory nor the cache holds them:
        ``[1 + V, h, w, c]`` each with ``views``, else ``[1, h, w, c]`` (the plain crop's)."""
        paths = [Path(p) for p in paths]
        boxes = [None] * len(paths) if boxes is None else list(boxes)
        keys = [photo_key(p, b) for p, b in zip(paths, boxes)]
        kinds = ("plain", "views") if views and self.views else ("plain",)
        for kind in kinds:
            todo = [i for i, k in enumerate(keys) if not self._have(k, kind)]
            if todo:
                self._compute([paths[i] for i in todo], [boxes[i] for i in todo], [keys[i] for i in todo], kind)
        store = MapStore([self._whole(k) if len(kinds) == 2 else self._memory[(k, "plain")] for k in keys])
        if self._rows is not None:  # the batches read them in no order from now on
            self._rows.random_access()
        return store

    def _whole(self, key: str) -> np.ndarray:
        """``[1 + V, h, w, c]``: a photo's plain and augmented maps, consecutive in the mapped file."""
        if key not in self._joined:  # its views were kept before its plain map (never in :meth:`store`)
            self._keep(key, "views", np.array(self._memory.pop((key, "views"))))
        return self._joined[key]

    def _keep(self, key: str, kind: str, maps: np.ndarray) -> None:
        """``maps`` (``float16 [n, h, w, c]``) of ``key`` copied into the mapped file. A photo's views go right
        after a copy of its plain map, so its training maps are one array that both kinds' entries view (held
        once, not once per kind and once joined)."""
        if self._rows is None:
            self._rows = MappedRows(maps.shape[1:], np.float16, folder=self.folder, flag="--trunk-cache")
        if kind == "views" and (key, "plain") in self._memory:
            whole = self._rows.append(np.concatenate([self._memory[(key, "plain")], maps]))
            self._joined[key] = whole
            self._memory[(key, "plain")], self._memory[(key, "views")] = whole[:1], whole[1:]
        else:
            self._memory[(key, kind)] = self._rows.append(maps)

    # ------------------------------------------------------------------ the cache
    def _file(self, key: str, kind: str) -> Path:
        return self.folder / f"{key}.{kind}.npz"

    def map_shape(self) -> tuple[int, ...] | None:
        """``(h, w, c)`` of one view's map, as the trunk gives it (None when it does not say)."""
        shape = getattr(self.trunk, "output_shape", None)
        if isinstance(shape, list):
            shape = shape[0] if len(shape) == 1 else None
        if shape is None or len(shape) != 4 or not all(isinstance(v, int) for v in shape[1:]):
            return None
        return tuple(int(v) for v in shape[1:])

    def _note(self, path: Path, why: str) -> None:
        line = f"trunk maps {path}: {why}; not used, computed again"
        self.notes.append(line)
        if self._log is None:
            import sys

            print(line, file=sys.stderr, flush=True)
        else:
            self._log(line)

    def _have(self, key: str, kind: str) -> bool:
        if (key, kind) in self._memory:
            return True
        if self.folder is None:
            return False
        path = self._file(key, kind)
        try:
            arrays = read_sealed(path)
        except FileNotFoundError:
            return False
        except SealError as exc:
            self._note(path, str(exc).replace(f"{path}: ", ""))
            return False
        maps = arrays.get("maps")
        views = 1 if kind == "plain" else self.views
        expected = self.map_shape()
        if maps is None or str(arrays.get("photo", "")) != key or str(arrays.get("kind", "")) != kind:
            self._note(path, "does not hold this photo's maps")
            return False
        if maps.dtype != np.float16 or maps.ndim != 4 or len(maps) != views or (
                expected is not None and maps.shape[1:] != expected):
            self._note(path, f"holds {maps.dtype} {list(maps.shape)}, expected float16 "
                             f"{[views, *(expected or ('h', 'w', 'c'))]}")
            return False
        if not np.isfinite(maps).all():
            self._note(path, "holds values that are not finite")
            return False
        self._keep(key, kind, maps)
        return True

    def _compute(self, paths, boxes, keys, kind: str) -> None:
        from whale.data import crop_size_for
        from whale.data.augment import build_augmenter, build_view
        from whale.data.images import load_crop

        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            spec = self.folder / "trunk.json"
            if not spec.is_file():
                atomic_write(spec, lambda tmp: tmp.write_text(json.dumps({"fingerprint": self.fingerprint(),
                                                                         **self.identity}, indent=2)))
        plain = build_view("plain", self.image_size, self.channels)
        augment = build_augmenter(self.image_size, channels=self.channels, style=self.augment_style)
        n_views = 1 if kind == "plain" else self.views
        crop_size = crop_size_for(self.image_size)
        step = max(1, self.batch_size // n_views)
        desc = "trunk maps" if kind == "plain" else f"trunk maps, {n_views} augmented views"
        for start in progress_bar(range(0, len(paths), step), total=-(-len(paths) // step), desc=desc,
                                  enabled=self.progress):
            batch, owners = [], []
            for path, box, key in zip(paths[start:start + step], boxes[start:start + step], keys[start:start + step]):
                crop = load_crop(path, box, crop_size, channels=self.channels, margin=self.margin, crop=self.crop)
                if kind == "plain":
                    batch.append(plain(crop))
                else:  # each view drawn from the photo's content and its number: the same on every machine
                    batch += [augment(crop, np.random.default_rng([int(key[:12], 16), v])) for v in range(n_views)]
                owners.append(key)
            out = np.asarray(self.trunk.predict_on_batch(np.asarray(batch, np.float32)), np.float16)
            for j, key in enumerate(owners):
                maps = out[j * n_views:(j + 1) * n_views]
                self._keep(key, kind, maps)
                if self.folder is not None:
                    write_sealed(self._file(key, kind), {"maps": maps, "photo": np.asarray(key),
                                                         "kind": np.asarray(kind)})


def photo_key(path: Path, box=None) -> str:
    """SHA-1 (hex) of the photo's bytes and its box: the same photo under another name has the same maps."""
    digest = hashlib.sha1(Path(path).read_bytes())
    if box is not None:
        digest.update(repr(tuple(int(v) for v in box)).encode())
    return digest.hexdigest()
