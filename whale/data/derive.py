"""A new competition folder derived from another: same images, a new ``train.csv``.

Pseudo-label rounds (:mod:`whale.pseudo`) and label merging (:mod:`whale.duplicates`) write
their result as a complete Kaggle-format folder that ``run_fold.py`` trains on like any other.
Images are hard-linked where the file system allows it (copied otherwise), so a derived
folder of the real competition costs no disk space; test images that become training rows
are linked into ``train/`` too. ``sample_submission.csv``, ``bounding_boxes.csv`` and the
synthetic ``test_solution.csv`` are copied when present.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd

from whale.data.competition import BOXES_CSV, ORIGIN, SAMPLE_CSV, TEST_DIR, TRAIN_CSV, TRAIN_DIR, Competition
from whale.core.errors import DataError
from whale.core.files import atomic_write

_COPIED = (SAMPLE_CSV, BOXES_CSV, "test_solution.csv")


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def derive_competition(comp: Competition, out, train: pd.DataFrame) -> Path:
    """Write ``out``: ``comp``'s images and files with ``train`` as its ``train.csv``.

    Args:
        comp: the source competition. out: the new folder (created; must not be ``comp.root``).
        train: rows ``Image, Id`` and optionally ``Origin``; an image of ``comp``'s test set
            may appear (a pseudo label): it is linked from ``test/`` into ``train/``.

    Returns: ``Path(out)``.

    Raises:
        DataError: ``out`` is the source folder, or a row names an image found in neither
            ``train/`` nor ``test/`` of ``comp``.
    """
    out = Path(out)
    if out.resolve() == Path(comp.root).resolve():
        raise DataError(f"{out}: expected a new folder, received the source competition itself")
    (out / TRAIN_DIR).mkdir(parents=True, exist_ok=True)
    (out / TEST_DIR).mkdir(parents=True, exist_ok=True)
    known_train, known_test = set(comp.train["Image"]), set(comp.test_images)
    for name in train["Image"]:
        if name in known_train:
            _link(comp.train_path(name), out / TRAIN_DIR / name)
        elif name in known_test:
            _link(comp.test_path(name), out / TRAIN_DIR / name)
        else:
            raise DataError(f"{out / TRAIN_CSV}: image {name!r} is neither a training nor a test image of "
                            f"{comp.root}")
    for name in comp.test_images:
        _link(comp.test_path(name), out / TEST_DIR / name)
    for name in _COPIED:
        if (Path(comp.root) / name).is_file():
            src = Path(comp.root) / name
            atomic_write(out / name, lambda tmp, src=src: shutil.copyfile(src, tmp))
    columns = ["Image", "Id"] + ([ORIGIN] if ORIGIN in train.columns else [])
    atomic_write(out / TRAIN_CSV, lambda tmp: train[columns].to_csv(tmp, index=False))
    return out
