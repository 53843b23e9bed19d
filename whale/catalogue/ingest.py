"""``add``: a folder of identified photos into the catalogue, in one transaction.

The labels CSV is either the catalogue's own ``image,individual[,date,location,encounter,source]`` or
a Kaggle ``train.csv`` (``Image,Id``; its ``new_whale`` rows name no individual and are
skipped). ``image`` is a file name relative to the photos folder; ``source``, where given, is
recorded as where the photo came from instead of its path (what ``export`` writes, so that a
re-imported catalogue keeps its photos' origins). An optional boxes CSV (``Image,x0,y0,x1,y1``,
the layout of Kaggle's ``bounding_boxes.csv``) gives crops; without one a photo is used whole.

Every photo is decoded first: one that is not an image (a text file named ``.jpg``, an empty or
truncated file) or whose box leaves the image refuses the whole ``add``, naming its row, before
anything is stored. Photos are then copied into the catalogue under their content hash
(:func:`whale.catalogue.db.file_hash`) and flushed to disk; one transaction then records individuals,
images and sightings. A photo whose bytes the catalogue already holds is recognised: under the same
individual it is skipped (counted as a duplicate), under another one the whole ``add`` is refused,
naming the row (its copies are deleted when the command ends: :meth:`Catalogue.writing`).
"""
from __future__ import annotations

import csv
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from whale import NEW_WHALE
from whale.catalogue import sql
from whale.catalogue.db import SIGHTING_COLUMNS, Catalogue, file_hash, fsync_dir, user
from whale.core.errors import DataError
from whale.core.files import atomic_write
from whale.core.progress import progress_bar

OWN_COLUMNS = ("image", "individual")
OPTIONAL_COLUMNS = SIGHTING_COLUMNS
SOURCE_COLUMN = "source"
KAGGLE_COLUMNS = ("Image", "Id")


@dataclass(frozen=True)
class LabelledPhoto:
    """One row of a labels CSV: the photo's path, its individual, where the row is, and its sighting columns."""

    path: Path
    individual: str
    where: str
    date: str | None = None
    location: str | None = None
    encounter: str | None = None
    box: tuple[int, int, int, int] | None = None
    source: str | None = None


def read_labels(csv_path, photos_dir, boxes_csv=None) -> tuple[list[LabelledPhoto], int]:
    """``(rows, skipped new_whale rows)`` of a labels CSV, every photo checked to exist.

    Raises:
        DataError: a missing column, an empty image or individual, a photo that does not exist
            (each naming the file and line).
    """
    from whale.data.competition import read_boxes, safe_image_path

    csv_path, photos_dir = Path(csv_path), Path(photos_dir)
    if not photos_dir.is_dir():
        raise DataError(f"{photos_dir}: no such folder of photos")
    try:  # utf-8-sig: the byte-order mark spreadsheet programs write before the header is no column name
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [c.strip() for c in reader.fieldnames or []]
            reader.fieldnames = header
            rows = list(reader)
    except OSError as exc:
        raise DataError(f"{csv_path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{csv_path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8 CSV"
                        ) from None
    except csv.Error as exc:
        raise DataError(f"{csv_path}: not a readable CSV file ({exc})") from None
    if set(KAGGLE_COLUMNS) <= set(header):
        image_col, id_col = KAGGLE_COLUMNS
    elif set(OWN_COLUMNS) <= set(header):
        image_col, id_col = OWN_COLUMNS
    else:
        raise DataError(f"{csv_path}: expected columns image,individual[,{','.join(OPTIONAL_COLUMNS)},"
                        f"{SOURCE_COLUMN}] or Kaggle's Image,Id; received {','.join(header) or 'no header'}")
    boxes = read_boxes(boxes_csv) if boxes_csv is not None else {}
    out, skipped = [], 0
    for i, row in enumerate(rows):
        where = f"{csv_path}, line {i + 2}"
        name, individual = (row.get(image_col) or "").strip(), (row.get(id_col) or "").strip()
        if not name or not individual:
            raise DataError(f"{where}: empty {image_col if not name else id_col}")
        if individual == NEW_WHALE:
            skipped += 1
            continue
        if individual.startswith("new:"):
            raise DataError(f"{where}: individual {individual!r}: the prefix 'new:' is reserved")
        try:
            path = safe_image_path(photos_dir, name)
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None
        if not path.is_file():
            raise DataError(f"{where}: {path}: no such photo")
        extra = {c: (row.get(c) or "").strip() or None for c in (*OPTIONAL_COLUMNS, SOURCE_COLUMN)}
        out.append(LabelledPhoto(path, individual, where, box=boxes.get(name), **extra))
    return out, skipped


