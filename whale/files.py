"""Files the toolkit writes: atomically (temporary file + rename), and stamped with the code's revision.

Every file a run, an ensemble or a kernel leaves behind (checkpoints, score files, logs,
plots, submissions, JSON state) goes through :func:`atomic_write`: it is written to a hidden
temporary file in the same folder and moved over the target with ``os.replace``, so a reader
(or a resumed run after ``kill -9``) sees either the old file or the new one, never half of
one. The temporary file keeps the target's suffix because writers such as ``np.savez``,
``keras.Model.save`` and ``matplotlib`` choose the format from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object], fsync: bool = False) -> Path:
    """Call ``write(tmp_path)`` and move the result over ``path``; returns ``path``.

    ``tmp_path`` sits next to ``path`` (same file system, so the rename is atomic), is hidden
    and ends with ``path``'s suffix. On any error the temporary file is removed and the error
    re-raised; ``path`` is then untouched. The file gets the usual umask permissions (not the
    0600 of ``mkstemp``). ``fsync=True`` also flushes it to disk before the rename (files a
    user hands in, such as submissions, survive a power cut too).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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


def git_revision(repo: str | os.PathLike | None = None) -> str:
    """The git commit of ``repo`` (default: the toolkit's checkout), or ``'unknown'`` outside one."""
    cwd = Path(repo) if repo is not None else Path(__file__).parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
