"""Local features kept on disk by photo content, so a photo is extracted once per feature setting.

``ROOT/<fingerprint>/<hh>/<sha256>.npz``: ``fingerprint`` names the feature settings
(:meth:`whale.keypoints.config.KeypointConfig.fingerprint`), ``sha256`` the photo's bytes
(:func:`whale.core.files.file_hash`), so a renamed or copied photo is not extracted again, a changed one is,
and a second run, a new batch or the catalogue reuse what is there. Each file is written atomically as
soon as its photo is done: a killed extraction keeps every finished photo.

Each file is a sealed array file (:mod:`whale.core.sealed`: plain arrays, no pickle, under a content hash
written with them) that also records the key it was extracted for (``photo``: the photo's sha256, with its box),
so a damaged or altered file (cut short, bytes flipped, arrays replaced), a file copied over another, or one of an
earlier version that recorded no key (extracted before EXIF orientation was applied) or no content hash is known:
:func:`read_entry` says what is wrong with it, :meth:`FeatureStore.features` extracts it again (never matching on
it), and ``whale catalogue check`` lists it.

Each file also records its layout, :data:`FORMAT` (an array ``format``): format 1, every file written before the
number was recorded, holds 128 bytes a descriptor whatever its kind, XFeat's 64 written twice; format 2 holds a
descriptor at its kind's width (:func:`whale.keypoints.extract.descriptor_width`: 128 bytes for RootSIFT and a
learned descriptor, 64 for XFeat). A format-1 RootSIFT or learned file holds the bytes format 2 would and is read
as it is (a store is never extracted again for its format); a format-1 XFeat file is read as the first 64 bytes of
each row, once both halves are found equal (a file whose halves differ is not one and is extracted again). A file
of a later format than this version's is extracted again, never guessed at.

The default root is ``$WHALE_CACHE/keypoints``, else ``~/.cache/whale/keypoints``.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError, DataError
from whale.core.files import file_hash
from whale.core.sealed import SealError, read_sealed, write_sealed
from whale.keypoints.config import FeatureConfig, KeypointConfig
from whale.keypoints.extract import DESCRIPTOR_WIDTH, XFEAT_WIDTH, Features, descriptor_width, extract
from whale.core.progress import progress_bar


def default_root() -> Path:
    """``$WHALE_CACHE/keypoints``, else ``~/.cache/whale/keypoints``."""
    base = os.environ.get("WHALE_CACHE")
    return Path(base) / "keypoints" if base else Path.home() / ".cache" / "whale" / "keypoints"


def default_workers() -> int:
    """Extraction processes: every core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _extract_job(job: tuple[str, FeatureConfig, tuple | None]) -> Features | str:
    """One photo in a worker process: its features, or the error message (re-raised by the parent)."""
    path, cfg, box = job
    try:
        return extract(path, cfg, box)
    except DataError as e:
        return str(e)


def _start_method() -> str:
    """``fork`` (fast, no ``__main__`` guard needed) unless a backend with threads is loaded: a fork of a
    process holding TensorFlow's or JAX's thread pools can hang, so those get ``spawn``."""
    import sys

    return "spawn" if {"tensorflow", "jax", "torch"} & set(sys.modules) else "fork"


FORMAT = 2
"""The layout of the files written now (module docstring); a file without a ``format`` array is of format 1."""
MISSING = "missing"
UNTIED = "records no photo or no content hash (written by an earlier version)"
"""What :func:`read_entry` says of a file that exists but records no key or no content hash: not tied to a photo."""


