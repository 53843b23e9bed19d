"""Every statement the catalogue's commands run on its database, by what it means, with named columns.

:mod:`whale.catalogue.db` owns the connection, the schema and the transactions; this module owns the
rows: each function takes a ``sqlite3.Connection`` (``cat.conn`` to read, the ``db`` of
:meth:`Catalogue.transaction` to write) and says in its name what it reads or writes. No other module
of the catalogue holds SQL (``tests/test_architecture.py``), so a schema change is made here and in
``db.SCHEMA`` only. Writes never rely on the schema's column order (:func:`insert` names them).

Example:
    >>> with cat.transaction() as db:                                       # doctest: +SKIP
    ...     add_photo(db, digest, "images/ab/ab12.jpg", "/field/1.jpg", "w_1", None, {}, by="ana")
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from whale.catalogue.db import SIGHTING_COLUMNS, TABLES, now

Conn = sqlite3.Connection


def insert(db: Conn, table: str, **columns) -> int:
    """``INSERT INTO table (named columns) VALUES (...)``; returns the new row's ``rowid``."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; expected one of {', '.join(TABLES)}")
    names = ", ".join(columns)
    return db.execute(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})",
                      tuple(columns.values())).lastrowid


def _marks(values: Sequence) -> str:
    return ",".join("?" * len(values))


# --- individuals, photos, sightings -------------------------------------------------------------------

def has_individual(db: Conn, individual: str) -> bool:
    return db.execute("SELECT 1 FROM individuals WHERE id = ?", (individual,)).fetchone() is not None


def add_individual(db: Conn, individual: str, by: str) -> None:
    insert(db, "individuals", id=individual, created_at=now(), created_by=by)


def add_photo(db: Conn, digest: str, file: str, source: str, individual: str, box: str | None,
              sighting: dict[str, str | None], by: str, decision: int | None = None) -> None:
    """A new photo of ``individual`` (created when the catalogue lacks it) and its sighting: the one way
    ``add`` and ``accept`` bring a photo in. ``sighting``: values of :data:`SIGHTING_COLUMNS` (missing: NULL);
    ``decision``: the decision that added it (None: ``add``)."""
    if not has_individual(db, individual):
        add_individual(db, individual, by)
    insert(db, "images", hash=digest, file=file, source=source, individual=individual, box=box, added_at=now())
    insert(db, "sightings", image=digest, individual=individual, decision=decision,
           **{c: sighting.get(c) for c in SIGHTING_COLUMNS})


def photo_owner(db: Conn, digest: str) -> tuple[str, str] | None:
    """``(individual, source)`` of the photo with content hash ``digest``, or None."""
    row = db.execute("SELECT individual, source FROM images WHERE hash = ?", (digest,)).fetchone()
    return None if row is None else (row[0], row[1])


def move_photo(db: Conn, digest: str, individual: str) -> None:
    """The photo and its sightings now belong to ``individual`` (a redecision)."""
    db.execute("UPDATE images SET individual = ? WHERE hash = ?", (individual, digest))
    db.execute("UPDATE sightings SET individual = ? WHERE image = ?", (individual, digest))


def undo_decided_photo(db: Conn, digest: str) -> bool:
    """Remove what decisions added for photo ``digest``: their sightings, then the photo (and its features)
    when no sighting is left. A photo ``add`` brought in keeps its own sighting. Returns whether it went."""
    db.execute("DELETE FROM sightings WHERE image = ? AND decision IS NOT NULL", (digest,))
    if db.execute("SELECT 1 FROM sightings WHERE image = ?", (digest,)).fetchone():
        return False
    db.execute("DELETE FROM features WHERE hash = ?", (digest,))
    db.execute("DELETE FROM images WHERE hash = ?", (digest,))
    return True


def remove_photos(db: Conn, hashes: Iterable[str]) -> None:
    """Delete photos with their feature rows and sightings (``remove``; decisions stay)."""
    rows = [(h,) for h in hashes]
    for table, column in (("features", "hash"), ("sightings", "image"), ("images", "hash")):
        db.executemany(f"DELETE FROM {table} WHERE {column} = ?", rows)


def drop_empty_individuals(db: Conn, ids) -> list[str]:
    """Delete the individuals of ``ids`` that hold no photo any more (inside a transaction); returns them.

    A redecision or a ``remove`` that takes an individual's last photo takes the individual too: an id
    without photos could not be matched, and ``export`` could not carry it.
    """
    gone = sorted(i for i in set(ids) if not db.execute("SELECT 1 FROM images WHERE individual = ?", (i,)).fetchone())
    db.executemany("DELETE FROM individuals WHERE id = ?", [(i,) for i in gone])
    return gone


def photos(conn: Conn) -> list[tuple[str, str, str, str, str | None]]:
    """Every photo as ``(hash, individual, file, source, box)``, by hash."""
    return conn.execute("SELECT hash, individual, file, source, box FROM images ORDER BY hash").fetchall()


def photos_of(conn: Conn, individual: str) -> list[tuple[str, str, str]]:
    """``(hash, individual, source)`` of an individual's photos, by hash."""
    return [tuple(r) for r in conn.execute("SELECT hash, individual, source FROM images WHERE individual = ? "
                                           "ORDER BY hash", (individual,))]