def check_photo(path: Path, box=None, where: str | None = None) -> None:
    """Decode ``path`` (and check that ``box`` lies inside it): what every later ``index`` needs of a photo.

    Raises:
        DataError: not an image (naming ``where``, the row, then the file), or a box outside the image.
    """
    from whale.data import load_image

    try:
        img = load_image(path, channels=3)
    except DataError as exc:
        raise DataError(f"{where + ': ' if where else ''}{exc}; nothing added") from None
    h, w = img.shape[:2]
    if box is not None and not (box[2] <= w and box[3] <= h):
        raise DataError(f"{where + ': ' if where else ''}{path}: box {box_text(box)} leaves the {w}x{h} image; "
                        "nothing added")


def store_photo(cat: Catalogue, path: Path, digest: str) -> str:
    """Copy ``path`` into the catalogue under its hash (atomically); returns its relative file name.

    Not yet flushed to disk: :func:`flush` once after the last photo, before the transaction
    that records them (one ``sync`` instead of one per photo).
    """
    rel = Path("images") / digest[:2] / f"{digest}{path.suffix.lower()}"
    dest = cat.root / rel
    if not dest.is_file() or dest.stat().st_size != path.stat().st_size:
        atomic_write(dest, lambda tmp: shutil.copyfile(path, tmp))
    return rel.as_posix()


def flush(paths=None) -> None:
    """Flush written photos to disk before any row names them: ``paths`` one by one with their folders' entries
    (``accept``: a few photos, not the whole machine's writes), or with None every file and folder entry
    (``sync``: one call after ``add``'s many photos)."""
    if paths is None:
        os.sync()
        return
    folders = set()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folders.update((Path(path).parent, Path(path).parent.parent))  # images/ab/ may be new: images/ too
    for folder in sorted(folders):
        fsync_dir(folder)


def box_text(box) -> str | None:
    return None if box is None else ",".join(str(int(v)) for v in box)


def add_photos(cat: Catalogue, csv_path, photos_dir, boxes_csv=None, by: str | None = None,
               progress: bool = True) -> dict[str, int]:
    """Add the photos of a labels CSV; returns counts ``{added, duplicates, new_individuals, skipped_new_whale}``.

    Every photo is decoded before anything is copied; the copying and recording hold the catalogue's
    write lock (:meth:`whale.catalogue.db.Catalogue.writing`).

    Raises:
        DataError: a bad row (:func:`read_labels`), a photo that is not an image or whose box leaves
            it (:func:`check_photo`), or a photo whose bytes the catalogue (or an earlier row) holds
            under another individual; nothing is recorded then.
    """
    rows, skipped = read_labels(csv_path, photos_dir, boxes_csv)
    for r in progress_bar(rows, total=len(rows), desc="decoding photos", enabled=progress):
        check_photo(r.path, r.box, r.where)
    with cat.writing():
        return _add(cat, rows, skipped, by or user(), progress)


def _add(cat: Catalogue, rows: list[LabelledPhoto], skipped: int, by: str, progress: bool) -> dict[str, int]:
    staged = []
    for r in progress_bar(rows, total=len(rows), desc="copying photos", enabled=progress):
        digest = file_hash(r.path)
        staged.append((r, digest, store_photo(cat, r.path, digest)))
    flush()
    added = dup = 0
    with cat.transaction() as db:
        known = cat.individuals()
        before = set(known)
        for r, digest, rel in staged:
            row = sql.photo_owner(db, digest)
            if row is not None:
                if row[0] != r.individual:
                    raise DataError(f"{r.where}: {r.path} has the same bytes as {row[1]}, already in the "
                                    f"catalogue as {row[0]!r}, not {r.individual!r}; nothing added")
                dup += 1
                continue
            sql.add_photo(db, digest, rel, r.source or str(r.path.resolve()), r.individual, box_text(r.box),
                           {"date": r.date, "location": r.location, "encounter": r.encounter}, by)
            known.add(r.individual)
            added += 1
    return {"added": added, "duplicates": dup, "new_individuals": len(known - before),
            "skipped_new_whale": skipped}


def image_path(cat: Catalogue, rel: str) -> Path:
    """Absolute path of a catalogue image from its ``images.file``."""
    return Path(os.path.abspath(cat.root / rel))
