"""What ``match`` proposes for one batch of new photos, as the JSON file the review page reads.

``CATALOGUE/batches/<batch>/proposals-<sha256 of the file, 16 hex>.json`` (:func:`proposals_file`; the
batch's row in the database names it; catalogues of earlier versions named it ``proposals.json``)::

    {"batch": str, "run": str, "threshold": float,
     "scale": "probability" | "score",    # what threshold is on (absent: score, files of earlier versions)
     "photos": [{"photo": str,            # path of the new photo (absolute)
                 "hash": str,             # sha256 of its bytes
                 "possibly_new": bool,    # best candidate's probability (or score) below the threshold
                 "group": int | null,     # photos of this batch matching each other share a group
                 "candidates": [{"individual": str, "score": float,
                                 "probability": float | null,   # calibrated P(same whale) (absent: null)
                                 "image": str}]}]}   # best catalogue image of that individual (absolute)

Candidates are ordered by descending score (each individual's best image, the per-id maximum
of :mod:`whale.ranking`). :func:`read_proposals` checks every key and names the file and the
key path of what is wrong.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from whale.core.errors import DataError
from whale.core.files import atomic_write



SCALES = ("probability", "score")


@dataclass(frozen=True)
class Candidate:
    """One proposed individual for a photo: its id, its best image's score, that image's absolute path, and
    the calibrated probability that it is the same whale (None where the match had no calibration)."""

    individual: str
    score: float
    image: str
    probability: float | None = None


@dataclass(frozen=True)
class PhotoProposal:
    """The candidates of one new photo, best first."""

    photo: str
    hash: str
    possibly_new: bool
    group: int | None
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True)
class Proposals:
    """Everything ``match`` proposed for one batch."""

    batch: str
    run: str
    threshold: float
    photos: tuple[PhotoProposal, ...]
    scale: str = "score"

    def to_json(self) -> dict:
        return asdict(self)


def proposals_text(proposals: Proposals) -> str:
    """The JSON text of ``proposals`` (what :func:`write_proposals` writes)."""
    return json.dumps(proposals.to_json(), indent=1) + "\n"


def proposals_file(batch: str, proposals: Proposals) -> str:
    """``batches/<batch>/proposals-<digest>.json``: where a catalogue keeps ``proposals``, named by content."""
    digest = hashlib.sha256(proposals_text(proposals).encode("utf-8")).hexdigest()[:16]
    return f"batches/{batch}/proposals-{digest}.json"


def write_proposals(path, proposals: Proposals) -> Path:
    """Write ``proposals`` to ``path`` atomically (JSON, fsynced); returns ``path``."""
    text = proposals_text(proposals)
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), fsync=True)


def _get(obj, key: str, kind, where: str, path: Path):
    if not isinstance(obj, dict):
        raise DataError(f"{path}: {where or 'the file'}: expected an object, received {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{path}: {where + '.' if where else ''}{key}: missing")
    value = obj[key]
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):  # True is an int too
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise DataError(f"{path}: {where + '.' if where else ''}{key}: expected {names}, received {value!r}")
    return value


def read_proposals(path) -> Proposals:
    """The :class:`Proposals` of a ``proposals.json``, paths as written (relative ones are read
    relative to the file's folder by their users). Keys beyond the documented ones are ignored.

    Raises:
        DataError: naming the file and the key path (``photos[3].candidates[0].score``) of a
            missing key, a value of the wrong type, a photo listed twice, an unnamed individual
            or a score that is not finite.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: proposals file not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({exc})") from None
    batch, run = _get(raw, "batch", str, "", path), _get(raw, "run", str, "", path)
    threshold = float(_get(raw, "threshold", (int, float), "", path))
    scale = raw.get("scale", "score")
    if scale not in SCALES:
        raise DataError(f"{path}: scale: expected one of {', '.join(SCALES)}, received {scale!r}")
    photos, seen = [], {}
    for i, p in enumerate(_get(raw, "photos", list, "", path)):
        where = f"photos[{i}]"
        name = _get(p, "photo", str, where, path)
        if not name or name in seen:
            what = f"is photos[{seen[name]}] too" if name else "is empty"
            raise DataError(f"{path}: {where}.photo: {name!r} {what}")
        seen[name] = i
        group = p.get("group")
        if group is not None and (isinstance(group, bool) or not isinstance(group, int)):
            raise DataError(f"{path}: {where}.group: expected an integer or null, received {group!r}")
        cands = []
        for j, c in enumerate(_get(p, "candidates", list, where, path)):
            cw = f"{where}.candidates[{j}]"
            prob = c.get("probability") if isinstance(c, dict) else None
            if prob is not None and (isinstance(prob, bool) or not isinstance(prob, (int, float))
                                     or not 0 <= prob <= 1):
                raise DataError(f"{path}: {cw}.probability: expected a number in [0, 1] or null, received {prob!r}")
            cand = Candidate(_get(c, "individual", str, cw, path), float(_get(c, "score", (int, float), cw, path)),
                             _get(c, "image", str, cw, path), None if prob is None else float(prob))
            if not cand.individual.strip() or not math.isfinite(cand.score):
                raise DataError(f"{path}: {cw}: expected a named individual and a finite score, received "
                                f"{cand.individual!r}, {cand.score!r}")
            cands.append(cand)
        photos.append(PhotoProposal(name, _get(p, "hash", str, where, path), _get(p, "possibly_new", bool, where, path),
                                    group, tuple(cands)))
    return Proposals(batch, run, threshold, tuple(photos), scale)
