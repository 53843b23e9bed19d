"""What a competition folder's images are, as a run records them: :func:`data_fingerprint` (``train.csv`` and the
image names) and :func:`image_hashes` / :func:`images_fingerprint` (the images' bytes), kept in a run folder's
``data_images.json`` (:data:`DATA_IMAGES`, :func:`write_data_images`).

``whale train`` writes them (:mod:`whale.training.runlog`) so a ``--resume`` onto other data is refused, and so do
the keypoint and joint score runs (``whale score``); the commands that read a run's scores beside a data folder or
beside other runs read them back (:func:`refuse_other_photos`, :func:`digest`), so a run of other photos under the
same names (a split drawn again with the same file names) is refused too: the joint identification's
``--with-run``, ``whale ensemble``, pseudo-label rounds.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path


def data_format(data_dir: Path):
    """The :class:`whale.formats.Format` of a competition folder; 2019's when ``train.csv`` is missing or fits none."""
    from whale.core.errors import DataError
    from whale.formats import DEFAULT, detect_format

    try:
        return detect_format(data_dir)
    except DataError:  # loading the folder reports the bad header; here it only names folders
        return DEFAULT


def data_fingerprint(data_dir: Path) -> str:
    """A short hash (16 hex digits) of a competition folder: ``train.csv``'s bytes and the image lists.

    The names of the files in ``train/`` and ``test/`` (the format's image folders:
    :mod:`whale.formats`) count here, not their bytes: a folder with another ``train.csv`` or other
    images is another competition. The bytes are :func:`images_fingerprint`'s (kept apart so that
    runs recorded before it resume as before). ``'none'`` when there is no ``train.csv``.
    """
    data_dir = Path(data_dir)
    csv_path = data_dir / "train.csv"
    if not csv_path.is_file():
        return "none"
    fmt = data_format(data_dir)
    digest = hashlib.sha256(csv_path.read_bytes())
    for sub in (fmt.train_dir, fmt.test_dir):
        folder = data_dir / sub
        names = sorted(os.listdir(folder)) if folder.is_dir() else []
        digest.update(f"\0{sub}\0{len(names)}\0".encode() + "\0".join(names).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


DATA_IMAGES = "data_images.json"
"""The run folder's record of the data's image bytes: ``{"train/a.jpg": [size, mtime_ns, digest], ...}``."""


def _image_files(data_dir: Path) -> list[tuple[str, Path]]:
    """``(name, path)`` of every file in the data's image folders, names as ``train/a.jpg``, sorted."""
    fmt = data_format(data_dir)
    out = []
    for sub in (fmt.train_dir, fmt.test_dir):
        folder = data_dir / sub
        if folder.is_dir():
            out += [(f"{sub}/{n}", folder / n) for n in sorted(os.listdir(folder))]
    return out


def image_hashes(data_dir: Path, known: dict | None = None) -> dict[str, list]:
    """``{name: [size, mtime_ns, digest]}`` of every image of a competition folder (names as ``train/a.jpg``).

    ``digest`` is 32 hex digits of BLAKE2b over the file's bytes. ``known``: an earlier result
    (``data_images.json``); a file whose size and modification time it records unchanged keeps that
    digest without being read again, so a resume reads only the files written since.
    """
    known = known or {}
    out = {}
    for name, path in _image_files(Path(data_dir)):
        try:
            st = path.stat()
        except OSError:
            continue  # gone since the listing, or a dangling link: not an image of the data
        if not path.is_file():
            continue
        old = known.get(name)
        if isinstance(old, list) and len(old) == 3 and old[:2] == [st.st_size, st.st_mtime_ns]:
            out[name] = old
            continue
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        out[name] = [st.st_size, st.st_mtime_ns, h.hexdigest()]
    return out


def write_data_images(out_dir: Path, data_dir: Path, known: dict | None = None) -> dict[str, list]:
    """Record ``data_dir``'s image bytes in ``out_dir``'s :data:`DATA_IMAGES` and return them
    (:func:`image_hashes`; the files whose size and time ``known``, else the folder's earlier record, holds are not
    read again)."""
    from whale.core.files import write_text_atomic

    hashes = image_hashes(Path(data_dir), read_data_images(out_dir) if known is None else known)
    write_text_atomic(Path(out_dir) / DATA_IMAGES, "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                                                     for k, v in sorted(hashes.items())) + "\n}\n")
    return hashes


def images_fingerprint(hashes: dict[str, list]) -> str:
    """16 hex digits over the names and digests of :func:`image_hashes` (sizes and times left out)."""
    digest = hashlib.sha256()
    for name in sorted(hashes):
        digest.update(f"{name}\0{hashes[name][2]}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


def read_data_images(out_dir: Path) -> dict:
    """The run folder's ``data_images.json`` (:data:`DATA_IMAGES`), or ``{}`` when missing or unreadable."""
    try:
        record = json.loads((Path(out_dir) / DATA_IMAGES).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def digest(entry) -> str | None:
    """The digest of one :data:`DATA_IMAGES` entry (``[size, mtime_ns, digest]``), None when malformed."""
    return entry[2] if isinstance(entry, list) and len(entry) == 3 else None


def digests(record: dict) -> dict[str, str | None]:
    """``{name: digest}`` of a :data:`DATA_IMAGES` record or :func:`image_hashes`' result (:func:`digest` of each)."""
    return {name: digest(entry) for name, entry in record.items()}


def refuse_other_photos(runs: Sequence[tuple[str, Path]], data_dir) -> dict[str, list] | None:
    """Refuse a run trained on other photos under ``data_dir``'s names: each run folder's record of its data's
    image bytes (:data:`DATA_IMAGES`) against ``data_dir``'s, name by name; ``runs``: ``(how the command line named
    it, its folder): a trained run, or a keypoint or joint score run (they record their data too). A folder
    without the record (a run of another tool, or one written before the record) passes: the names in its score
    files are all that is checked there.

    Returns:
        ``data_dir``'s :func:`image_hashes` when some run had a record to compare (a caller's ``known``), else None.

    Raises:
        DataError: an image named alike in both with other bytes; names the record, the run and a few images.
    """
    from whale.core.errors import DataError

    now = None
    for label, folder in runs:
        record = read_data_images(folder)
        if not record:
            continue
        now = image_hashes(Path(data_dir)) if now is None else now
        changed = changed_names(record, now)
        if changed:
            shown = ", ".join(changed[:3]) + (f" ... ({len(changed)} in all)" if len(changed) > 3 else "")
            verb, made = ("score", "scored") if _score_run(folder) else ("train", "trained")
            raise DataError(f"{Path(folder) / DATA_IMAGES}: {label} was {made} on other photos under the names of "
                            f"{data_dir}'s: {len(changed)} images differ in bytes (e.g. {shown}); {verb} it on this "
                            "folder")
    return now


def changed_names(record: dict, now: dict[str, list]) -> list[str]:
    """The names, sorted, that a :data:`DATA_IMAGES` ``record`` and :func:`image_hashes`' ``now`` both hold with other
    bytes (a malformed entry of the record counts as unknown, not changed)."""
    return sorted(n for n, e in record.items() if n in now and digest(e) not in (None, now[n][2]))


def _score_run(folder) -> bool:
    """Whether ``folder`` is a keypoint or joint score run's (its ``run.json`` names a matcher), not a trained run's."""
    try:
        meta = json.loads((Path(folder) / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and bool(meta.get("matcher"))
