"""What the review server's page renders: a batch's photos and candidates, and the decisions standing now.

:func:`review_data` is read once when the server starts (images written into the review folder by
:class:`whale.catalogue.thumbs.ReviewImages`, linked relatively); :func:`decision_state` is read from the
catalogue on every request, so a reopened page shows what is decided. Both are plain JSON-ready dicts, the
page's whole contract (every text is put into the page as text, never as markup)::

    {"batch": str, "run": str, "method": "keypoints" | "joint" | "run", "config_hash": str | None,
     "fingerprint": str, "threshold": float, "scale": "probability" | "score" (what threshold is on),
     "matched_at": str,
     "photos": [{"photo": str (the key decisions name), "name": str (file name), "hash": str,
                 "possibly_new": bool, "group": int | None, "image": str, "large": str,
                 "more": int (candidates beyond the shown ones),
                 "candidates": [{"rank": int, "individual": str, "score": float,
                                 "inliers": int | None,       # verified keypoint matches (keypoint views only)
                                 "probability": float | None, # calibrated P(same whale), shown as P(same)
                                 "image": str, "large": str, "match": str | None (the match view),
                                 "file": str (the image's file name where it was added from),
                                 "photos": int (its individual's photos), "others": [str] (up to 3 of them)}]}]}

``probability`` is the candidate's calibrated probability of the same whale as ``match`` recorded it
(:mod:`whale.catalogue.calibration`; None for a batch matched before calibration or without one), unless
:func:`review_data` is given ``probability``: a callable ``(photo, candidate) -> float | None``
(:class:`whale.catalogue.report.Photo`, :class:`whale.catalogue.proposals.Candidate`) that replaces it. The page
shows it beside the raw evidence when it is a number. Nothing here invents one.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from whale.catalogue import sql
from whale.catalogue.db import Catalogue
from whale.catalogue.decisions import batch_proposals, standing
from whale.catalogue.ingest import image_path
from whale.catalogue.report import ProposalsFile
from whale.catalogue.thumbs import ReviewImages
from whale.core.errors import DataError

SHOWN = 5
"""Candidates shown per photo (keys 1-5)."""
OTHERS = 3
"""Other photos of a candidate's individual shown on hover."""
ZOOM_HEIGHT = 600
"""Height of the keypoint match views, shown only enlarged here (the static page draws them 320 px high)."""
THUMB = 320
"""Longest side of the served thumbnails: five side by side fill a 1,400 px window without enlarging them."""


def review_data(cat: Catalogue, batch: str, out_dir, matches=None,
                probability: Callable | None = None, thumb: int = THUMB, verbose: bool = False) -> dict:
    """The page's data for ``batch`` (module docstring), its images written into ``out_dir``.

    ``matches``: a :class:`whale.keypoints.FeatureStore` for the keypoint match view of each pair (and its
    verified matches as ``inliers``), as the static page draws them; ``probability``: the calibrated
    probability hook (module docstring).

    Raises:
        DataError: an unknown batch, a bad proposals file, an image that cannot be read (naming the photo).
    """
    from whale.core.progress import progress_bar

    props = batch_proposals(cat, batch)
    run, fingerprint, threshold, matched_at = sql.batch_row(cat.conn, batch)
    views = None
    if matches is not None:
        from whale.catalogue.matchview import MatchViews

        views = MatchViews(matches, height=ZOOM_HEIGHT)
    images = ReviewImages(Path(out_dir), int(thumb), views=views)
    rows = sql.photos(cat.conn)  # (hash, individual, file, source, box)
    by_file = {Path(r[2]).name: r for r in rows}  # images/ab/<sha256>.jpg: its name is its content
    of_individual: dict[str, list[tuple]] = {}
    for r in rows:
        of_individual.setdefault(r[1], []).append(r)
    photos = []
    for photo in progress_bar(props.photos, desc="review images", enabled=verbose):
        try:
            photos.append(_photo(cat, photo, images, by_file, of_individual, probability))
        except DataError as exc:
            raise DataError(f"{props.path}: photo {photo.photo!r}: {exc}") from None
    return {"batch": batch, "run": run, "method": _method(run),
            "config_hash": _config_hash(cat, batch, run), "fingerprint": fingerprint, "threshold": threshold,
            "scale": props.scale, "matched_at": matched_at, "photos": photos}


def _photo(cat, photo, images: ReviewImages, by_file: dict, of_individual: dict, probability) -> dict:
    cands = []
    for rank, c in enumerate(photo.candidates[:SHOWN], 1):
        path = Path(c.image)
        row = by_file.get(path.name)
        others = [r for r in of_individual.get(c.individual, []) if row is None or r[0] != row[0]][:OTHERS]
        view = images.match(photo.path, path)
        p = c.probability if probability is None else probability(photo, c)
        cands.append({"rank": rank, "individual": c.individual, "score": c.score,
                      "inliers": None if view is None else view[1], "probability": None if p is None else float(p),
                      "image": images.thumb(path), "large": images.large(path),
                      "match": None if view is None else view[0],
                      "file": Path(row[3]).name if row is not None else path.name,
                      "photos": len(of_individual.get(c.individual, [])),
                      "others": [images.thumb(image_path(cat, r[2])) for r in others]})
    return {"photo": photo.photo, "name": photo.path.name, "hash": photo.hash, "possibly_new": photo.possibly_new,
            "group": photo.group, "image": images.thumb(photo.path), "large": images.large(photo.path),
            "more": max(0, len(photo.candidates) - SHOWN), "candidates": cands}


def _method(run: str) -> str:
    """What matched a batch whose row records ``run``: ``keypoints``, ``joint`` or ``run`` (a trained run's folder)."""
    from whale.catalogue.joint import RUN as JOINT
    from whale.catalogue.keypoints import RUN as KEYPOINTS

    return {KEYPOINTS: "keypoints", JOINT: "joint"}.get(run, "run")


def _config_hash(cat: Catalogue, batch: str, run: str) -> str | None:
    """The hash of the settings that matched the batch: the keypoint or joint config beside its proposals, or the
    run's ``config.yaml`` (None where that cannot be read any more)."""
    try:
        if _method(run) == "keypoints":
            from whale.catalogue.keypoints import batch_config

            return batch_config(cat.root, batch).config_hash()
        if _method(run) == "joint":
            from whale.catalogue.joint import batch_config_hash

            return batch_config_hash(cat.root, batch)
        from whale.config import config_hash, load_config

        return config_hash(load_config(Path(run) / "config.yaml"))
    except (DataError, OSError, ValueError):
        return None


def decision_state(cat: Catalogue, batch: str, props: ProposalsFile | None = None) -> dict:
    """The decisions standing now for the photos of ``batch``::

        {"decisions": {photo: {"id": int (the latest decision, an undo's too), "decision": "match" | "new" |
                               "skip" | None (undecided: undone), "individual": str | None, "by": str, "at": str}},
         "decided": int, "new_names": [str] (the individuals this batch created), "suggestion": str}

    A photo with no decision has no entry. ``suggestion``: :func:`next_free_name` of the catalogue's ids.
    """
    props = props or batch_proposals(cat, batch)
    latest = sql.last_decisions(cat.conn, [p.hash for p in props.photos])
    out = {}
    for p in props.photos:
        if p.hash not in latest:
            continue
        did, decision, decided, by, at = latest[p.hash]
        now = standing(decided)
        individual = None if now is None or decision == "skip" else decided.removeprefix("new:")
        out[p.photo] = {"id": did, "decision": None if now is None else decision, "individual": individual,
                        "by": by, "at": at}
    return {"decisions": out, "decided": sum(d["decision"] is not None for d in out.values()),
            "new_names": sql.batch_new_individuals(cat.conn, batch),
            "suggestion": next_free_name(cat.individuals(), batch)}


def next_free_name(ids, batch: str) -> str:
    """The name the page offers for a new individual: the next number of the catalogue's own series (the
    prefix that most ids share before a final number, when at least 3 ids and half of them do: ``HW-0041`` ->
    ``HW-0042``, zero-padding kept), else ``<batch>-new-<k>``; never an id of ``ids``."""
    ids = set(ids)
    series: dict[str, list[str]] = {}
    for name in ids:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if m:
            series.setdefault(m[1], []).append(m[2])
    prefix, numbers = max(series.items(), key=lambda kv: (len(kv[1]), kv[0]), default=("", []))
    if len(numbers) < 3 or 2 * len(numbers) < len(ids):
        prefix = f"{batch}-new-"
        numbers = series.get(prefix, [])
    width = max((len(n) for n in numbers if n.startswith("0")), default=0)
    k = max((int(n) for n in numbers), default=0) + 1
    while f"{prefix}{k:0{width}d}" in ids:
        k += 1
    return f"{prefix}{k:0{width}d}"
