"""``accept`` and ``export``: a reviewer's decisions recorded, and the catalogue written out as CSV.

The decisions file is a CSV ``photo,decision,individual`` (what the review page exports):
``match`` (``individual`` = an individual of the catalogue, or one a ``new`` row above creates),
``new`` (``individual`` = the id to create; several photos may name the same new id), ``skip``
(``individual`` empty). ``photo`` is a photo of the batch as ``proposals.json`` names it (its
path, or just its file name when that is unique in the batch).

``accept`` checks every row first, copies the matched photos into the catalogue (durable), then
records everything in one transaction: the decisions (appended, never deleted), new individuals,
images and sightings. A photo already decided keeps its decision; a row deciding it again the same
way is skipped, a row deciding it otherwise is refused (naming the row) unless ``redecide``.
"""
from __future__ import annotations

import csv
from pathlib import Path

from whale.catalogue.db import Catalogue, now, user
from whale.catalogue.ingest import flush, store_photo
from whale.catalogue.proposals import read_proposals
from whale.errors import DataError
from whale.files import atomic_write

DECISIONS = ("match", "new", "skip")
DECISION_COLUMNS = ("photo", "decision", "individual")


def read_decisions(path) -> list[tuple[str, str, str, str]]:
    """``[(where, photo, decision, individual)]`` of a decisions CSV, each row's form checked."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            rows = list(reader)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not set(DECISION_COLUMNS) <= set(header):
        raise DataError(f"{path}: expected columns {','.join(DECISION_COLUMNS)}; received {','.join(header) or 'none'}")
    out = []
    for i, row in enumerate(rows):
        where = f"{path}, line {i + 2}"
        photo, decision, ind = ((row.get(c) or "").strip() for c in DECISION_COLUMNS)
        if decision not in DECISIONS:
            raise DataError(f"{where}: decision {decision!r}; expected one of {', '.join(DECISIONS)}")
        if not photo:
            raise DataError(f"{where}: empty photo")
        if decision != "skip" and not ind:
            raise DataError(f"{where}: decision {decision!r} needs an individual")
        if ind.startswith("new:"):
            raise DataError(f"{where}: individual {ind!r}: the prefix 'new:' is reserved")
        out.append((where, photo, decision, ind))
    return out


def _photo_lookup(proposals) -> dict[str, tuple[str, str]]:
    """``{name or path: (absolute path, hash)}``; a file name shared by two photos maps to nothing."""
    out, names = {}, {}
    for p in proposals.photos:
        out[p.photo] = (p.photo, p.hash)
        names.setdefault(Path(p.photo).name, []).append((p.photo, p.hash))
    out.update({n: v[0] for n, v in names.items() if len(v) == 1 and n not in out})
    return out


def _last_decision(cat: Catalogue, digest: str) -> str | None:
    """The latest ``decided`` of a photo (by content hash), or None."""
    row = cat.query("SELECT decided FROM decisions WHERE photo_hash = ? ORDER BY id DESC LIMIT 1", (digest,))
    return row[0][0] if row else None


def accept(cat: Catalogue, batch: str, decisions_csv, by: str | None = None,
           redecide: bool = False) -> dict[str, int]:
    """Record the decisions of ``decisions_csv`` for ``batch``; returns counts per outcome.

    Raises:
        DataError: an unknown batch or photo, ``match`` to an unknown individual, ``new`` with an
            id the catalogue already has, a photo decided otherwise before (without ``redecide``),
            or a photo whose bytes the catalogue holds under another individual. Nothing is
            recorded then.
    """
    row = cat.query("SELECT proposals FROM batches WHERE name = ?", (batch,))
    if not row:
        known = ", ".join(r[0] for r in cat.query("SELECT name FROM batches ORDER BY name")) or "none"
        raise DataError(f"{cat.root}: no batch {batch!r} (batches: {known}); run `whale catalogue match` first")
    lookup = _photo_lookup(read_proposals(cat.root / row[0][0]))
    by = by or user()
    existing = cat.individuals()
    created: dict[str, str] = {}
    plan = []
    decided_as = {"match": lambda i: i, "new": lambda i: f"new:{i}", "skip": lambda i: "skip"}
    for where, photo, decision, ind in read_decisions(decisions_csv):
        if photo not in lookup:
            raise DataError(f"{where}: photo {photo!r} is not in batch {batch!r}")
        path, digest = lookup[photo]
        if _last_decision(cat, digest) == decided_as[decision](ind):
            pass  # recorded already: accepting the same file twice changes nothing
        elif decision == "new":
            if ind in existing:
                raise DataError(f"{where}: new individual {ind!r} exists already in the catalogue; use 'match'")
            created.setdefault(ind, where)
        elif decision == "match" and ind not in existing and ind not in created:
            raise DataError(f"{where}: individual {ind!r} is not in the catalogue (nor created above with 'new')")
        plan.append((where, Path(path), digest, decision, ind))
    stored = {}
    for where, path, digest, decision, ind in plan:
        if decision != "skip":
            if not path.is_file():
                raise DataError(f"{where}: {path}: the photo is gone (it must stay until accepted)")
            stored[digest] = store_photo(cat, path, digest)
    flush()
    counts = dict.fromkeys(("matched", "new", "skipped", "unchanged"), 0)
    with cat.transaction() as db:
        for where, path, digest, decision, ind in plan:
            decided = decided_as[decision](ind)
            last = _last_decision(cat, digest)
            if last == decided:
                counts["unchanged"] += 1
                continue
            if last is not None and not redecide:
                raise DataError(f"{where}: {path.name} was decided {last!r} before; --redecide records "
                                f"{decided!r} after it")
            db.execute("INSERT INTO decisions (batch, photo, photo_hash, decision, decided, decided_by, decided_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", (batch, str(path), digest, decision, decided, by, now()))
            if decision == "skip":
                counts["skipped"] += 1
                continue
            if decision == "new" and ind not in cat.individuals():
                db.execute("INSERT INTO individuals VALUES (?, ?, ?)", (ind, now(), by))
            held = db.execute("SELECT individual FROM images WHERE hash = ?", (digest,)).fetchone()
            if held is not None and held[0] != ind:
                if not redecide:
                    raise DataError(f"{where}: {path.name} has the bytes of a catalogue photo of {held[0]!r}, "
                                    f"not {ind!r}; nothing recorded")
                db.execute("UPDATE images SET individual = ? WHERE hash = ?", (ind, digest))
                db.execute("UPDATE sightings SET individual = ? WHERE image = ?", (ind, digest))
            elif held is None:
                db.execute("INSERT INTO images VALUES (?, ?, ?, ?, NULL, ?)",
                           (digest, stored[digest], str(path), ind, now()))
                db.execute("INSERT INTO sightings (image, individual) VALUES (?, ?)", (digest, ind))
            counts["new" if decision == "new" else "matched"] += 1
    return counts


EXPORTS = {
    "sightings.csv": ("SELECT s.id, s.individual, i.file, i.source, i.hash, s.date, s.location, s.encounter "
                      "FROM sightings s JOIN images i ON i.hash = s.image ORDER BY s.individual, s.id",
                      ("sighting", "individual", "file", "source", "hash", "date", "location", "encounter")),
    "individuals.csv": ("SELECT d.id, d.created_at, d.created_by, COUNT(i.hash) FROM individuals d "
                        "LEFT JOIN images i ON i.individual = d.id GROUP BY d.id ORDER BY d.id",
                        ("individual", "created_at", "created_by", "images")),
    "decisions.csv": ("SELECT batch, photo, photo_hash, decision, decided, decided_by, decided_at FROM decisions "
                      "ORDER BY id", ("batch", "photo", "hash", "decision", "decided", "decided_by", "decided_at")),
}


def export(cat: Catalogue, out_dir) -> list[Path]:
    """Write ``sightings.csv``, ``individuals.csv`` and ``decisions.csv`` into ``out_dir`` (atomically)."""
    out_dir = Path(out_dir)
    written = []
    for name, (sql, header) in EXPORTS.items():
        rows = cat.query(sql)

        def write(tmp, rows=rows, header=header):
            with open(tmp, "w", newline="", encoding="utf-8") as fh:
                w = csv.writer(fh)
                w.writerow(header)
                w.writerows(rows)

        written.append(atomic_write(out_dir / name, write))
    return written
