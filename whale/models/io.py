"""Saving and loading whole models (``.keras`` format) safely and atomically."""
from __future__ import annotations

import sys
from pathlib import Path

import keras

from whale.core.errors import DataError
from whale.core.files import atomic_write


def save_model(model: keras.Model, path) -> Path:
    """Save ``model`` to ``path`` (must end in ``.keras``) atomically; returns the path.

    The model is written to a temporary file in the same folder and renamed over ``path``,
    so a crash never leaves a half-written model under the final name.
    """
    path = Path(path)
    if path.suffix != ".keras":
        raise ValueError(f"{path}: model files must end in .keras")
    return atomic_write(path, model.save)


def load_model(path, expect: keras.Model | None = None, compile: bool = False) -> keras.Model:
    """Load a ``.keras`` model with ``safe_mode=True`` (no arbitrary code, no Lambda layers).

    Args:
        path: the ``.keras`` file.
        expect: optional model of the expected architecture; the loaded model must have the
            same top-level layer names and the same weight shapes, in order.
        compile: restore the compiled state (optimizer, loss) too.

    Raises:
        FileNotFoundError: no such file.
        DataError: not a Keras model file, or (with ``expect``) a different architecture;
            the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    try:
        model = keras.saving.load_model(path, compile=compile, safe_mode=True)
    except Exception as err:  # Keras raises many types for foreign files
        if "whale>" in str(err) and "whale.objectives" not in sys.modules:
            raise DataError(f"{path}: the model uses layers or losses of whale.objectives, which registers them "
                            "with Keras when imported: import whale.objectives before loading it") from err
        raise DataError(
            f"{path}: not a loadable Keras model file ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200] if str(err) else ''})"
        ) from err
    if expect is not None:
        problem = architecture_difference(model, expect)
        if problem:
            raise DataError(f"{path}: model does not have the expected architecture: {problem}")
    return model


def architecture_difference(model: keras.Model, expect: keras.Model) -> str:
    """Empty string if ``model`` and ``expect`` have the same top-level layer names and weight
    shapes (in order); otherwise a one-line description of the first difference."""
    got_names = [layer.name for layer in model.layers]
    want_names = [layer.name for layer in expect.layers]
    if got_names != want_names:
        return f"layers {got_names} != expected {want_names}"
    got, want = model.weights, expect.weights
    if len(got) != len(want):
        return f"{len(got)} weight tensors != expected {len(want)}"
    for g, w in zip(got, want):
        if tuple(g.shape) != tuple(w.shape):
            return f"weight {g.path} has shape {tuple(g.shape)}, expected {tuple(w.shape)}"
    return ""
