"""What ``run_fold.py`` checks before the backend loads, and how a failed start leaves the run folder.

Loading Keras and its backend takes seconds and prints lines of its own, so everything that can
be refused from the files alone is refused first, in one line (:func:`whale.core.errors.run_guarded`):
the fold's range (:func:`check_fold`), whether the training images give positive pairs and
whether every id can stand in a submission (:func:`check_training_ids`), and whether a
``--resume`` continues the same run on the same data under the same config
(:func:`check_resume`, :func:`whale.training.runlog.resume_changes`).

:class:`FolderGuard` keeps the other promise: a run that fails (or is interrupted) before its
first epoch leaves the run folder as it found it; :func:`interrupted_message` is the one line
printed after Ctrl-C.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from whale.config import RunConfig
from whale.core.errors import ConfigError, DataError
from whale.core.files import atomic_write
from whale.data.fingerprint import DATA_IMAGES
from whale.data.folds import N_FOLDS
from whale.training.runlog import read_log, read_run_json, record_resume_changes, resume_changes



def check_fold(fold: int) -> None:
    """Refuse a fold outside ``-1 .. N_FOLDS - 1`` (:class:`ConfigError`)."""
    if fold is not None and not -1 <= fold < N_FOLDS:
        raise ConfigError(f"--fold {fold}: expected -1 (train on everything) or 0..{N_FOLDS - 1} "
                          f"(the paper's {N_FOLDS} folds)")


def check_training_ids(comp, pairs, what: str) -> None:
    """Refuse ids a submission cannot carry, and a training set without a positive pair.

    ``comp``: the :class:`whale.data.Competition`; ``pairs``: the :class:`whale.data.ImageSet`
    of training images whose id has another training image (``FoldData.pairs``); ``what``
    says which training set (``"fold 0"``) in the message.

    Raises:
        DataError: naming ``train.csv``, its line and the id (labels are space-separated in a
            submission, so an id with a space, comma or quote would read as other labels), or
            saying that no id has two training images (siamese training needs positive pairs).
    """
    csv_path = Path(comp.root) / "train.csv"
    ids = comp.train["Id"].astype(str).tolist()
    for i, label in enumerate(ids):
        if not label or label != label.strip() or any(c in label for c in ' ,"\'\t'):
            raise DataError(f"{csv_path}: line {i + 2}: id {label!r}: expected an id without spaces, commas "
                            "or quotes (' or \"): a submission's labels are space-separated, so it could not "
                            "carry it")
    if len(pairs) == 0:
        n_new = sum(label == comp.open_label for label in ids)
        raise DataError(f"{csv_path}: no id has two training images in {what} ({len(ids)} rows, {n_new} of "
                        f"them {comp.open_label}): siamese training needs at least one id with two images "
                        "(positive pairs); expected known ids with two or more images each")


def check_resume(out_dir: Path, cfg: RunConfig, data_dir: Path, allow_changes: bool, log=print) -> list[str]:
    """Refuse a ``--resume`` on other data or under another config, unless ``allow_changes``.

    ``cfg`` is the config as the trainer records it (sized). With ``allow_changes`` each change
    is printed through ``log`` and appended to ``run.json``'s history. Returns the changes.

    Raises:
        ConfigError: naming ``run.json`` / ``config.yaml`` and the first differences.
    """
    changes = resume_changes(out_dir, cfg, data_dir)
    meta = read_run_json(out_dir)
    if meta is not None and "data_fingerprint" not in meta:
        log(f"--resume: {Path(out_dir) / 'run.json'} records no data fingerprint (an older run): "
            "the data is not checked against the paused run's; from now on it is")
    if not changes:
        return []
    if not allow_changes:
        shown = "; ".join(changes[:3]) + (f"; ... ({len(changes) - 3} more)" if len(changes) > 3 else "")
        raise ConfigError(f"{Path(out_dir)}: --resume would not continue the paused run: {shown}; resume with "
                          "the run's own data and config, or add --allow-changes to go on with them changed "
                          "(each change is recorded in run.json)")
    for change in changes:
        log(f"--allow-changes: {change}")
    record_resume_changes(out_dir, changes)
    return changes


def epochs_done(out_dir: Path) -> int | None:
    """Epochs in the run folder's last checkpoint (``checkpoints/last.json``), else ``log.csv``'s rows."""
    state = Path(out_dir) / "checkpoints" / "last.json"
    try:
        return int(json.loads(state.read_text())["epochs_done"])
    except (OSError, ValueError, KeyError, TypeError):
        rows = read_log(Path(out_dir) / "log.csv") if Path(out_dir).is_dir() else []
        return len(rows) if rows else None


def interrupted_message(out_dir: Path | None) -> str:
    """The line after Ctrl-C: how far the run got and that ``--resume`` continues it."""
    done = epochs_done(out_dir) if out_dir is not None else None
    if not done:
        return "interrupted before the first epoch finished; nothing to resume (run the command again)"
    return f"interrupted after epoch {done}; `--resume` continues the run"


class FolderGuard:
    """Restores a run folder when a run fails before its first epoch (context manager).

    On entry it notes which entries the folder has and the bytes of its small files
    (``run.json``, ``config.yaml``, ``log.csv``, ``data_images.json``); on an exception, if no epoch was added since
    (``checkpoints/last.json`` unchanged), it removes what appeared and puts those files back
    (a folder that did not exist is removed). The exception goes on either way. ``cleared``:
    the run is about to clear the folder (``--overwrite``), so a failed start leaves it empty.
    """

    KEPT = ("run.json", "config.yaml", "log.csv", DATA_IMAGES)

    def __init__(self, out_dir: Path, cleared: bool = False):
        self.out_dir, self.cleared = Path(out_dir), cleared

    def __enter__(self) -> "FolderGuard":
        self.existed = self.out_dir.is_dir()
        keep = self.existed and not self.cleared
        self.entries = set(p.name for p in self.out_dir.iterdir()) if keep else set()
        self.saved = {name: (self.out_dir / name).read_bytes() for name in self.KEPT
                      if keep and (self.out_dir / name).is_file()}
        self.state = self._state()
        return self

    def _state(self) -> bytes | None:
        path = self.out_dir / "checkpoints" / "last.json"
        return path.read_bytes() if path.is_file() else None

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None or not self.out_dir.is_dir() or self._state() != self.state:
            return False
        if not self.existed:
            shutil.rmtree(self.out_dir, ignore_errors=True)
            return False
        for child in self.out_dir.iterdir():
            if child.name not in self.entries:
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        for name, data in self.saved.items():
            try:
                if (self.out_dir / name).read_bytes() != data:
                    atomic_write(self.out_dir / name, lambda tmp, data=data: tmp.write_bytes(data))
            except OSError:
                pass  # a full disk may refuse this too: the atomic writers left whole files anyway
        return False
