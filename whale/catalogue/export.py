"""``export``: the catalogue as a folder of CSV files and photos that ``add`` reads back as it is.

``OUT/``::

    photos/ab/ab12...ef.jpg   every catalogue photo (a copy), named as in the catalogue
    sightings.csv             image,individual,date,location,encounter,source,hash: one row per photo,
                              ``image`` relative to OUT (the labels CSV of ``add``)
    boxes.csv                 Image,x0,y0,x1,y1 of the photos that have a box (``add --boxes``)
    individuals.csv           individual,images,created_at,created_by
    decisions.csv             batch,photo,hash,decision,decided,decided_by,decided_at: the review history

So ``whale catalogue add NEW --photos OUT --labels OUT/sightings.csv --boxes OUT/boxes.csv`` rebuilds the
catalogue's individuals, photos, boxes and sightings (their sources included), and exporting that
catalogue writes the same ``photos/``, ``sightings.csv`` and ``boxes.csv`` again, byte for byte; what
``add`` cannot carry is the history: who created each individual and when, and the decisions.

Every file is written atomically; the rows are read in one read transaction (the CSVs describe one
state of the catalogue). An export takes no lock (a reader): a photo that a ``remove`` running
meanwhile took away ends it with an error naming the photo (run it again). An
export that fails (a full disk) leaves no folder it created; into an earlier export's folder it
replaces that export's files and deletes its photos that the catalogue no longer holds.
"""
from __future__ import annotations

import csv
import shutil
from pathlib import Path

from whale.catalogue import sql
from whale.catalogue.db import Catalogue
from whale.core.errors import DataError
from whale.core.files import atomic_write, check_output

PHOTOS = "photos"
CSVS = {
    "sightings.csv": ("image", "individual", "date", "location", "encounter", "source", "hash"),
    "boxes.csv": ("Image", "x0", "y0", "x1", "y1"),
    "individuals.csv": ("individual", "images", "created_at", "created_by"),
    "decisions.csv": ("batch", "photo", "hash", "decision", "decided", "decided_by", "decided_at"),
}
"""Each CSV's header (its rows: :data:`whale.catalogue.sql.EXPORT_QUERIES`)."""


def exported_name(rel: str) -> str:
    """Where a catalogue photo (``images.file``, ``images/ab/ab12...jpg``) sits in an export: ``photos/ab/...``."""
    return f"{PHOTOS}/{Path(rel).relative_to('images').as_posix()}"


def _rows(name: str, rows: list[tuple]) -> list[tuple]:
    """The CSV rows of ``name`` from its query's rows: photo files as exported, boxes split."""
    if name == "sightings.csv":
        return [(exported_name(r[0]), *r[1:]) for r in rows]
    if name == "boxes.csv":
        return [(exported_name(f), *box.split(",")) for f, box in rows]
    return rows


def export(cat: Catalogue, out_dir) -> list[Path]:
    """Write the catalogue into ``out_dir`` (module docstring); returns the CSV files written.

    Raises:
        OutputError: ``out_dir`` cannot be written (refused before anything is written, or a full disk:
            then a folder this call created is removed again).
        DataError: ``out_dir`` holds files and is not an earlier export (no ``sightings.csv``), or a
            catalogue photo is missing (``whale catalogue check`` names it).
    """
    out_dir = check_output(out_dir, "--out", folder=True)
    fresh = not out_dir.exists()
    if not fresh and any(out_dir.iterdir()) and not (out_dir / "sightings.csv").is_file():
        raise DataError(f"--out {out_dir}: holds files and is not an earlier export (no sightings.csv): "
                        "name an empty or new folder")
    photos, found = sql.export_rows(cat.conn)  # one read transaction: one state of the catalogue
    tables = {name: _rows(name, found[name]) for name in CSVS}
    try:
        return _write(cat, out_dir, photos, tables)
    except BaseException:
        if fresh:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _write(cat: Catalogue, out_dir: Path, photos: list[str], tables: dict[str, list[tuple]]) -> list[Path]:
    keep = set()
    for rel in photos:
        src, dest = cat.root / rel, out_dir / exported_name(rel)
        if not src.is_file():
            raise DataError(f"{src}: a catalogue photo is missing (removed while exporting: run the export "
                            f"again; else `whale catalogue check {cat.root}` lists every such photo)")
        if not dest.is_file() or dest.stat().st_size != src.stat().st_size:
            atomic_write(dest, lambda tmp, src=src: shutil.copyfile(src, tmp))
        keep.add(dest)
    for old in sorted((out_dir / PHOTOS).rglob("*")) if (out_dir / PHOTOS).is_dir() else ():
        if old.is_file() and old not in keep:  # an earlier export's photo the catalogue no longer holds
            old.unlink()
    written = []
    for name, header in CSVS.items():
        def write(tmp, rows=tables[name], header=header):
            with open(tmp, "w", newline="", encoding="utf-8") as fh:
                w = csv.writer(fh)
                w.writerow(header)
                w.writerows(rows)

        written.append(atomic_write(out_dir / name, write))
    return written