def photos_by_hash_prefix(conn: Conn, prefix: str) -> list[tuple[str, str, str]]:
    """``(hash, individual, source)`` of the photos whose hash starts with ``prefix``."""
    return [tuple(r) for r in conn.execute("SELECT hash, individual, source FROM images WHERE hash LIKE ? "
                                           "ORDER BY hash", (prefix + "%",))]


def photos_by_path(conn: Conn, names: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(hash, individual, source)`` of the photos whose catalogue file or source path is in ``names``."""
    names = list(names)
    return [tuple(r) for r in conn.execute(
        f"SELECT hash, individual, source FROM images WHERE file IN ({_marks(names)}) OR source IN "
        f"({_marks(names)}) ORDER BY hash", (*names, *names))]


def removal_counts(conn: Conn, hashes: Sequence[str]) -> tuple[int, int]:
    """``(sightings, feature rows)`` of the photos ``hashes``."""
    marks = _marks(hashes)
    sightings = conn.execute(f"SELECT COUNT(*) FROM sightings WHERE image IN ({marks})", tuple(hashes)).fetchone()[0]
    features = conn.execute(f"SELECT COUNT(*) FROM features WHERE hash IN ({marks})", tuple(hashes)).fetchone()[0]
    return int(sightings), int(features)


def keeps_other_photos(conn: Conn, individual: str, hashes: Sequence[str]) -> bool:
    """Whether ``individual`` holds a photo outside ``hashes``."""
    return conn.execute(f"SELECT 1 FROM images WHERE individual = ? AND hash NOT IN ({_marks(hashes)}) LIMIT 1",
                        (individual, *hashes)).fetchone() is not None


# --- features -----------------------------------------------------------------------------------------

def record_features(db: Conn, fingerprint: str, file: str | None, hashes: Sequence[str],
                    meta: dict[str, str]) -> None:
    """Feature rows ``hashes[i]`` -> row ``i`` of ``file`` under ``fingerprint`` (other fingerprints' rows
    dropped), and ``meta``'s keys set."""
    db.execute("DELETE FROM features WHERE fingerprint != ?", (fingerprint,))
    db.executemany("INSERT INTO features (hash, fingerprint, file, row) VALUES (?, ?, ?, ?)",
                   [(h, fingerprint, file, i) for i, h in enumerate(hashes)])
    db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(meta.items()))


def photos_without_features(conn: Conn, fingerprint: str) -> list[tuple[str, str, str | None]]:
    """``(hash, file, box)`` of the photos with no feature row under ``fingerprint``, by hash."""
    return conn.execute("SELECT hash, file, box FROM images WHERE hash NOT IN "
                        "(SELECT hash FROM features WHERE fingerprint = ?) ORDER BY hash", (fingerprint,)).fetchall()


def feature_counts(conn: Conn, fingerprint: str) -> tuple[int, int]:
    """``(rows under fingerprint, rows under any other)``."""
    kept = conn.execute("SELECT COUNT(*) FROM features WHERE fingerprint = ?", (fingerprint,)).fetchone()[0]
    stale = conn.execute("SELECT COUNT(*) FROM features WHERE fingerprint != ?", (fingerprint,)).fetchone()[0]
    return int(kept), int(stale)


def gallery_rows(conn: Conn, fingerprint: str) -> list[tuple[str, str, str, str | None, int | None]]:
    """Every photo as ``(hash, individual, file, feature file or None, row or None)`` under ``fingerprint``."""
    return conn.execute("SELECT i.hash, i.individual, i.file, f.file, f.row FROM images i LEFT JOIN features f "
                        "ON f.hash = i.hash AND f.fingerprint = ? ORDER BY i.hash", (fingerprint,)).fetchall()


def feature_rows(conn: Conn) -> list[tuple[str, str, int, str]]:
    """Every feature row as ``(hash, file, row, individual)``, by file and row."""
    return conn.execute("SELECT f.hash, f.file, f.row, i.individual FROM features f JOIN images i "
                        "ON i.hash = f.hash ORDER BY f.file, f.row").fetchall()


# --- batches, proposals, decisions --------------------------------------------------------------------