def read_entry(path: Path, key: str, width: int | None = None) -> tuple[Features | None, str]:
    """``(features, "")`` of the store file ``path`` written for ``key`` (a photo's sha256, ``-box`` after it for
    a boxed photo), else ``(None, what is wrong)``: :data:`MISSING`, damaged or altered (its content hash),
    :data:`UNTIED`, another photo's features (``"holds the features of photo ..."``), of a later format than
    :data:`FORMAT`, or arrays of the wrong shape or with values not finite.

    ``width``: the bytes a descriptor of this store takes (:func:`~whale.keypoints.extract.descriptor_width` of its
    config's descriptor), whatever the file's format: a format-1 XFeat file's rows are given as their first 64
    bytes (module docstring). None (checking a file whose kind is not known): the width the file's format allows,
    as stored (a format-1 XFeat file's doubled rows unconverted: not for matching on).
    """
    try:
        z = read_sealed(path)
    except FileNotFoundError:
        return None, MISSING
    except SealError as exc:
        why = str(exc).replace(f"{path}: ", "")
        return None, UNTIED if why.startswith("records no content hash") else f"not a readable feature file ({why})"
    names = set(z)
    if not {"xy", "shape", "desc", "size"} <= names:
        return None, f"not a feature file (arrays {', '.join(sorted(names)) or 'none'})"
    if "photo" not in names:
        return None, UNTIED
    photo = str(z["photo"])
    if photo != key:
        return None, f"holds the features of photo {photo[:12]}, not of {key[:12]} its name says"
    version = z.get("format", np.asarray(1))
    if version.shape != () or version.dtype.kind not in "iu" or int(version) < 1:
        return None, f"not a readable feature file (its format is {version!r}, not a number from 1)"
    if int(version) > FORMAT:
        return None, f"of format {int(version)}, later than this version's {FORMAT} (written by a newer whale)"
    desc = z["desc"]
    widths = (DESCRIPTOR_WIDTH,) if int(version) == 1 else (DESCRIPTOR_WIDTH, XFEAT_WIDTH)
    if width is not None:
        if int(version) == 1 and width == XFEAT_WIDTH and desc.ndim == 2 and desc.shape[1] == 2 * XFEAT_WIDTH:
            if not np.array_equal(desc[:, :XFEAT_WIDTH], desc[:, XFEAT_WIDTH:]):
                return None, "of format 1 but its descriptors are not XFeat's 64 bytes written twice"
            desc = np.ascontiguousarray(desc[:, :XFEAT_WIDTH])  # format 1's doubled rows, read as format 2's
        widths = (width,)
    try:
        f = Features(z["xy"], z["shape"], desc, tuple(int(v) for v in z["size"].ravel()))  # names: _write
        n = len(f.xy)
    except (ValueError, TypeError, IndexError) as exc:
        return None, f"not a readable feature file ({exc})"
    if (f.xy.shape != (n, 2) or f.diameter_angle.shape != (n, 2) or f.desc.ndim != 2 or len(f.desc) != n
            or f.desc.shape[1] not in widths or f.desc.dtype != np.uint8 or len(f.photo_size) != 2
            or not (np.isfinite(f.xy).all() and np.isfinite(f.diameter_angle).all())):
        return None, "arrays of the wrong shape or type, or values that are not finite"
    return f, ""


def boxed_key(digest: str, box: tuple | None) -> str:
    """A photo's key in a store by content: its ``digest``, and with a ``box`` ``(x0, y0, x1, y1)`` that box too (a
    boxed photo is kept apart from the same photo unboxed or with another box)."""
    return digest if box is None else f"{digest}-{'_'.join(str(round(float(v), 1)) for v in box)}"


class FeatureStore:
    """Features by photo content under ``root`` for one :class:`KeypointConfig`'s feature settings.
    ``redone``: stored files found not to hold their photo's features (:func:`read_entry`), extracted again."""

    def __init__(self, cfg: KeypointConfig, root=None):
        self.cfg = cfg
        self.root = Path(root) if root is not None else default_root()
        self.folder = self.root / cfg.fingerprint()
        self.width = descriptor_width(cfg.features.descriptor)
        """Bytes of a stored descriptor of this config (:func:`~whale.keypoints.extract.descriptor_width`)."""
        self.redone = 0
        self.keys: list[str] = []
        """The store keys of the photos of the last :meth:`features` call, in order (a photo's sha256, with its
        box): what names a photo's content to :class:`~whale.keypoints.selectcache.SelectorCache`."""

    def path(self, digest: str) -> Path:
        return self.folder / digest[:2] / f"{digest}.npz"

    def _read(self, digest: str) -> Features | None:
        features, what = read_entry(self.path(digest), digest, self.width)
        if features is None and what != MISSING:
            self.redone += 1  # a damaged, untied or another photo's entry is extracted again and overwritten
        return features

    def _write(self, digest: str, f: Features) -> None:
        # the files' array names stay those of earlier versions: shape, size
        write_sealed(self.path(digest), {"xy": f.xy, "shape": f.diameter_angle, "desc": f.desc,
                                         "size": np.asarray(f.photo_size, np.int64), "photo": np.asarray(digest),
                                         "format": np.asarray(FORMAT, np.int64)},
                     flag="--cache")

    def features(self, paths: Sequence, workers: int | None = None, progress: bool = True,
                 digests: Sequence[str] | None = None, boxes: Sequence[tuple | None] | None = None,
                 mapped: bool = False) -> list[Features]:
        """The features of every photo of ``paths``, in order: read from the store, the missing ones extracted.

        Args:
            paths: photo files.
            workers: extraction processes (None: :func:`default_workers`; 1: in this process).
            progress: tqdm bars while hashing and extracting.
            digests: the photos' content hashes when the caller has them (the catalogue), else computed.
            boxes: per photo ``(x0, y0, x1, y1)`` or None (the whole photo); a boxed photo is kept apart
                from the same photo unboxed or with another box.
            mapped: the descriptors (nine tenths of the bytes) held in one memory-mapped file, not in this
                process's memory (:class:`MappedDescriptors`): the whole competition's features fit in a few GB.

        Raises:
            DataError: a photo is missing or cannot be decoded (the message names it).
        """
        if workers is not None and int(workers) < 1:
            raise ConfigError(f"workers: expected an integer >= 1 (extraction processes), received {workers}")
        paths = [Path(p) for p in paths]
        if digests is None:
            digests = []
            for p in progress_bar(paths, desc="hashing photos", enabled=progress and len(paths) > 200):
                if not p.is_file():
                    raise DataError(f"{p}: photo not found")
                digests.append(file_hash(p))
        boxes = list(boxes) if boxes is not None else [None] * len(paths)
        digests = [boxed_key(d, b) for d, b in zip(digests, boxes)]
        self.keys = list(digests)
        redone = self.redone
        pack = MappedDescriptors(self.folder) if mapped else None
        reading = progress_bar(digests, desc="reading stored keypoint features", enabled=progress and len(paths) > 200)
        out: list[Features | None] = []
        for d in reading:  # each photo's descriptors to the mapped file as soon as read: never all held at once
            f = self._read(d)
            out.append(f if pack is None or f is None else pack.put(f))
        todo = [i for i, f in enumerate(out) if f is None]
        if not todo:
            return out if pack is None else pack.mapped(out)  # type: ignore[return-value]
        workers = default_workers() if workers is None else int(workers)
        jobs = [(str(paths[i]), self.cfg.features, boxes[i]) for i in todo]
        redone = self.redone - redone
        what = f"{len(todo) - redone} new photos" + (f", {redone} stored files not their photo's" if redone else "")
        bar = dict(total=len(todo), desc=f"extracting keypoints ({what})", enabled=progress)
        if workers == 1 or len(todo) < 8:
            results = progress_bar(map(_extract_job, jobs), **bar)
            self._keep(results, todo, digests, out, pack)
        else:
            import multiprocessing as mp

            with mp.get_context(_start_method()).Pool(min(workers, len(todo))) as pool:
                self._keep(progress_bar(pool.imap(_extract_job, jobs, chunksize=8), **bar), todo, digests, out, pack)
        return out if pack is None else pack.mapped(out)  # type: ignore[return-value]

    def _keep(self, results, todo, digests, out, pack: "MappedDescriptors | None") -> None:
        for i, f in zip(todo, results):
            if isinstance(f, str):
                raise DataError(f)
            self._write(digests[i], f)
            out[i] = f if pack is None else pack.put(f)


