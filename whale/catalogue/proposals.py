"""What ``match`` proposes for one batch of new photos, as the JSON file the review page reads.

``CATALOGUE/batches/<batch>/proposals.json``::

    {"batch": str, "run": str, "threshold": float,
     "photos": [{"photo": str,            # path of the new photo (absolute)
                 "hash": str,             # sha256 of its bytes
                 "possibly_new": bool,    # best candidate's score below the run's threshold
                 "group": int | null,     # photos of this batch matching each other share a group
                 "candidates": [{"individual": str, "score": float,
                                 "image": str}]}]}   # best catalogue image of that individual (absolute)

Candidates are ordered by descending score (each individual's best image, the per-id maximum
of :mod:`whale.ranking`). :func:`read_proposals` checks every key and names the file and the
key path of what is wrong.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from whale.errors import DataError
from whale.files import atomic_write

PROPOSALS_NAME = "proposals.json"


@dataclass(frozen=True)
class Candidate:
    """One proposed individual for a photo: its id, its best image's score, that image's absolute path."""

    individual: str
    score: float
    image: str


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

    def to_json(self) -> dict:
        return asdict(self)


def write_proposals(path, proposals: Proposals) -> Path:
    """Write ``proposals`` to ``path`` atomically (JSON, fsynced); returns ``path``."""
    text = json.dumps(proposals.to_json(), indent=1) + "\n"
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text), fsync=True)


def _get(obj, key: str, kind, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{where}: missing key {key!r}")
    value = obj[key]
    ok = isinstance(value, kind) and not (kind in (int, float, (int, float)) and isinstance(value, bool))
    if not ok:
        raise DataError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, received {value!r}")
    return value


def read_proposals(path) -> Proposals:
    """The :class:`Proposals` of a ``proposals.json``.

    Raises:
        DataError: naming the file and the key path (``photos[3].candidates[0].score``) of a
            missing key or a value of the wrong type.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    where = str(path)
    photos = []
    for i, p in enumerate(_get(raw, "photos", list, where)):
        w = f"{where}: photos[{i}]"
        group = p.get("group") if isinstance(p, dict) else None
        if group is not None and (not isinstance(group, int) or isinstance(group, bool)):
            raise DataError(f"{w}.group: expected an integer or null, received {group!r}")
        cands = []
        for j, c in enumerate(_get(p, "candidates", list, w)):
            wc = f"{w}.candidates[{j}]"
            cands.append(Candidate(_get(c, "individual", str, wc), float(_get(c, "score", (int, float), wc)),
                                   _get(c, "image", str, wc)))
        photos.append(PhotoProposal(_get(p, "photo", str, w), _get(p, "hash", str, w),
                                    _get(p, "possibly_new", bool, w), group, tuple(cands)))
    return Proposals(_get(raw, "batch", str, where), _get(raw, "run", str, where),
                     float(_get(raw, "threshold", (int, float), where)), tuple(photos))