def batch_names(conn: Conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM batches ORDER BY name")]


def batch_files(conn: Conn) -> list[tuple[str, str]]:
    """``(batch, its proposals file)`` of every batch, by name."""
    return conn.execute("SELECT name, proposals FROM batches ORDER BY name").fetchall()


def batch_proposals_file(conn: Conn, batch: str) -> str | None:
    """The proposals file (relative to the catalogue) of ``batch``, or None when there is no such batch."""
    row = conn.execute("SELECT proposals FROM batches WHERE name = ?", (batch,)).fetchone()
    return None if row is None else row[0]


def batch_row(conn: Conn, batch: str) -> tuple[str, str, float, str] | None:
    """``(run, fingerprint, threshold, matched_at)`` of ``batch``, or None when there is no such batch."""
    row = conn.execute("SELECT run, fingerprint, threshold, matched_at FROM batches WHERE name = ?",
                       (batch,)).fetchone()
    return None if row is None else (row[0], row[1], float(row[2]), row[3])


def batch_matched_at(conn: Conn, batch: str) -> str | None:
    row = conn.execute("SELECT matched_at FROM batches WHERE name = ?", (batch,)).fetchone()
    return None if row is None else row[0]


def record_batch(db: Conn, batch: str, folder: str, run: str, fingerprint: str, threshold: float,
                 proposals_file: str, rows: Iterable[tuple]) -> None:
    """The batch's row (replacing an earlier one) and its proposal rows ``(photo, photo_hash, rank,
    individual, score, image, possibly_new, group)``, its earlier proposal rows dropped."""
    db.execute("DELETE FROM proposals WHERE batch = ?", (batch,))
    db.execute("INSERT OR REPLACE INTO batches (name, folder, run, fingerprint, threshold, proposals, matched_at) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)", (batch, folder, run, fingerprint, threshold, proposals_file, now()))
    db.executemany("INSERT INTO proposals (batch, photo, photo_hash, rank, individual, score, image, possibly_new, "
                   "grp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(batch, *r) for r in rows])


def decision_count(conn: Conn, batch: str) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM decisions WHERE batch = ?", (batch,)).fetchone()[0])


def decided_photos(conn: Conn, batch: str) -> set[str]:
    """The photos (as the decisions name them) with a decision in ``batch``."""
    return {r[0] for r in conn.execute("SELECT DISTINCT photo FROM decisions WHERE batch = ?", (batch,))}


def last_decision(conn: Conn, digest: str) -> str | None:
    """The latest ``decided`` of a photo (by content hash), or None."""
    row = conn.execute("SELECT decided FROM decisions WHERE photo_hash = ? ORDER BY id DESC LIMIT 1",
                       (digest,)).fetchone()
    return None if row is None else row[0]


def last_decisions(conn: Conn, digests: Sequence[str]) -> dict[str, tuple[int, str, str, str, str]]:
    """The latest decision of each photo (by content hash) that has one: ``{hash: (id, decision, decided,
    decided_by, decided_at)}``."""
    digests = list(dict.fromkeys(digests))
    out = {}
    for i in range(0, len(digests), 500):  # SQLite's limit on bound variables
        part = digests[i:i + 500]
        for row in conn.execute(f"SELECT photo_hash, id, decision, decided, decided_by, decided_at FROM decisions "
                                f"WHERE id IN (SELECT MAX(id) FROM decisions WHERE photo_hash IN ({_marks(part)}) "
                                f"GROUP BY photo_hash)", tuple(part)):
            out[row[0]] = tuple(row[1:])
    return out


def created_by_batch(conn: Conn, batch: str, decided: str) -> bool:
    """Whether a decision of ``batch`` recorded ``decided`` (``new:<id>``: the batch created that individual)."""
    return conn.execute("SELECT 1 FROM decisions WHERE batch = ? AND decided = ? LIMIT 1",
                        (batch, decided)).fetchone() is not None


def batch_new_individuals(conn: Conn, batch: str) -> list[str]:
    """The individuals that ``batch``'s ``new`` decisions created and the catalogue still holds, by name."""
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT substr(decided, 5) AS id FROM decisions WHERE batch = ? AND decision = 'new' "
        "AND substr(decided, 5) IN (SELECT id FROM individuals) ORDER BY id", (batch,))]


def record_decision(db: Conn, batch: str, photo: str, digest: str, decision: str, decided: str, by: str) -> int:
    """Append a decision (never replaced: the review history); returns its id."""
    return insert(db, "decisions", batch=batch, photo=photo, photo_hash=digest, decision=decision,
                  decided=decided, decided_by=by, decided_at=now())


# --- export -------------------------------------------------------------------------------------------

EXPORT_QUERIES = {
    "sightings.csv": "SELECT i.file, s.individual, s.date, s.location, s.encounter, i.source, i.hash "
                     "FROM sightings s JOIN images i ON i.hash = s.image ORDER BY s.individual, i.hash",
    "boxes.csv": "SELECT file, box FROM images WHERE box IS NOT NULL ORDER BY file",
    "individuals.csv": "SELECT d.id, COUNT(i.hash), d.created_at, d.created_by FROM individuals d "
                       "LEFT JOIN images i ON i.individual = d.id GROUP BY d.id ORDER BY d.id",
    "decisions.csv": "SELECT batch, photo, photo_hash, decision, decided, decided_by, decided_at FROM decisions "
                     "ORDER BY id",
}
"""The rows of each CSV ``export`` writes (their columns: :data:`whale.catalogue.export.CSVS`)."""


def export_rows(conn: Conn) -> tuple[list[str], dict[str, list[tuple]]]:
    """``(photo files, {csv name: rows})`` read in one transaction: one state of the catalogue."""
    conn.execute("BEGIN")
    try:
        files = [r[0] for r in conn.execute("SELECT file FROM images ORDER BY file")]
        return files, {name: conn.execute(sql).fetchall() for name, sql in EXPORT_QUERIES.items()}
    finally:
        conn.execute("COMMIT")
