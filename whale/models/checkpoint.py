"""Checkpoints: model (weights + optimizer) and the position in the schedule, written atomically.

A run folder holds ``checkpoints/last.keras`` + ``checkpoints/last.json`` (after every finished
epoch) and ``checkpoints/best.keras`` + ``checkpoints/best.json`` (best validation MAP@5).
The JSON side-car is written *after* the model file, so a JSON that exists always describes a
complete model file; a run killed between the two writes resumes from the previous epoch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from whale.files import write_json_atomic
from whale.models.io import load_model, save_model


def save_checkpoint(model, folder: str | os.PathLike, tag: str, state: dict) -> Path:
    """Save ``model`` (architecture, weights, optimizer) and ``state`` under ``folder/tag.*``.

    Returns the path of the model file. Both files are replaced atomically.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / f"{tag}.keras"
    save_model(model, model_path)
    write_json_atomic(folder / f"{tag}.json", {**state, "model_file": model_path.name})
    return model_path


def read_state(folder: str | os.PathLike, tag: str) -> dict | None:
    """The JSON state of checkpoint ``tag``, or None when there is none."""
    path = Path(folder) / f"{tag}.json"
    if not path.exists():
        return None
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: checkpoint state is not valid JSON ({exc})") from exc


def load_checkpoint(folder: str | os.PathLike, tag: str):
    """Load ``(model, state)`` of checkpoint ``tag`` (optimizer state included).

    FileNotFoundError names what is missing.
    """
    state = read_state(folder, tag)
    if state is None:
        raise FileNotFoundError(f"no checkpoint '{tag}' in {folder} (expected {tag}.json)")
    model_path = Path(folder) / state["model_file"]
    if not model_path.exists():
        raise FileNotFoundError(f"{model_path}: model file of checkpoint '{tag}' is missing")
    return load_model(model_path, compile=True), state
