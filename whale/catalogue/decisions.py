"""``accept``: a reviewer's decisions recorded, from a decisions file or one keypress at a time.

The decisions file is a CSV ``photo,decision,individual`` (what the review page exports), optionally
with sighting columns ``date``, ``location``, ``encounter`` after them (free text, per photo):
``match`` (``individual`` = one of that photo's candidates; another individual of the catalogue only
with ``allow_unlisted``), ``new`` (``individual`` = the id to create; several photos may name the same
new id, in one file or one by one: an id this batch's ``new`` decisions created may be named again),
``skip`` (``individual`` empty). ``photo`` is a photo of the batch as its proposals name it
(its path, or just its file name when that is unique in the batch). The rows are read and checked by
:func:`whale.catalogue.report.read_decisions` (one reader for the page's export and for ``accept``).
:func:`record` takes decisions already made (the review server's, :mod:`whale.catalogue.server`: one per
keypress), checked by the same :func:`whale.catalogue.report.decision_problem`, and may also say ``undo``.

Both check every decision first, copy the matched photos into the catalogue (durable), then record
everything in one transaction, under the catalogue's write lock: the decisions (appended, never
deleted), new individuals, images and sightings (each with the row's date, location and encounter, or
the batch's given to ``accept``; each sighting names the decision that added it). A photo already
decided keeps its decision; a row deciding it again the same way is skipped, a row deciding it
otherwise is refused (naming the row) unless ``redecide``. A redecision undoes what the earlier one
did: to another individual it moves the photo, to ``skip`` it removes the photo a decision added (with
its sightings and features); an individual left without photos goes too. ``undo`` does what a
redecision to ``skip`` does, and leaves the photo undecided: its next decision is no redecision.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from whale.catalogue import sql
from whale.catalogue.db import SIGHTING_COLUMNS, Catalogue, user
from whale.catalogue.ingest import flush, store_photo
from whale.catalogue.report import Decision, ProposalsFile, decision_problem, load_proposals, read_decisions
from whale.core.errors import DataError

UNDO = "undo"
"""What an ``undo`` decision records as ``decided``: the photo is undecided again."""
KINDS = ("match", "new", "skip", UNDO)
"""What :func:`record` may be told (a decisions file says one of the first three)."""
OUTCOMES = ("matched", "new", "skipped", "undone", "undo", "unchanged")


def decided_as(decision: str, individual: str | None) -> str:
    """What the ``decided`` column records for a decision: the individual, ``new:<id>``, ``skip`` or ``undo``."""
    return {"match": individual, "new": f"new:{individual}"}.get(decision, decision)


def standing(decided: str | None) -> str | None:
    """A photo's standing decision given its latest ``decided`` (None: undecided; an ``undo`` leaves none)."""
    return None if decided == UNDO else decided


def accept(cat: Catalogue, batch: str, decisions_csv, by: str | None = None,
           redecide: bool = False, sighting: dict[str, str] | None = None,
           allow_unlisted: bool = False) -> dict[str, int]:
    """Record the decisions of ``decisions_csv`` for ``batch``; returns counts per outcome
    (``matched``, ``new``, ``skipped``, ``undone``: skips that removed a photo an earlier decision
    added, ``undo``, ``unchanged``).

    ``sighting``: the batch's ``date`` / ``location`` / ``encounter`` (e.g. one survey day), for
    every new sighting whose row leaves that column empty. ``allow_unlisted``: a ``match`` may name
    an individual that is not among the photo's candidates (it must exist in the catalogue).

    Raises:
        DataError: an unknown sighting column, an unknown batch or photo, ``match`` to an individual
            outside the candidates (without ``allow_unlisted``) or unknown, ``new`` with an id the
            catalogue already has (other than one this batch's ``new`` decisions created), a photo
            decided otherwise before (without ``redecide``), or a photo whose bytes the catalogue
            holds under another individual. Nothing is recorded then.
    """
    defaults = _defaults(sighting)
    with cat.writing():
        proposals = batch_proposals(cat, batch)
        decisions = read_decisions(decisions_csv, proposals, allow_unlisted=allow_unlisted)
        return _record(cat, batch, proposals, decisions, lambda d: f"{decisions_csv} row {d.row}", by or user(),
                       redecide, defaults)


def record(cat: Catalogue, batch: str, decisions: Sequence[Decision], by: str | None = None,
           redecide: bool = False, sighting: dict[str, str] | None = None, allow_unlisted: bool = False,
           where: str = "decision") -> dict[str, int]:
    """Record ``decisions`` (made elsewhere: a keypress of the review server) for ``batch`` as :func:`accept`
    records a file's rows; a decision may also be ``undo`` (individual None). ``where`` starts every
    message (e.g. ``review of batch B``). Returns the counts of :func:`accept`.

    Raises:
        DataError: as :func:`accept`, or an ``undo`` of an undecided photo. Nothing is recorded then.
    """
    defaults = _defaults(sighting)
    with cat.writing():
        proposals = batch_proposals(cat, batch)
        photos = {p.photo: p for p in proposals.photos}
        for d in decisions:
            if d.photo not in photos:
                raise DataError(f"{where}: photo {d.photo!r} is not in {proposals.path}")
            problem = decision_problem(photos[d.photo], d.decision, d.individual or "", allow_unlisted, KINDS)
            if problem:
                raise DataError(f"{where}: {problem}")
        return _record(cat, batch, proposals, decisions, lambda d: where, by or user(), redecide, defaults)


def batch_proposals(cat: Catalogue, batch: str) -> ProposalsFile:
    """The checked proposals of ``batch`` (the file its row names)."""
    rel = sql.batch_proposals_file(cat.conn, batch)
    if rel is None:
        known = ", ".join(sql.batch_names(cat.conn)) or "none"
        raise DataError(f"{cat.root}: no batch {batch!r} (batches: {known}); run `whale catalogue match` first")
    return load_proposals(cat.root / rel)


def _defaults(sighting: dict[str, str] | None) -> dict[str, str]:
    defaults = {k: v for k, v in (sighting or {}).items() if v}
    unknown = sorted(set(defaults) - set(SIGHTING_COLUMNS))
    if unknown:
        raise DataError(f"sighting {', '.join(unknown)}: expected some of {', '.join(SIGHTING_COLUMNS)}")
    return defaults


def _record(cat: Catalogue, batch: str, proposals: ProposalsFile, decisions: Sequence[Decision],
            where: Callable[[Decision], str], by: str, redecide: bool, defaults: dict[str, str]) -> dict[str, int]:
    photos = {p.photo: p for p in proposals.photos}
    existing = cat.individuals()
    created: dict[str, str] = {}
    plan = []
    # A match the model did not propose (the reviewer knows the animal) must be asked for; it must exist.
    for d in decisions:
        at, ind, photo = where(d), d.individual or "", photos[d.photo]
        last = sql.last_decision(cat.conn, photo.hash)
        if last == decided_as(d.decision, ind) or (d.decision == UNDO and standing(last) is None):
            pass  # recorded already (accepting the same file twice changes nothing), or nothing to undo
        elif d.decision == "new":
            if ind in existing and not sql.created_by_batch(cat.conn, batch, f"new:{ind}"):
                raise DataError(f"{at}: new individual {ind!r} exists already in the catalogue; use 'match'")
            created.setdefault(ind, at)
        elif d.decision == "match" and ind not in existing and ind not in created:
            raise DataError(f"{at}: individual {ind!r} is not in the catalogue (nor created above with 'new')")
        plan.append((at, photo.path, photo.hash, d.decision, ind, {**defaults, **d.sighting()}))
    stored = {}
    for at, path, digest, decision, ind, _ in plan:
        if decision in ("match", "new"):
            if not path.is_file():
                raise DataError(f"{at}: {path}: the photo is gone (it must stay until accepted)")
            stored[digest] = store_photo(cat, path, digest)
    if stored:
        flush([cat.root / rel for rel in stored.values()])
    counts = dict.fromkeys(OUTCOMES, 0)
    left: set[str] = set()  # individuals a redecision took a photo from
    with cat.transaction() as db:
        for at, path, digest, decision, ind, seen in plan:
            decided = decided_as(decision, ind)
            last = sql.last_decision(db, digest)
            if last == decided or (decision == UNDO and standing(last) is None):
                counts["unchanged"] += 1
                continue
            if standing(last) is not None and not redecide and decision != UNDO:
                raise DataError(f"{at}: {path.name} was decided {last!r} before; --redecide records "
                                f"{decided!r} after it")
            decision_id = sql.record_decision(db, batch, str(path), digest, decision, decided, by)
            held = sql.photo_owner(db, digest)
            if decision in ("skip", UNDO):
                counts["skipped" if decision == "skip" else UNDO] += 1
                if standing(last) not in (None, "skip") and held is not None and sql.undo_decided_photo(db, digest):
                    counts["undone"] += 1
                    left.add(held[0])
                continue
            if decision == "new" and not sql.has_individual(db, ind):
                sql.add_individual(db, ind, by)
            if held is not None and held[0] != ind:
                if not redecide:
                    raise DataError(f"{at}: {path.name} has the bytes of a catalogue photo of {held[0]!r}, "
                                    f"not {ind!r}; nothing recorded")
                sql.move_photo(db, digest, ind)
                left.add(held[0])
            elif held is None:
                sql.add_photo(db, digest, stored[digest], str(path), ind, None, seen, by, decision_id)
            counts["new" if decision == "new" else "matched"] += 1
        sql.drop_empty_individuals(db, left)
    return counts
