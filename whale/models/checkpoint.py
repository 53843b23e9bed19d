"""Checkpoints: model (weights + optimizer) and the position in the schedule, written so a kill cannot mix them.

A checkpoint ``TAG`` (``last`` after every finished epoch, ``best`` at the best validation
MAP@5) is a JSON state ``TAG.json`` naming an epoch-stamped model file ``TAG-e0005.keras``.
Writing one goes:

1. the model to a new ``TAG-eNNNN.keras`` (atomic: temporary file + rename);
2. the current ``TAG.json`` copied to ``TAG.prev.json`` (atomic): the previous good checkpoint;
3. the new ``TAG.json`` (atomic), which names the model file of step 1;
4. model files that neither JSON names are removed.

A ``kill -9`` anywhere leaves ``TAG.json`` naming a complete model file of the *same* epoch
(never newer weights with an older state), and ``TAG.prev.json`` naming the one before.
:func:`load_checkpoint` names a missing, truncated or corrupt file; ``fallback=True`` then
goes back to ``TAG.prev.json`` (and says which epoch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from whale.core.errors import CheckpointError
from whale.core.files import write_json_atomic
from whale.models.io import load_model, save_model


def _model_name(tag: str, state: dict) -> str:
    return f"{tag}-e{int(state.get('epochs_done', 0)):04d}.keras"


def save_checkpoint(model, folder: str | os.PathLike, tag: str, state: dict) -> Path:
    """Save ``model`` (architecture, weights, optimizer) and ``state`` as checkpoint ``tag``.

    ``state`` is a JSON-able dict; its ``epochs_done`` stamps the model file's name. Returns
    the path of the model file. The previous checkpoint stays as ``tag.prev.json``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / _model_name(tag, state)
    save_model(model, model_path)
    current = folder / f"{tag}.json"
    if current.is_file():
        try:
            previous = json.loads(current.read_text())
        except ValueError:
            previous = None  # a damaged state is not worth keeping as the fallback
        if previous is not None and previous.get("model_file") != model_path.name:
            write_json_atomic(folder / f"{tag}.prev.json", previous)
    write_json_atomic(current, {**state, "model_file": model_path.name})
    _remove_unnamed(folder, tag)
    return model_path


def _remove_unnamed(folder: Path, tag: str) -> None:
    """Delete ``tag``'s model files that neither ``tag.json`` nor ``tag.prev.json`` names."""
    keep = set()
    for name in (f"{tag}.json", f"{tag}.prev.json"):
        try:
            keep.add(json.loads((folder / name).read_text()).get("model_file"))
        except (OSError, ValueError, AttributeError):
            continue
    for path in folder.glob(f"{tag}-e*.keras"):
        if path.name not in keep:
            path.unlink(missing_ok=True)


def read_state(folder: str | os.PathLike, tag: str) -> dict | None:
    """The JSON state of checkpoint ``tag`` (``tag`` may be ``last.prev``), or None when there is none.

    Raises:
        CheckpointError: the file is not valid JSON or names no model file.
    """
    path = Path(folder) / f"{tag}.json"
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise CheckpointError(f"{path}: checkpoint state is not valid JSON ({exc})") from None
    if not isinstance(state, dict) or not isinstance(state.get("model_file"), str):
        raise CheckpointError(f"{path}: checkpoint state must be a JSON object with a 'model_file'")
    return state


def _load(folder: Path, tag: str):
    state = read_state(folder, tag)
    if state is None:
        raise CheckpointError(f"no checkpoint '{tag}' in {folder} (expected {tag}.json)")
    model_path = folder / state["model_file"]
    if not model_path.is_file():
        raise CheckpointError(f"{model_path}: model file of checkpoint '{tag}' is missing")
    try:
        return load_model(model_path, compile=True), state
    except Exception as exc:  # Keras raises many types for a truncated zip or a bad config
        raise CheckpointError(f"{model_path}: model file of checkpoint '{tag}' (epoch "
                              f"{state.get('epochs_done')}) is truncated or corrupt: "
                              f"{type(exc).__name__}: {str(exc)[:200]}") from exc


def load_checkpoint(folder: str | os.PathLike, tag: str, fallback: bool = False, log=print):
    """Load ``(model, state)`` of checkpoint ``tag`` (optimizer state included).

    ``fallback=True``: when ``tag`` is missing or damaged, load ``tag.prev`` instead (the
    checkpoint written before it) and log which epoch it resumes from.

    Raises:
        CheckpointError: naming the missing, truncated or corrupt file (and the fallback's
            problem too when that fails as well).
    """
    folder = Path(folder)
    try:
        return _load(folder, tag)
    except CheckpointError as err:
        if not fallback or read_state(folder, f"{tag}.prev") is None:
            raise
        try:
            model, state = _load(folder, f"{tag}.prev")
        except CheckpointError as err2:
            raise CheckpointError(f"{err}; the previous checkpoint is no good either: {err2}") from None
        log(f"warning: {err}; falling back to the previous checkpoint ({tag}.prev.json, "
            f"epoch {state.get('epochs_done')})")
        return model, state


SNAPSHOT_PREFIX = "snapshot-"


def snapshot_tag(name: str) -> str:
    """The checkpoint tag of a ``snapshot: true`` stage's model: ``snapshot-384`` for ``"384"``."""
    return f"{SNAPSHOT_PREFIX}{name}"


def snapshot_name(tag: str) -> str | None:
    """``"384"`` for the tag ``snapshot-384``; None for any other checkpoint (``best``, ``last``, a path)."""
    tag = str(tag)
    return tag[len(SNAPSHOT_PREFIX):] if tag.startswith(SNAPSHOT_PREFIX) and "/" not in tag else None
