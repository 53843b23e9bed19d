"""The catalogue's database: one SQLite file, its schema, and the one way to write to it.

A catalogue is a folder::

    CATALOGUE/catalogue.sqlite     individuals, images, sightings, features, batches, proposals, decisions
    CATALOGUE/images/ab/abcdef...jpg  the photos, content-addressed (sha256 of their bytes)
    CATALOGUE/features/<fingerprint>/*.npy   branch features of a run, one file per `index`
    CATALOGUE/batches/<batch>/proposals.json  what `match` proposed (:mod:`whale.catalogue.proposals`)
    CATALOGUE/index/faiss-hnsw-<digest>.index  `match --method faiss`'s index, reused while the embeddings hold

Every write goes through :meth:`Catalogue.transaction` (``BEGIN IMMEDIATE`` ... ``COMMIT``, rollback
journal with ``synchronous=FULL``): a command killed at any moment leaves the database as it was
before the transaction or as it is after it. Files (photos, feature arrays) are written atomically
and flushed to disk *before* the transaction that references them, so a committed row never names
a missing or half-written file; a kill between the two leaves an unreferenced file, which the next
command of the same kind reuses or removes. Decisions are never deleted: ``accept`` only appends.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from whale.errors import DataError
from whale.files import file_hash  # noqa: F401  (the photo identity; callers import it from here too)

SCHEMA_VERSION = 1
DB_NAME = "catalogue.sqlite"

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE individuals (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, created_by TEXT NOT NULL);
CREATE TABLE images (
    hash TEXT PRIMARY KEY,               -- sha256 of the file's bytes
    file TEXT NOT NULL,                  -- path inside the catalogue folder
    source TEXT NOT NULL,                -- where it was added from
    individual TEXT NOT NULL REFERENCES individuals(id),
    box TEXT,                            -- 'x0,y0,x1,y1' or NULL (whole image)
    added_at TEXT NOT NULL);
CREATE TABLE sightings (
    id INTEGER PRIMARY KEY, image TEXT NOT NULL REFERENCES images(hash),
    individual TEXT NOT NULL REFERENCES individuals(id),
    date TEXT, location TEXT, encounter TEXT);
CREATE TABLE features (
    hash TEXT NOT NULL REFERENCES images(hash), fingerprint TEXT NOT NULL,
    file TEXT NOT NULL, row INTEGER NOT NULL, PRIMARY KEY (hash, fingerprint));
CREATE TABLE batches (
    name TEXT PRIMARY KEY, folder TEXT NOT NULL, run TEXT NOT NULL, fingerprint TEXT NOT NULL,
    threshold REAL NOT NULL, proposals TEXT NOT NULL, matched_at TEXT NOT NULL);
CREATE TABLE proposals (
    batch TEXT NOT NULL REFERENCES batches(name), photo TEXT NOT NULL, photo_hash TEXT NOT NULL,
    rank INTEGER NOT NULL, individual TEXT NOT NULL, score REAL NOT NULL, image TEXT NOT NULL,
    possibly_new INTEGER NOT NULL, grp INTEGER, PRIMARY KEY (batch, photo, rank));
CREATE TABLE decisions (
    id INTEGER PRIMARY KEY, batch TEXT NOT NULL, photo TEXT NOT NULL, photo_hash TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('match', 'new', 'skip')),
    decided TEXT NOT NULL,               -- the individual, 'new:<id>' or 'skip'
    decided_by TEXT NOT NULL, decided_at TEXT NOT NULL);
CREATE INDEX images_individual ON images(individual);
CREATE INDEX sightings_image ON sightings(image);
"""

SIGHTING_COLUMNS = ("date", "location", "encounter")
"""A sighting's optional columns (free text): in labels CSVs (``add``) and decisions CSVs (``accept``)."""
TABLES = ("meta", "individuals", "images", "sightings", "features", "batches", "proposals", "decisions")


def now() -> str:
    """The current UTC time, ISO 8601 to the second (what every ``*_at`` column holds)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def user() -> str:
    """Who runs the command (``decided_by`` / ``created_by`` when not given): $USER, else 'unknown'."""
    return os.environ.get("USER") or os.environ.get("USERNAME") or "unknown"


def fsync_dir(folder: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename into it) to disk, where the OS allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Catalogue:
    """An open catalogue folder: its SQLite connection and paths.

    Example:
        >>> cat = Catalogue.create("whales/")          # doctest: +SKIP
        >>> with cat.transaction() as db:               # doctest: +SKIP
        ...     db.execute("INSERT INTO individuals VALUES (?, ?, ?)", ("w_1", now(), user()))
    """

    def __init__(self, root: str | os.PathLike, conn: sqlite3.Connection):
        self.root, self.conn = Path(root), conn

    @property
    def path(self) -> Path:
        return self.root / DB_NAME

    @classmethod
    def create(cls, root: str | os.PathLike, exist_ok: bool = False) -> "Catalogue":
        """Create the catalogue folder and its database (schema version :data:`SCHEMA_VERSION`)."""
        root = Path(root)
        if (root / DB_NAME).exists():
            if exist_ok:
                return cls.open(root)
            raise DataError(f"{root / DB_NAME}: a catalogue exists already")
        if root.exists() and not root.is_dir():
            raise DataError(f"{root}: expected a folder for the catalogue, found a file")
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".{DB_NAME}.creating"
        tmp.unlink(missing_ok=True)
        conn = _connect(tmp)
        conn.executescript("BEGIN;" + SCHEMA + "COMMIT;")
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("INSERT INTO meta VALUES ('created_at', ?)", (now(),))
        conn.close()
        os.replace(tmp, root / DB_NAME)  # a kill before this leaves no catalogue, never half a schema
        fsync_dir(root)
        return cls.open(root)

    @classmethod
    def open(cls, root: str | os.PathLike) -> "Catalogue":
        """Open an existing catalogue; refuses a missing one or another schema version."""
        root = Path(root)
        path = root / DB_NAME
        if not path.is_file():
            raise DataError(f"{root}: no catalogue here (expected {DB_NAME}; create one with "
                            f"`whale catalogue init {root}`)")
        conn = _connect(path)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise DataError(f"{path}: not a catalogue database ({exc})") from None
        if row is None or int(row[0]) != SCHEMA_VERSION:
            conn.close()
            raise DataError(f"{path}: schema version {row and row[0]}, this code reads version {SCHEMA_VERSION}")
        return cls(root, conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Catalogue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; any exception rolls everything back."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        """Rows of a read-only query."""
        return self.conn.execute(sql, args).fetchall()

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return {t: self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}

    def individuals(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT id FROM individuals")}


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; Catalogue.transaction opens them explicitly.
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn
