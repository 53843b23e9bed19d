"""Putting weights into a branch: local weight files and 3 -> 1 channel adaptation.

Weight files (an attached Kaggle dataset, say) come in two formats and two scopes:

* Keras 3 ``*.weights.h5`` (``model.save_weights``) or legacy ``*.h5`` / ``*.hdf5``
  (keras.applications' ``*_notop.h5`` files, Keras 2 ``save_weights``);
* of the whole branch (as saved by ``branch.save_weights``) or of the backbone only.

The scope is read from the file (a whole-branch file holds the ``preprocess`` layer), never
guessed from loading errors. A file written by :mod:`whale.models.convert` also records the
branch name and build options (``stem``) it was converted for, as HDF5 attributes of its root
(:func:`weights_file_options`). A 1-channel branch also accepts a 3-channel file: the file is
loaded into a 3-channel twin and :func:`adapt_first_conv` copies it over.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import keras
import numpy as np

from whale.core.errors import DataError, MissingFileError
from whale.models.registry import assemble_branch, branch_options, branch_spec, get_branch_def

BRANCH_ATTR = "whale_branch"
OPTIONS_ATTR = "whale_options"
SOURCE_ATTR = "whale_source"


def adapt_first_conv(src: keras.Model, dst: keras.Model) -> None:
    """Copy all weights of a 3-channel model ``src`` into the 1-channel model ``dst`` in place.

    Both models must have the same architecture except for the input channels. Every weight
    is copied unchanged except the first convolution kernel ``[kh, kw, 3, f]``, which becomes
    its **sum** over the input-channel axis, ``[kh, kw, 1, f]``. Summing (not averaging) keeps
    the response to a gray image ``g`` equal to the RGB network's response to ``(g, g, g)``
    whenever the preprocessing treats the three channels alike (``"tf"``, ``"standardize"``):
    ``sum_c W_c * g = (sum_c W_c) * g``. For ``"torch"``/``"caffe"`` preprocessing the gray
    branch uses the mean of the channel statistics, so its first-layer response differs from
    the RGB one by a small per-filter offset (the channel means differ by at most 0.03 in
    0..1 units, the standard deviations by 0.006).

    Raises:
        ValueError: the models differ in anything but that one kernel (names the variable).
    """
    src_w, dst_w = src.weights, dst.weights
    if len(src_w) != len(dst_w):
        raise ValueError(
            f"adapt_first_conv: {src.name!r} has {len(src_w)} weights, {dst.name!r} has "
            f"{len(dst_w)}; the architectures differ"
        )
    adapted = False
    for s, d in zip(src_w, dst_w):
        value = keras.ops.convert_to_numpy(s.value)
        if tuple(s.shape) == tuple(d.shape):
            d.assign(value)
            continue
        if (not adapted and len(s.shape) == 4 and s.shape[2] == 3 and d.shape[2] == 1
                and tuple(s.shape[:2]) == tuple(d.shape[:2]) and s.shape[3] == d.shape[3]):
            d.assign(value.sum(axis=2, keepdims=True))
            adapted = True
            continue
        raise ValueError(
            f"adapt_first_conv: variable {d.path!r} has shape {tuple(d.shape)}, source "
            f"{s.path!r} has {tuple(s.shape)}; only the first 3 -> 1 channel kernel may differ"
        )
    if not adapted and src.input_shape[-1] != dst.input_shape[-1]:
        raise ValueError("adapt_first_conv: found no 3-channel convolution kernel to adapt")


def load_branch_weights(branch: keras.Model, path) -> None:
    """Load a local weights file into ``branch`` (built by ``build_branch``) in place.

    Raises:
        FileNotFoundError: the file does not exist (the message names it).
        DataError: unknown file type, or the weights do not fit; the message names the file
            and the layer/variable that does not fit.
    """
    path = Path(path)
    name, channels = branch_spec(branch)
    weights_file_options(name, path)  # missing file, other branch: say so before loading
    whole = _is_whole_branch_file(path)
    target = branch if whole else branch.get_layer("backbone")
    try:
        _load(target, path)
        return
    except ValueError as err:
        first_error = err
    if channels == 1:  # maybe a 3-channel file: load into an RGB twin, then adapt
        options = branch_options(branch)
        twin = assemble_branch(name, get_branch_def(name).backbone(
            tuple(branch.input_shape[1:3]) + (3,), None, **options), options)
        try:
            _load(twin if whole else twin.get_layer("backbone"), path)
        except ValueError:
            pass
        else:
            adapt_first_conv(twin, branch)
            return
    raise DataError(
        f"{path}: weights do not fit the {'branch' if whole else 'backbone'} of {name!r} "
        f"({_where(first_error)}): {str(first_error).splitlines()[0][:300]}"
    ) from first_error


def weights_file_options(name: str, path) -> dict[str, str]:
    """The build options a converted weights file was made for (``{}`` for other files).

    Raises:
        MissingFileError: (a ``FileNotFoundError``) no such file; for a branch the converter
            serves, the message gives the ``python -m whale.models.convert`` command.
        DataError: the file was converted for another branch, or is not a readable HDF5 file.
    """
    import h5py

    path = Path(path)
    if not path.is_file():
        spec = get_branch_def(name)
        hint = ""
        if spec.torch_models:
            hint = (f"; make it from a PyTorch checkpoint of {' or '.join(spec.torch_models)} "
                    f"with: python -m whale.models.convert --branch {name} --from "
                    f"CHECKPOINT(.pth|.safetensors|.npz) --out {path}")
        raise MissingFileError(f"weights file not found: {path}{hint}")
    try:
        with h5py.File(path, "r") as f:
            made_for = f.attrs.get(BRANCH_ATTR)
            options = f.attrs.get(OPTIONS_ATTR)
    except OSError as err:
        raise DataError(f"{path}: not a readable HDF5 weights file ({err})") from None
    if made_for is not None and str(made_for) != name:
        raise DataError(f"{path}: weights converted for branch {str(made_for)!r}, not {name!r}")
    return json.loads(options) if options is not None else {}


def _is_whole_branch_file(path: Path) -> bool:
    import h5py

    suffix = "".join(path.suffixes[-2:]).lower()
    if not (suffix.endswith(".h5") or suffix.endswith(".hdf5")):
        raise DataError(f"{path}: expected a .weights.h5 or .h5 weights file")
    try:
        with h5py.File(path, "r") as f:
            if suffix == ".weights.h5" and "layers" in f:
                return "preprocess" in f["layers"]
            group = f["model_weights"] if "model_weights" in f else f
            names = [n.decode() if isinstance(n, bytes) else str(n)
                     for n in group.attrs.get("layer_names", [])]
            if names:
                return "preprocess" in names
    except OSError as err:
        raise DataError(f"{path}: not a readable HDF5 weights file ({err})") from None
    raise DataError(f"{path}: HDF5 file holds no Keras weights")


def _load(model: keras.Model, path: Path) -> None:
    """``model.load_weights`` that treats any partial load as a ``ValueError``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.load_weights(str(path))
    for w in caught:
        text = str(w.message)
        if "could not be loaded" in text or "Skipping" in text or "mismatch" in text:
            raise ValueError(text)


def _where(err: Exception) -> str:
    text = str(err)
    if "count mismatch" in text.lower():
        return "layer count differs"
    m = re.search(r"path=([^,\s]+)", text) or re.search(r"named (\S+?)\)?for weight (\S+)", text)
    if m:
        return "variable " + m.group(m.lastindex)
    m = re.search(r"layer '?([\w/.-]+)'?", text, flags=re.IGNORECASE)
    return f"layer {m.group(1)}" if m else "structure differs"


def first_conv_kernel(model: keras.Model) -> np.ndarray:
    """The first 4-D kernel of ``model`` as ``[kh, kw, C, f]`` float32 (for checks)."""
    for w in model.weights:
        if len(w.shape) == 4:
            return keras.ops.convert_to_numpy(w.value)
    raise ValueError(f"{model.name!r} has no convolution kernel")
