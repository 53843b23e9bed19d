"""The images one fold trains, mines and validates on, as the paper's fold rules split them.

An :class:`ImageSet` is a list of images of one dataset (names, ids, file paths, boxes);
:class:`FoldData` holds a fold's pair images, its gallery and its validation queries
(:func:`fold_data`, rules in :mod:`whale.data.folds`); :func:`playground_data` is the
pre-training set (everything trains, nothing validates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from whale import NEW_WHALE
from whale.data.competition import Competition
from whale.core.errors import ConfigError
from whale.data.folds import N_FOLDS, assign_folds, fold_summary, split

FLIP_SUFFIX = "_flip"
"""Id suffix of the mirrored identities of ``flip_ids`` (``w_1234abc`` -> ``w_1234abc_flip``)."""
FLIP_TAG = "#flip"
"""Name suffix of a mirrored image inside a training set; never written to any file."""


@dataclass
class ImageSet:
    """Images of one dataset for one fold: names, labels, file paths, boxes and mirror flags."""

    names: list[str]
    ids: np.ndarray  # [n] str
    paths: list[Path]
    boxes: list[tuple | None]
    flips: np.ndarray | None = None  # [n] bool, None = nothing mirrored

    @property
    def flip_flags(self) -> np.ndarray:
        """``[n] bool``: which images are read mirrored."""
        return np.zeros(len(self.names), bool) if self.flips is None else self.flips

    def with_mirrors(self, open_label: str = NEW_WHALE) -> "ImageSet":
        """This set followed by its mirror images as new identities (the 1st place's flipped whales).

        Image ``i`` keeps position ``i``; its mirror sits at ``n + i``, named ``name#flip``
        with id ``id_flip`` (``open_label``, e.g. ``new_whale``, stays: a mirrored unknown whale
        is as unknown). Returns a set of ``2n`` images.
        """
        if self.flip_flags.any():
            raise ValueError("with_mirrors: this set already holds mirrored images")
        ids = np.array([i if i == open_label else i + FLIP_SUFFIX for i in self.ids], dtype=str)
        return ImageSet(self.names + [n + FLIP_TAG for n in self.names],
                        np.concatenate([self.ids, ids]).astype(str), self.paths + self.paths,
                        self.boxes + self.boxes, np.repeat([False, True], len(self.names)))

    def store(self, crop_size, **kwargs):
        """An :class:`whale.data.ImageStore` of these images (``crop_size``: a side or ``(height, width)``;
        ``kwargs``: channels, margin, cache, crop)."""
        from whale.data.store import ImageStore

        return ImageStore(self.paths, self.boxes, crop_size, flips=self.flip_flags, **kwargs)

    @classmethod
    def from_frame(cls, comp: Competition, frame: pd.DataFrame, folder: str = "train") -> "ImageSet":
        names = list(frame["Image"])
        path_of = comp.train_path if folder == "train" else comp.test_path
        ids = np.asarray(list(frame["Id"]), dtype=str) if "Id" in frame else np.full(len(names), "", dtype=str)
        return cls(names, ids, [path_of(n) for n in names], [comp.box(n) for n in names])

    @classmethod
    def known(cls, comp: Competition, frame: pd.DataFrame | None = None) -> "ImageSet":
        """Rows of ``frame`` (default: all of ``comp.train``) with a known id (not ``comp.open_label``), in order."""
        frame = comp.train if frame is None else frame
        return cls.from_frame(comp, frame[frame["Id"] != comp.open_label])

    @classmethod
    def test(cls, comp: Competition) -> "ImageSet":
        """The competition's test images (ids empty), in submission order."""
        return cls.from_frame(comp, pd.DataFrame({"Image": list(comp.test_images)}), folder="test")

    def with_partners(self) -> "ImageSet":
        """The images whose id has another image here: those that give positive pairs."""
        _, inverse, counts = np.unique(self.ids, return_inverse=True, return_counts=True)
        return self.subset(np.flatnonzero(counts[inverse] >= 2))

    def positions(self, names) -> np.ndarray:
        """``[len(names)] int64``: where each of ``names`` sits in this set."""
        pos = {n: i for i, n in enumerate(self.names)}
        return np.array([pos[n] for n in names], dtype=np.int64)

    def subset(self, index: np.ndarray) -> "ImageSet":
        index = np.asarray(index, dtype=np.int64)
        return ImageSet([self.names[i] for i in index], self.ids[index],
                        [self.paths[i] for i in index], [self.boxes[i] for i in index],
                        None if self.flips is None else self.flips[index])

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class FoldData:
    """What one fold trains and validates on.

    ``pairs``: training images of ids with at least two images (they give positive pairs);
    ``gallery``: every training image with a known id; ``val``: validation queries,
    open-set ones included (empty for fold -1); ``pairs_in_gallery``: ``[len(pairs)] int64``,
    where each pair image sits in ``gallery`` (training reads its crops from the gallery's
    store, so no image is decoded and cached twice); ``open_label``: the label of the
    validation queries whose individual the gallery lacks (the competition format's).
    """

    pairs: ImageSet
    gallery: ImageSet
    val: ImageSet
    pairs_in_gallery: np.ndarray
    summary: str = ""
    open_label: str = NEW_WHALE
    # with_mirrors() as mirrored() made it, with the gallery it was made from (a new gallery: made again)
    _mirror: tuple[ImageSet, "FoldData"] | None = field(default=None, init=False, repr=False, compare=False)

    def with_mirrors(self) -> "FoldData":
        """The same fold training on its gallery and the gallery's mirror images as new ids.

        ``gallery`` becomes :meth:`ImageSet.with_mirrors` of it (the originals keep their
        positions ``0..n-1``); ``val`` is unchanged.
        """
        return _fold(self.gallery.with_mirrors(self.open_label), self.val, self.summary, self.open_label)

    def mirrored(self) -> "FoldData":
        """:meth:`with_mirrors`, made once and kept with this fold (the trainer asks at every epoch); made
        again when ``gallery`` was replaced. A copy shares it, ``dataclasses.replace`` makes its own."""
        if self._mirror is None or self._mirror[0] is not self.gallery:
            self._mirror = (self.gallery, self.with_mirrors())
        return self._mirror[1]


def _fold(gallery: ImageSet, val: ImageSet, summary: str = "", open_label: str = NEW_WHALE) -> FoldData:
    pairs = gallery.with_partners()
    return FoldData(pairs, gallery, val, gallery.positions(pairs.names), summary, open_label)


def fold_data(comp: Competition, fold: int, seed: int, n_folds: int = N_FOLDS,
              val_new_whale: bool = True) -> FoldData:
    """Split a competition by the paper's fold rules; fold -1 trains on everything.

    ``val_new_whale=False`` drops the open-set images (``comp.open_label``) the rules add to
    validation. The rules follow ``comp.format`` (:mod:`whale.data.folds`).

    Raises:
        ConfigError: ``fold`` outside -1..``n_folds - 1`` (a ``ValueError``).
    """
    if not -1 <= fold < n_folds:
        raise ConfigError(f"fold {fold}: expected -1 (train on everything) or 0..{n_folds - 1} "
                          f"(the paper's {n_folds} folds)")
    fmt = comp.format
    folds = assign_folds(comp.train, n_folds=n_folds, seed=seed, fmt=fmt)
    train_part, val_part = split(comp.train, folds, fold, fmt=fmt)
    if not val_new_whale:
        val_part = val_part[val_part["Id"] != comp.open_label]
    gallery = ImageSet.known(comp, train_part)
    val = ImageSet.from_frame(comp, val_part)
    return _fold(gallery, val, fold_summary(comp.train, folds, fmt=fmt), comp.open_label)


def playground_data(comp: Competition) -> FoldData:
    """A pre-training dataset: every known image trains, nothing validates."""
    gallery = ImageSet.known(comp)
    return _fold(gallery, gallery.subset(np.arange(0)), open_label=comp.open_label)
