"""The negatives mined at the start of a mining block, kept beside the checkpoints.

Inside a block every epoch's negatives come from the model at the block's start; saving them
(``checkpoints/mined-eNNNN.npz``) lets a resumed run train the rest of the block on the same
pairs as an uninterrupted one, without mining again from a later model. Each file records the key of
the training images it indexes (:func:`training_key`): a resume onto other images (``--allow-changes``)
finds another key and mines the block again instead of indexing the wrong images.
"""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from whale.core.errors import CheckpointError
from whale.core.files import atomic_write


def _mined_path(folder: Path, block_start: int) -> Path:
    return Path(folder) / f"mined-e{int(block_start):04d}.npz"


def training_key(images) -> str:
    """16 hex digits naming the training images negatives index: their names and ids, in order.

    ``images``: the :class:`whale.data.ImageSet` the miner ran on (``FoldData.pairs``).
    """
    h = hashlib.sha256(f"{len(images.names)}\0".encode())
    for name, label in zip(images.names, np.asarray(images.ids, dtype=str)):
        h.update(f"{name}\0{label}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:16]


def save_mined(folder: Path, block_start: int, mined: list[np.ndarray], key: str = "") -> Path:
    """The negatives of the block starting at epoch ``block_start``: ``checkpoints/mined-eNNNN.npz``.

    ``mined`` holds one ``(q, 2) int`` array of image-index pairs per epoch of the block; ``key``
    is the :func:`training_key` of the images they index. The files of the two newest blocks
    are kept (a resume that falls back to the previous checkpoint may land in the block
    before); older ones are removed.
    """
    path = _mined_path(folder, block_start)
    atomic_write(path, lambda tmp: np.savez(tmp, count=len(mined), block_start=int(block_start), key=str(key),
                                            **{f"epoch{i}": p for i, p in enumerate(mined)}))
    for old in sorted(Path(folder).glob("mined-e*.npz"))[:-2]:
        old.unlink(missing_ok=True)
    return path


def load_mined(folder: Path, block_start: int, key: str | None = None) -> list[np.ndarray] | None:
    """The negatives saved by :func:`save_mined` for ``block_start``, or None when there is no file, or
    when ``key`` is given and the file indexes other training images (another :func:`training_key`;
    files of older versions record none and are taken as they are).

    Raises:
        CheckpointError: the file is truncated or corrupt, or belongs to another block.
    """
    path = _mined_path(folder, block_start)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            stored = int(z["block_start"])
            stored_key = str(z["key"]) if "key" in z.files else None
            mined = [z[f"epoch{i}"] for i in range(int(z["count"]))]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: mined negatives are truncated or corrupt ({type(exc).__name__}: "
                              f"{exc}); delete it to mine the block again from the resumed model") from None
    if stored != int(block_start):
        raise CheckpointError(f"{path}: holds the negatives of the block starting at epoch "
                              f"{stored + 1}, expected {int(block_start) + 1}")
    if key is not None and stored_key is not None and stored_key != key:
        return None
    return mined
