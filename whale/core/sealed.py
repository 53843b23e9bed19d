"""Sealed array files: plain ``.npz`` archives that carry a content hash and are read without trusting a byte.

Every cache the toolkit reads back (fitted keypoint selectors, trunk maps, keypoint features) is data another
process, another machine or another person may have written: a shared ``--cache`` folder, a Kaggle dataset of
features, a disk that lost a sector. Such a file must never run code nor be silently wrong, so it is written by
:func:`write_sealed` and read by :func:`read_sealed`:

* the archive holds only ``.npy`` members (numbers and fixed-width strings, never a pickle) and one more,
  :data:`HASH`: the SHA-256 of every other member's name and bytes, in name order;
* :func:`read_sealed` reads the file's bytes (no more than the file holds, whatever a length field says), each
  member through :mod:`zipfile` (its CRC-32 checked), checks the content hash over the members' bytes, and only
  then parses each array, after checking that its header's shape and dtype account for exactly the bytes that
  follow (so a changed length field cannot ask for a huge allocation) and that the dtype holds no objects.

Anything wrong (a file cut short, bytes flipped, a member added or removed, no hash, an array of objects) raises
:class:`SealError`, whose message names the file and the problem; the caller computes the entry again. The hash
guards against damage, not forgery: whoever may write the cache may write a consistent file, but what they can
put in it is numbers, which the caller checks for shape and range as it would check its own.

A sealed file stays an ``.npz``: ``np.load(path, allow_pickle=False)`` reads it too.
"""
from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.core.files import atomic_write

HASH = "content_sha256"
"""The member holding the hex SHA-256 of the other members (a 0-d unicode array)."""


class SealError(DataError):
    """A sealed file that is damaged, altered, of an earlier layout or not one at all (the message names it)."""


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=False)
    return buf.getvalue()


def _digest(members: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(members):
        h.update(name.encode() + b"\0" + len(members[name]).to_bytes(8, "little"))
        h.update(members[name])
    return h.hexdigest()


def sealed_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The bytes of the sealed archive of ``arrays`` (names without ``.npy``; none of dtype object)."""
    if HASH in arrays:
        raise ValueError(f"{HASH}: a name the seal keeps for itself")
    members = {}
    for name, value in arrays.items():
        value = np.asarray(value)
        if value.dtype.hasobject:
            raise ValueError(f"{name}: an array of Python objects cannot be sealed (dtype {value.dtype})")
        members[name] = _npy_bytes(value)
    members[HASH] = _npy_bytes(np.asarray(_digest(members)))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))  # the same arrays, the same bytes
            zf.writestr(info, data)
    return buf.getvalue()


def write_sealed(path, arrays: Mapping[str, np.ndarray], flag: str = "--cache") -> Path:
    """Write ``arrays`` (``{name: array}``, no object dtypes) to ``path`` atomically as a sealed ``.npz``;
    ``flag``: the option a refused write names (:func:`whale.core.files.atomic_write`)."""
    data = sealed_bytes(arrays)
    return atomic_write(path, lambda tmp: _write_file(tmp, data), flag=flag)


def _write_file(tmp: Path, data: bytes) -> None:
    with open(tmp, "wb") as fh:
        fh.write(data)


def _parse(path: Path, name: str, data: bytes) -> np.ndarray:
    """One member's array from its (hash-checked) ``.npy`` bytes, its header checked against its length."""
    fh = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy version {version}")
    except (ValueError, SyntaxError, TypeError) as exc:
        raise SealError(f"{path}: member {name} has no readable array header ({exc})") from None
    if dtype.hasobject:
        raise SealError(f"{path}: member {name} holds Python objects (dtype {dtype}), which a sealed file never does")
    body = len(data) - fh.tell()
    count = int(np.prod(shape, dtype=object))
    if count * dtype.itemsize != body:
        raise SealError(f"{path}: member {name} says {tuple(shape)} of {dtype} ({count * dtype.itemsize} bytes) "
                        f"but holds {body} bytes")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=fh.tell())
    return array.reshape(shape, order="F" if fortran else "C").copy()


def read_sealed(path) -> dict[str, np.ndarray]:
    """``{name: array}`` of the sealed file ``path`` (module docstring), every check passed.

    Raises:
        FileNotFoundError: there is no such file (nothing to recompute over).
        SealError: the file is damaged, altered or not sealed; the message names it and says what is wrong.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SealError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not data:
        raise SealError(f"{path}: an empty file")
    members: dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy") or info.compress_type != zipfile.ZIP_STORED \
                        or info.file_size > len(data):
                    raise SealError(f"{path}: member {info.filename!r} is not one a sealed file holds")
                members[info.filename[:-4]] = zf.read(info)  # checks the member's CRC-32
    except SealError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, KeyError,
            NotImplementedError, UnicodeDecodeError, RuntimeError) as exc:
        raise SealError(f"{path}: not a readable archive ({exc})") from None
    if HASH not in members:
        raise SealError(f"{path}: records no content hash (written by an earlier version, or not by the toolkit)")
    recorded = _parse(path, HASH, members.pop(HASH))
    if recorded.dtype.kind != "U" or recorded.shape != () or str(recorded) != _digest(members):
        raise SealError(f"{path}: its content does not match the hash written with it (damaged or altered)")
    return {name: _parse(path, name, raw) for name, raw in members.items()}
