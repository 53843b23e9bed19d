"""Files the toolkit writes: atomically (temporary file + rename), and stamped with the code's revision.

Every file a run, an ensemble or a kernel leaves behind (checkpoints, score files, logs,
plots, submissions, JSON state) goes through :func:`atomic_write`: it is written to a hidden
temporary file in the same folder and moved over the target with ``os.replace``, so a reader
(or a resumed run after ``kill -9``) sees either the old file or the new one, never half of
one. The temporary file keeps the target's suffix because writers such as ``np.savez``,
``keras.Model.save`` and ``matplotlib`` choose the format from it. A writer that writes
somewhere else (``np.savez`` given a path appends ``.npz`` to a name without it) is caught:
its file is removed and the write refused, so no hidden file is left behind.

A write the file system refuses (a full disk, a read-only folder, a folder where the file
should be) raises :class:`whale.core.errors.OutputError` naming the file; :func:`check_output`
refuses such an output before a command does any work.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from whale.core.errors import WRITE_ERRNOS, OutputError, describe_write_error


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object], fsync: bool = False,
                 flag: str = "--out") -> Path:
    """Call ``write(tmp_path)`` and move the result over ``path``; returns ``path``.

    ``tmp_path`` sits next to ``path`` (same file system, so the rename is atomic), is hidden
    and ends with ``path``'s suffix. On any error the temporary file is removed and the error
    re-raised; ``path`` is then untouched. The file gets the usual umask permissions (not the
    0600 of ``mkstemp``). ``fsync=True`` also flushes it to disk before the rename (files a
    user hands in, such as submissions, survive a power cut too). ``flag``: the option a refused
    write's message says to change (:func:`whale.core.errors.describe_write_error`).
    """
    path = Path(path)
    tmp = None
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a folder of that name exists", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(tmp)
        write(tmp)
        # A writer that changed the name (np.save adding .npy) left the temporary file empty: only then is the
        # folder listed, so a write costs the same in a folder of 30,000 cache files as in an empty one.
        strays = [] if tmp.is_file() and tmp.stat().st_size else [p for p in path.parent.glob(glob.escape(tmp.name) + "?*")]
        if strays:
            raise OutputError(f"{path}: the writer wrote {strays[0].name} instead of the file named "
                              f"(it changed the name); nothing written")
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            for leftover in [tmp, *tmp.parent.glob(glob.escape(tmp.name) + "?*")]:
                leftover.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError) and exc.errno in WRITE_ERRNOS:
            raise OutputError(describe_write_error(path, exc, flag)) from exc
        raise
    return path


def partial_writes(folder: str | os.PathLike, name_pattern: str) -> list[Path]:
    """The temporary files :func:`atomic_write` left in ``folder`` (a kill between its write and its rename) for
    targets whose names match the glob ``name_pattern``: hidden, ``.NAME.<random>.tmp<suffix>``."""
    return sorted(Path(folder).glob(f".{name_pattern}.*.tmp*"))


def check_output(path: str | os.PathLike, what: str = "--out", folder: bool = False) -> Path:
    """Refuse an output ``path`` that cannot be written, before any work; returns ``path``.

    ``folder=False``: ``path`` names a file (an existing folder of that name is refused, and so is a
    name ending with a path separator, ``newdir/``, which names a folder even before it exists);
    ``folder=True``: ``path`` names a folder (an existing file is refused). Either way a file in
    the way of its parent folders, or a nearest existing folder that is read-only (permissions
    or a read-only file system), is refused. Nothing is created.

    Raises:
        OutputError: naming ``what`` (the flag) and the path, and what was expected.
    """
    if not folder and str(path).endswith(("/", os.sep)):  # Path() would drop the slash: a file named like the folder
        raise OutputError(f"{what} {path}: expected a file name, received a folder's (it ends with "
                          f"{str(path)[-1]!r}): name the file, e.g. {Path(path) / 'NAME'}")
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path}: expected a folder, found a file")
    if not folder and path.is_dir():
        raise OutputError(f"{what} {path}: expected a file name, found a folder "
                          f"(name the file, e.g. {path / 'NAME'}{'' if path.suffix else '.EXT'})")
    if not folder and path.name in ("", ".", ".."):
        raise OutputError(f"{what} {path}: expected a file name")
    ancestor = path if folder and path.is_dir() else path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise OutputError(f"{what} {path}: {ancestor} is a file, expected a folder there")
    if not _writable(ancestor):
        raise OutputError(f"{what} {path}: {ancestor} is read-only (expected a folder the toolkit can write "
                          "into): choose another place")
    return path


def _writable(folder: Path) -> bool:
    """Whether files can be created in ``folder``: permissions (root passes those) and a read-only mount."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        return not os.statvfs(folder).f_flag & os.ST_RDONLY
    except (OSError, AttributeError):  # no statvfs (Windows): permissions only
        return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(path: str | os.PathLike, payload: dict) -> Path:
    """Write ``payload`` as indented, key-sorted JSON to ``path`` atomically."""
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True))


def file_hash(path: str | os.PathLike) -> str:
    """sha256 hex digest of a file's bytes: a photo's identity (the catalogue's, the keypoint store's)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_revision(repo: str | os.PathLike | None = None) -> str:
    """The git commit of ``repo`` (default: the toolkit's checkout), or ``'unknown'`` outside one."""
    cwd = Path(repo) if repo is not None else Path(__file__).parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