@dataclass(frozen=True)
class StandIn(Features):
    """A photo's keypoints whose descriptors wait in a :class:`MappedDescriptors` file: ``desc`` holds none,
    ``rows`` is ``(first, end)`` of its rows there and ``pack`` the file's owner, so the stand-in itself says
    where its descriptors are (a copy of it, ``dataclasses.replace`` included, still does)."""

    rows: tuple[int, int] = (0, 0)
    pack: "MappedDescriptors | None" = field(default=None, repr=False, compare=False)


class MappedDescriptors:
    """Photos' descriptors written one after another into a file that has no name (created in ``folder`` and
    unlinked at once: nothing stays behind, even when the process is killed), then memory-mapped read-only.

    The kernel keeps the mapped pages as it keeps a file's cache: they count in the resident memory while touched,
    but it can drop and reread them under pressure, where descriptors held in the process's own memory would have
    to stay. :meth:`put` keeps a photo's keypoints and makes a stand-in with no descriptors; :meth:`mapped` gives
    every photo its descriptors back as a view of the mapped file."""

    def __init__(self, folder: Path):
        """``folder``: where the file is made (the store's: on its disk, not in a RAM-backed temporary folder);
        the system's temporary folder when ``folder`` cannot take it."""
        import tempfile

        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            self._file = tempfile.TemporaryFile(dir=folder)
        except OSError:
            self._file = tempfile.TemporaryFile()
        self._rows = 0
        self._width: int | None = None  # bytes a row: the first photo's descriptors' (every photo's must agree)

    def __deepcopy__(self, memo) -> "MappedDescriptors":
        return self  # one file, not copied: a deep copy of a stand-in still names this file

    def put(self, f: Features) -> StandIn:
        """``f`` with its descriptors appended to the file: a :class:`StandIn` holding none (``[0, w]``, ``w`` its
        descriptors' width) but its rows there, until :meth:`mapped`.

        Raises:
            ValueError: ``f``'s descriptors are not as wide as those already in the file (another kind's)."""
        width = f.desc.shape[1]
        if self._width is None:
            self._width = width
        elif width != self._width:
            raise ValueError(f"MappedDescriptors.put: descriptors of {width} bytes where the file holds rows of "
                             f"{self._width} (features of another kind)")
        self._file.write(np.ascontiguousarray(f.desc, dtype=np.uint8).tobytes())
        stand_in = StandIn(f.xy, f.diameter_angle, np.zeros((0, width), np.uint8), f.photo_size,
                           rows=(self._rows, self._rows + len(f)), pack=self)
        self._rows += len(f)
        return stand_in

    def mapped(self, features: Sequence[StandIn]) -> list[Features]:
        """``features`` (the stand-ins :meth:`put` returned, or copies of them, in any order) with their
        descriptors: ``[n, w] uint8`` read-only views of the mapped file (``w`` the width :meth:`put` was given).

        Raises:
            ValueError: an item is not a stand-in of this file (a photo's own features, or another file's)."""
        for i, f in enumerate(features):
            if not isinstance(f, StandIn) or f.pack is not self:
                what = "another file's stand-in" if isinstance(f, StandIn) else f"a {type(f).__name__}"
                raise ValueError(f"MappedDescriptors.mapped: expected the stand-ins this file's put returned; "
                                 f"item {i} is {what}")
        self._file.flush()
        width = DESCRIPTOR_WIDTH if self._width is None else self._width
        rows = np.memmap(self._file, dtype=np.uint8, mode="r", shape=(self._rows, width)) if self._rows else \
            np.zeros((0, width), np.uint8)
        return [Features(f.xy, f.diameter_angle, rows[f.rows[0]:f.rows[1]], f.photo_size) for f in features]
