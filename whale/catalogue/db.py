"""The catalogue's database: one SQLite file, its schema, and the one way to write to it.

The statements the commands run are named in :mod:`whale.catalogue.sql`; this module holds the connection,
the schema, the write lock and the transactions.

A catalogue is a folder::

    CATALOGUE/catalogue.sqlite     individuals, images, sightings, features, batches, proposals, decisions
    CATALOGUE/images/ab/abcdef...jpg  the photos, content-addressed (sha256 of their bytes)
    CATALOGUE/features/<fingerprint>/*.npy   branch features of a run, one file per `index`
    CATALOGUE/batches/<batch>/proposals-<sha>.json  what `match` proposed (:mod:`whale.catalogue.proposals`)
    CATALOGUE/catalogue.lock       held by the command writing (:meth:`Catalogue.writing`)
    CATALOGUE/index/faiss-hnsw-<digest>.index  `match --method faiss`'s index, reused while the embeddings hold

Every write goes through :meth:`Catalogue.transaction` (``BEGIN IMMEDIATE`` ... ``COMMIT``, rollback
journal with ``synchronous=FULL``): a command killed at any moment leaves the database as it was
before the transaction or as it is after it. Files (photos, feature arrays) are written atomically
and flushed to disk *before* the transaction that references them, so a committed row never names
a missing or half-written file; a kill between the two leaves an unreferenced file, which the next
command reuses or removes. Decisions are never deleted: ``accept`` only appends.

Commands that write hold :meth:`Catalogue.writing` around their whole read-modify-write (an
exclusive ``flock`` on ``CATALOGUE/catalogue.lock``, released by the system when a process dies),
so two of them on one catalogue run one after the other instead of computing from the same state.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from whale.core.errors import DataError
from whale.core.files import file_hash, partial_writes  # noqa: F401  (file_hash, the photo identity: imported from here too)

SCHEMA_VERSION = 3
"""2: ``sightings.decision``, the decision that added a sighting (NULL: ``add``); 3: ``undo`` decisions (the
review server's U: the photo undecided again). Catalogues of earlier versions are migrated when opened
(:func:`_migrate`)."""
DB_NAME = "catalogue.sqlite"
LOCK_NAME = "catalogue.lock"
WRITTEN_FOLDERS = ("images", "features", "batches")
"""The folders whose files the catalogue's commands write (atomically: a kill may leave partial writes)."""

DECISIONS_TABLE = """
CREATE TABLE {name} (
    id INTEGER PRIMARY KEY, batch TEXT NOT NULL, photo TEXT NOT NULL, photo_hash TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('match', 'new', 'skip', 'undo')),
    decided TEXT NOT NULL,               -- the individual, 'new:<id>', 'skip' or 'undo' (undecided again)
    decided_by TEXT NOT NULL, decided_at TEXT NOT NULL);
"""
"""The decisions table (``{name}``: a migration builds it under another name first)."""

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
    date TEXT, location TEXT, encounter TEXT,
    decision INTEGER REFERENCES decisions(id));  -- the decision that added it; NULL: `add`
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
""" + DECISIONS_TABLE.format(name="decisions") + """
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
        ...     sql.add_individual(db, "w_1", user())   # whale.catalogue.sql: the statements
    """

    def __init__(self, root: str | os.PathLike, conn: sqlite3.Connection):
        self.root, self.conn = Path(root), conn
        self._lock_fd, self._lock_depth = None, 0
        self._inode = os.stat(self.path).st_ino  # the database file this object writes to

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
        fd = acquire_lock(root)  # two commands creating one catalogue at once: the second opens the first's
        try:
            if (root / DB_NAME).exists():
                if not exist_ok:
                    raise DataError(f"{root / DB_NAME}: a catalogue exists already")
            else:
                tmp = root / f".{DB_NAME}.creating"
                tmp.unlink(missing_ok=True)  # a killed create's (no other can be creating: the lock is held)
                conn = _connect(tmp)
                conn.executescript("BEGIN;" + SCHEMA + "COMMIT;")
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                conn.execute("INSERT INTO meta (key, value) VALUES ('created_at', ?)", (now(),))
                conn.close()
                os.replace(tmp, root / DB_NAME)  # a kill before this leaves no catalogue, never half a schema
                fsync_dir(root)
        finally:
            os.close(fd)
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
        if row is not None and row[0] in ("1", "2"):
            try:
                _migrate(conn)
            except sqlite3.Error as exc:
                conn.close()
                raise DataError(f"{path}: a version {row[0]} catalogue, and it cannot be brought to version "
                                f"{SCHEMA_VERSION} here ({exc})") from None
            row = (str(SCHEMA_VERSION),)
        if row is None or int(row[0]) != SCHEMA_VERSION:
            conn.close()
            raise DataError(f"{path}: schema version {row and row[0]}, this code reads version {SCHEMA_VERSION}")
        return cls(root, conn)

    def close(self) -> None:
        while self._lock_depth:
            self._unlock()
        self.conn.close()

    @contextlib.contextmanager
    def writing(self) -> Iterator["Catalogue"]:
        """Hold the catalogue's write lock for a whole command (re-entrant; released on exit or death).

        Waits while another process holds it (saying so on stderr). On taking it, the partial writes a
        killed command left are deleted (no other writer can be writing them now); on leaving, photo and
        feature files no row names (a refused or killed command's copies) are deleted too.
        """
        if self._lock_depth == 0:
            self._lock()
        self._lock_depth += 1
        try:
            yield self
        finally:
            if self._lock_depth == 1:
                try:
                    self.remove_unreferenced()
                finally:
                    self._unlock()
            else:
                self._lock_depth -= 1

    def _lock(self) -> None:
        self._lock_fd, self._lock_depth = acquire_lock(self.root), 0
        try:
            same = os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            same = False
        if not same:  # removed (a failed add's empty catalogue) or replaced while this command waited
            self._unlock()
            raise DataError(f"{self.path}: the catalogue was removed or replaced while this command waited for "
                            "it; nothing written: run the command again")
        for folder in WRITTEN_FOLDERS:  # images/ab/, features/<fingerprint>/, batches/<batch>/
            for sub in (self.root / folder).glob("*/") if (self.root / folder).is_dir() else ():
                for leftover in partial_writes(sub, "*"):
                    leftover.unlink(missing_ok=True)

    def _unlock(self) -> None:
        self._lock_depth = 0
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def remove_unreferenced(self) -> int:
        """Delete photo, feature and proposals files that no row names (only under :meth:`writing`): a
        refused or killed command's copies, an old run's features, a re-matched batch's old proposals.
        Returns how many."""
        gone = 0
        for folder, pattern, sql in (("images", "*/*", "SELECT file FROM images"),
                                     ("features", "*/*", "SELECT DISTINCT file FROM features"),
                                     ("batches", "*/proposals*.json", "SELECT proposals FROM batches")):
            if not (self.root / folder).is_dir():
                continue
            used = {r[0] for r in self.conn.execute(sql)}
            for path in sorted((self.root / folder).glob(pattern)):
                if path.is_file() and not path.name.startswith(".") and \
                        path.relative_to(self.root).as_posix() not in used:
                    path.unlink(missing_ok=True)
                    gone += 1
            if folder != "batches":
                for sub in (self.root / folder).iterdir():
                    if sub.is_dir() and not any(sub.iterdir()):
                        sub.rmdir()
        return gone

    def __enter__(self) -> "Catalogue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; any exception rolls everything back."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # "database is locked": a reader held it past the timeout
            raise DataError(f"{self.path}: busy ({exc}) for {BUSY_TIMEOUT_S:.0f} s; nothing written: "
                            "run the command again") from None
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


def acquire_lock(root: Path) -> int:
    """Take the exclusive lock of catalogue folder ``root`` (waiting, and saying so, while another process
    holds it); returns the descriptor whose closing releases it."""
    try:
        fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    except FileNotFoundError:
        raise DataError(f"{root}: the catalogue folder is gone (removed while this command ran)") from None
    try:
        import fcntl
    except ImportError:  # Windows: no flock; BEGIN IMMEDIATE still keeps every transaction whole
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"waiting for another command writing {root} ...", file=sys.stderr, flush=True)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


BUSY_TIMEOUT_S = 30.0
"""How long a transaction waits for another process's lock on the database before giving up."""


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a catalogue of an earlier schema version to :data:`SCHEMA_VERSION`, in one transaction.

    1 -> 2: ``sightings.decision``. A version-1 sighting was added by a decision when its photo's
    ``source`` is the photo that decision names (``accept`` records it so; ``add`` records the file added).
    2 -> 3: ``decisions.decision`` may be ``undo``; SQLite cannot change a CHECK, so the table is rebuilt
    (rows and ids kept; foreign keys off meanwhile, as SQLite's documented procedure does it).
    """
    conn.execute("PRAGMA foreign_keys=OFF")  # no effect inside a transaction: set before BEGIN
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
        # else another process migrated it while this one waited for the lock
        if current == 1:
            conn.execute("ALTER TABLE sightings ADD COLUMN decision INTEGER REFERENCES decisions(id)")
            conn.execute("UPDATE sightings SET decision = (SELECT MIN(d.id) FROM decisions d JOIN images i "
                         "ON i.hash = d.photo_hash WHERE d.photo_hash = sightings.image AND d.photo = i.source "
                         "AND d.decision != 'skip')")
        if current <= 2:
            columns = "id, batch, photo, photo_hash, decision, decided, decided_by, decided_at"
            conn.execute(DECISIONS_TABLE.format(name="decisions_v3"))
            conn.execute(f"INSERT INTO decisions_v3 ({columns}) SELECT {columns} FROM decisions")
            conn.execute("DROP TABLE decisions")
            conn.execute("ALTER TABLE decisions_v3 RENAME TO decisions")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
                raise sqlite3.IntegrityError("a foreign key broken by the migration")
    except BaseException:
        conn.execute("ROLLBACK")
        conn.execute("PRAGMA foreign_keys=ON")
        raise
    conn.execute("COMMIT")
    conn.execute("PRAGMA foreign_keys=ON")


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; Catalogue.transaction opens them explicitly.
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_S)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn
