"""``accept``: a reviewer's decisions recorded.

The decisions file is a CSV ``photo,decision,individual`` (what the review page exports), optionally
with sighting columns ``date``, ``location``, ``encounter`` after them (free text, per photo):
``match`` (``individual`` = one of that photo's candidates; another individual of the catalogue only
with ``allow_unlisted``), ``new`` (``individual`` = the id to create; several photos may name the same
new id), ``skip`` (``individual`` empty). ``photo`` is a photo of the batch as its proposals name it
(its path, or just its file name when that is unique in the batch). The rows are read and checked by
:func:`whale.catalogue.report.read_decisions` (one reader for the page's export and for ``accept``).

``accept`` checks every row first, copies the matched photos into the catalogue (durable), then
records everything in one transaction, under the catalogue's write lock: the decisions (appended,
never deleted), new individuals, images and sightings (each with the row's date, location and
encounter, or the batch's given to ``accept``; each sighting names the decision that added it). A
photo already decided keeps its decision; a row deciding it again the same way is skipped, a row
deciding it otherwise is refused (naming the row) unless ``redecide``. A redecision undoes what the
earlier one did: to another individual it moves the photo, to ``skip`` it removes the photo a
decision added (with its sightings and features); an individual left without photos goes too.
"""
from __future__ import annotations

from whale.catalogue import sql
from whale.catalogue.db import SIGHTING_COLUMNS, Catalogue, user
from whale.catalogue.ingest import flush, store_photo
from whale.catalogue.report import load_proposals, read_decisions
from whale.core.errors import DataError


def accept(cat: Catalogue, batch: str, decisions_csv, by: str | None = None,
           redecide: bool = False, sighting: dict[str, str] | None = None,
           allow_unlisted: bool = False) -> dict[str, int]:
    """Record the decisions of ``decisions_csv`` for ``batch``; returns counts per outcome
    (``matched``, ``new``, ``skipped``, ``undone``: skips that removed a photo an earlier decision
    added, ``unchanged``).

    ``sighting``: the batch's ``date`` / ``location`` / ``encounter`` (e.g. one survey day), for
    every new sighting whose row leaves that column empty. ``allow_unlisted``: a ``match`` may name
    an individual that is not among the photo's candidates (it must exist in the catalogue).

    Raises:
        DataError: an unknown sighting column, an unknown batch or photo, ``match`` to an individual
            outside the candidates (without ``allow_unlisted``) or unknown, ``new`` with an id the
            catalogue already has, a photo decided otherwise before (without ``redecide``), or a photo
            whose bytes the catalogue holds under another individual. Nothing is recorded then.
    """
    defaults = {k: v for k, v in (sighting or {}).items() if v}
    unknown = sorted(set(defaults) - set(SIGHTING_COLUMNS))
    if unknown:
        raise DataError(f"sighting {', '.join(unknown)}: expected some of {', '.join(SIGHTING_COLUMNS)}")
    with cat.writing():
        return _accept(cat, batch, decisions_csv, by or user(), redecide, defaults, allow_unlisted)


def _accept(cat: Catalogue, batch: str, decisions_csv, by: str, redecide: bool, defaults: dict[str, str],
            allow_unlisted: bool) -> dict[str, int]:
    rel = sql.batch_proposals_file(cat.conn, batch)
    if rel is None:
        known = ", ".join(sql.batch_names(cat.conn)) or "none"
        raise DataError(f"{cat.root}: no batch {batch!r} (batches: {known}); run `whale catalogue match` first")
    proposals = load_proposals(cat.root / rel)
    photos = {p.photo: p for p in proposals.photos}
    existing = cat.individuals()
    created: dict[str, str] = {}
    plan = []
    decided_as = {"match": lambda i: i, "new": lambda i: f"new:{i}", "skip": lambda i: "skip"}
    # A match the model did not propose (the reviewer knows the animal) must be asked for; it must exist.
    for d in read_decisions(decisions_csv, proposals, allow_unlisted=allow_unlisted):
        where, ind, photo = f"{decisions_csv} row {d.row}", d.individual or "", photos[d.photo]
        if sql.last_decision(cat.conn, photo.hash) == decided_as[d.decision](ind):
            pass  # recorded already: accepting the same file twice changes nothing
        elif d.decision == "new":
            if ind in existing:
                raise DataError(f"{where}: new individual {ind!r} exists already in the catalogue; use 'match'")
            created.setdefault(ind, where)
        elif d.decision == "match" and ind not in existing and ind not in created:
            raise DataError(f"{where}: individual {ind!r} is not in the catalogue (nor created above with 'new')")
        plan.append((where, photo.path, photo.hash, d.decision, ind, {**defaults, **d.sighting()}))
    stored = {}
    for where, path, digest, decision, ind, _ in plan:
        if decision != "skip":
            if not path.is_file():
                raise DataError(f"{where}: {path}: the photo is gone (it must stay until accepted)")
            stored[digest] = store_photo(cat, path, digest)
    flush()
    counts = dict.fromkeys(("matched", "new", "skipped", "undone", "unchanged"), 0)
    left: set[str] = set()  # individuals a redecision took a photo from
    with cat.transaction() as db:
        for where, path, digest, decision, ind, seen in plan:
            decided = decided_as[decision](ind)
            last = sql.last_decision(db, digest)
            if last == decided:
                counts["unchanged"] += 1
                continue
            if last is not None and not redecide:
                raise DataError(f"{where}: {path.name} was decided {last!r} before; --redecide records "
                                f"{decided!r} after it")
            decision_id = sql.record_decision(db, batch, str(path), digest, decision, decided, by)
            held = sql.photo_owner(db, digest)
            if decision == "skip":
                counts["skipped"] += 1
                if last not in (None, "skip") and held is not None and sql.undo_decided_photo(db, digest):
                    counts["undone"] += 1
                    left.add(held[0])
                continue
            if decision == "new" and not sql.has_individual(db, ind):
                sql.add_individual(db, ind, by)
            if held is not None and held[0] != ind:
                if not redecide:
                    raise DataError(f"{where}: {path.name} has the bytes of a catalogue photo of {held[0]!r}, "
                                    f"not {ind!r}; nothing recorded")
                sql.move_photo(db, digest, ind)
                left.add(held[0])
            elif held is None:
                sql.add_photo(db, digest, stored[digest], str(path), ind, None, seen, by, decision_id)
            counts["new" if decision == "new" else "matched"] += 1
        sql.drop_empty_individuals(db, left)
    return counts

