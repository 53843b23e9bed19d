"""The images one fold trains, mines and validates on, as the paper's fold rules split them.

An :class:`ImageSet` is a list of images of one dataset (names, ids, file paths, boxes);
:class:`FoldData` holds a fold's pair images, its gallery and its validation queries
(:func:`fold_data`, rules in :mod:`whale.data.folds`); :func:`playground_data` is the
pre-training set (everything trains, nothing validates).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from whale import NEW_WHALE
from whale.data.competition import Competition
from whale.data.folds import assign_folds, fold_summary, split


@dataclass
class ImageSet:
    """Images of one dataset for one fold: names, labels, file paths and boxes."""

    names: list[str]
    ids: np.ndarray  # [n] str
    paths: list[Path]
    boxes: list[tuple | None]

    @classmethod
    def from_frame(cls, comp: Competition, frame: pd.DataFrame, folder: str = "train") -> "ImageSet":
        names = list(frame["Image"])
        path_of = comp.train_path if folder == "train" else comp.test_path
        ids = np.asarray(list(frame["Id"]), dtype=str) if "Id" in frame else np.full(len(names), "", dtype=str)
        return cls(names, ids, [path_of(n) for n in names], [comp.box(n) for n in names])

    @classmethod
    def known(cls, comp: Competition, frame: pd.DataFrame | None = None) -> "ImageSet":
        """Rows of ``frame`` (default: all of ``comp.train``) with a known id, in order."""
        frame = comp.train if frame is None else frame
        return cls.from_frame(comp, frame[frame["Id"] != NEW_WHALE])

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
                        [self.paths[i] for i in index], [self.boxes[i] for i in index])

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class FoldData:
    """What one fold trains and validates on.

    ``pairs``: training images of ids with at least two images (they give positive pairs);
    ``gallery``: every training image with a known id; ``val``: validation queries,
    ``new_whale`` included (empty for fold -1); ``pairs_in_gallery``: ``[len(pairs)] int64``,
    where each pair image sits in ``gallery`` (training reads its crops from the gallery's
    store, so no image is decoded and cached twice).
    """

    pairs: ImageSet
    gallery: ImageSet
    val: ImageSet
    pairs_in_gallery: np.ndarray
    summary: str = ""


def _fold(gallery: ImageSet, val: ImageSet, summary: str = "") -> FoldData:
    pairs = gallery.with_partners()
    return FoldData(pairs, gallery, val, gallery.positions(pairs.names), summary)


def fold_data(comp: Competition, fold: int, seed: int, n_folds: int = 4,
              val_new_whale: bool = True) -> FoldData:
    """Split a competition by the paper's fold rules; fold -1 trains on everything.

    ``val_new_whale=False`` drops the ``new_whale`` images the rules add to validation.
    """
    if not -1 <= fold < n_folds:
        raise ValueError(f"fold must be -1 (train on everything) or 0..{n_folds - 1}, got {fold}")
    folds = assign_folds(comp.train, n_folds=n_folds, seed=seed)
    train_part, val_part = split(comp.train, folds, fold)
    if not val_new_whale:
        val_part = val_part[val_part["Id"] != NEW_WHALE]
    gallery = ImageSet.known(comp, train_part)
    val = ImageSet.from_frame(comp, val_part)
    return _fold(gallery, val, fold_summary(comp.train, folds))


def playground_data(comp: Competition) -> FoldData:
    """A pre-training dataset: every known image trains, nothing validates."""
    gallery = ImageSet.known(comp)
    return _fold(gallery, gallery.subset(np.arange(0)))
