"""The negatives mined at the start of a mining block, kept beside the checkpoints.

Inside a block every epoch's negatives come from the model at the block's start; saving them
(``checkpoints/mined-eNNNN.npz``) lets a resumed run train the rest of the block on the same
pairs as an uninterrupted one, without mining again from a later model.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from whale.errors import CheckpointError
from whale.files import atomic_write


def _mined_path(folder: Path, block_start: int) -> Path:
    return Path(folder) / f"mined-e{int(block_start):04d}.npz"


def save_mined(folder: Path, block_start: int, mined: list[np.ndarray]) -> Path:
    """The negatives of the block starting at epoch ``block_start``: ``checkpoints/mined-eNNNN.npz``.

    ``mined`` holds one ``[n_pairs] int`` array per epoch of the block. The files of the two
    newest blocks are kept (a resume that falls back to the previous checkpoint may land in
    the block before); older ones are removed.
    """
    path = _mined_path(folder, block_start)
    atomic_write(path, lambda tmp: np.savez(tmp, count=len(mined), block_start=int(block_start),
                                            **{f"epoch{i}": p for i, p in enumerate(mined)}))
    for old in sorted(Path(folder).glob("mined-e*.npz"))[:-2]:
        old.unlink(missing_ok=True)
    return path


def load_mined(folder: Path, block_start: int) -> list[np.ndarray] | None:
    """The negatives saved by :func:`save_mined` for ``block_start``, or None when there is no file.

    Raises:
        CheckpointError: the file is truncated or corrupt, or belongs to another block.
    """
    path = _mined_path(folder, block_start)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            stored = int(z["block_start"])
            mined = [z[f"epoch{i}"] for i in range(int(z["count"]))]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: mined negatives are truncated or corrupt ({type(exc).__name__}: "
                              f"{exc}); delete it to mine the block again from the resumed model") from None
    if stored != int(block_start):
        raise CheckpointError(f"{path}: holds the negatives of the block starting at epoch "
                              f"{stored + 1}, expected {int(block_start) + 1}")
    return mined
