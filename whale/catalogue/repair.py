"""``check`` and ``remove``: a catalogue's files verified against what its rows say, and photos taken out.

:func:`check` reads every stored photo (its bytes against the sha256 it is named and recorded by, and
that it decodes) and every feature row (its file's bytes against the sha256 the file is named by, the
row inside the array, finite values), every keypoint feature file (``CAT/keypoints/``: the photo it
records against the photo its name says, :func:`whale.keypoints.store.read_entry`; not the selectors kept beside
them, which are checked whenever read and fitted again when damaged) and every batch's proposals file;
it lists what is wrong, each with the command that removes it. :func:`removal` says what ``remove`` would take (a photo, by hash,
hash prefix, catalogue file or the path it was added from; or an individual with all its photos) and
:func:`remove` takes it in one transaction: the photos' rows, sightings and features, and an individual
left without photos. Decisions stay: they are the review history, never deleted.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.catalogue import sql
from whale.catalogue.db import Catalogue, file_hash
from whale.core.errors import DataError

MIN_PREFIX = 6
"""A photo named by the start of its hash needs at least this many hex digits."""


@dataclass(frozen=True)
class Problem:
    """One thing ``check`` found wrong: what it is about (``photo 1a2b3c...``) and what is wrong."""

    subject: str
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.subject}: {self.what}; {self.fix}"


def check(cat: Catalogue) -> tuple[dict[str, int], list[Problem]]:
    """Verify every photo, feature row and proposals file; returns ``(counts checked, problems)``."""
    from whale.data import load_image

    problems = []

    def remove_hint(digest):
        return f"`whale catalogue remove {cat.root} {digest[:12]}` removes it"

    photos = sql.photos(cat.conn)
    for digest, individual, rel, source, _ in photos:
        subject = f"photo {digest[:12]} of {individual!r} (added from {source})"
        path = cat.root / rel
        if not path.is_file():
            problems.append(Problem(subject, f"{rel} is missing", remove_hint(digest)))
        elif file_hash(path) != digest:
            problems.append(Problem(subject, f"{rel} does not hold the bytes of its hash", remove_hint(digest)))
        else:
            try:
                load_image(path)
            except DataError as exc:
                problems.append(Problem(subject, f"not a readable image ({exc})", remove_hint(digest)))
    rows = sql.feature_rows(cat.conn)
    files: dict[str, np.ndarray | str] = {}
    for rel in sorted({r[1] for r in rows}):
        files[rel] = _feature_file(cat.root / rel)
    reindex = f"`whale catalogue index {cat.root} --run RUN` scores it again once removed with `whale catalogue " \
              f"remove {cat.root} PHOTO`"
    for digest, rel, row, individual in rows:
        array = files[rel]
        subject = f"features of photo {digest[:12]} of {individual!r} ({rel}, row {row})"
        if isinstance(array, str):
            problems.append(Problem(subject, array, reindex))
        elif not 0 <= row < array.shape[2]:
            problems.append(Problem(subject, f"row {row} is not in the file's {array.shape[2]} rows", reindex))
        elif not np.isfinite(array[:, :, row]).all():
            problems.append(Problem(subject, "values that are not finite", reindex))
    keypoint_files = _keypoint_files(cat, problems)
    for name, rel in sql.batch_files(cat.conn):
        from whale.catalogue.proposals import read_proposals

        try:
            read_proposals(cat.root / rel)
        except DataError as exc:
            problems.append(Problem(f"batch {name!r}", str(exc), f"`whale catalogue match {cat.root} --batch {name} "
                                    "--rematch --photos FOLDER` writes its proposals again"))
    counts = {"photos": len(photos), "feature rows": len(rows), "feature files": len(files)}
    if keypoint_files:
        counts["keypoint feature files"] = keypoint_files
    return counts, problems


def _keypoint_files(cat: Catalogue, problems: list) -> int:
    """Check every file of the catalogue's keypoint feature stores (``match --method keypoints``) against the
    photo its name says; append the problems (those of an earlier version, which record no photo, as one);
    returns how many files were checked."""
    from whale.catalogue.keypoints import STORE_DIR
    from whale.keypoints.store import UNTIED, read_entry

    root = cat.root / STORE_DIR
    paths = sorted(p for p in root.glob("*/*/*.npz")  # not selectors/: sealed caches, checked whenever read
                   if not p.name.startswith(".") and p.parent.name != "selectors") if root.is_dir() else []
    again = f"the next `whale catalogue match {cat.root} --method keypoints` extracts it again"
    untied = []
    for path in paths:
        _, what = read_entry(path, path.stem)
        if what == UNTIED:
            untied.append(path)
        elif what:
            problems.append(Problem(f"keypoint features {path.relative_to(cat.root)}", what, again))
    if untied:
        problems.append(Problem(f"{len(untied)} keypoint feature files (e.g. {untied[0].relative_to(cat.root)})",
                                f"{UNTIED}: not tied to their photos' hashes", again.replace(" it ", " them ")))
    return len(paths)


def _feature_file(path: Path) -> np.ndarray | str:
    """The array of a feature file, or what is wrong with it (missing, bytes not those of its name, unreadable)."""
    if not path.is_file():
        return f"{path.name} is missing"
    data = path.read_bytes()
    if re.fullmatch(r"[0-9a-f]{64}", path.stem) and hashlib.sha256(data).hexdigest() != path.stem:
        return f"{path.name} does not hold the bytes of its hash"
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        return f"{path.name} is not a readable array ({exc})"
    if array.ndim != 4:
        return f"{path.name} holds a {array.ndim}-d array, expected [G, V, n, d]"
    return array


@dataclass(frozen=True)
class Removal:
    """What ``remove`` takes: ``photos`` as ``(hash, individual, source)``, and ``individual`` when one is
    removed whole. ``emptied``: individuals left without photos (removed too)."""

    photos: tuple[tuple[str, str, str], ...]
    individual: str | None
    emptied: tuple[str, ...]
    sightings: int
    features: int

    def describe(self) -> list[str]:
        """Lines saying what goes, for the confirmation."""
        head = (f"individual {self.individual!r} with its {len(self.photos)} photos" if self.individual else
                f"{len(self.photos)} photo")
        lines = [f"remove {head}, {self.sightings} sightings and {self.features} feature rows:"]
        lines += [f"  photo {h[:12]} of {ind!r}, added from {src}" for h, ind, src in self.photos[:10]]
        if len(self.photos) > 10:
            lines.append(f"  ... and {len(self.photos) - 10} more photos")
        others = [i for i in self.emptied if i != self.individual]
        if others:
            lines.append(f"  individual {', '.join(map(repr, others))}, left without photos")
        lines.append("  (decisions stay: they are the review history)")
        return lines


def removal(cat: Catalogue, what: str) -> Removal:
    """What ``remove WHAT`` would take: an individual (its id), or one photo (its hash, a hash prefix of at
    least :data:`MIN_PREFIX` hex digits, its file in the catalogue, or the path it was added from).

    Raises:
        DataError: nothing matches ``what``, it names both an individual and a photo, or a prefix fits
            several photos (each listed).
    """
    photo_rows = _photos_named(cat, what)
    is_individual = what in cat.individuals()
    if is_individual and photo_rows:
        raise DataError(f"{cat.root}: {what!r} is an individual and names a photo too: give the photo's full hash "
                        f"({photo_rows[0][0]}) to remove the photo")
    if is_individual:
        photo_rows = sql.photos_of(cat.conn, what)
    elif not photo_rows:
        raise DataError(f"{cat.root}: no individual or photo {what!r} (a photo is named by its hash, at least "
                        f"{MIN_PREFIX} of its first hex digits, its file in the catalogue or the path it was added "
                        f"from; `whale catalogue export` lists them)")
    elif len(photo_rows) > 1:
        raise DataError(f"{cat.root}: {what!r} fits {len(photo_rows)} photos ("
                        + ", ".join(r[0][:12] for r in photo_rows[:5]) + "): give more of the hash")
    hashes = [r[0] for r in photo_rows]
    sightings, features = sql.removal_counts(cat.conn, hashes)
    emptied = sorted(ind for ind in {r[1] for r in photo_rows} if not sql.keeps_other_photos(cat.conn, ind, hashes))
    return Removal(tuple(tuple(r) for r in photo_rows), what if is_individual else None, tuple(emptied),
                   int(sightings), int(features))


def _photos_named(cat: Catalogue, what: str) -> list[tuple[str, str, str]]:
    """The photos ``what`` names: by hash or hash prefix, catalogue file, or source path."""
    text = what.strip().lower()
    if re.fullmatch(r"[0-9a-f]{%d,64}" % MIN_PREFIX, text):
        return sql.photos_by_hash_prefix(cat.conn, text)
    candidates = {what}
    path = Path(what).expanduser()
    try:
        candidates.add(str(path.resolve()))
        resolved = path.resolve() if path.is_absolute() else (Path.cwd() / path).resolve()
        candidates.add(resolved.relative_to(cat.root.resolve()).as_posix())
    except (OSError, RuntimeError, ValueError):
        pass
    return sql.photos_by_path(cat.conn, sorted(candidates))


def remove(cat: Catalogue, plan: Removal) -> Removal:
    """Take what ``plan`` (:func:`removal`) names, in one transaction; the photo files go after the commit.

    The plan is made again under the write lock: if the catalogue changed since it was shown, nothing is
    removed (DataError), so what goes is what was confirmed.
    """
    with cat.writing():
        again = removal(cat, plan.individual or plan.photos[0][0])
        if again != plan:
            raise DataError(f"{cat.root}: the catalogue changed since the removal was shown; nothing removed: "
                            "run the command again")
        with cat.transaction() as db:
            sql.remove_photos(db, [h for h, _, _ in plan.photos])
            sql.drop_empty_individuals(db, {ind for _, ind, _ in plan.photos})
    return plan
