"""The catalogue's own P(same whale): its photos matched against each other, each left out of its own row.

A score means different things in different galleries: the keypoint matcher's LNBNN evidence in a catalogue of
62 photos runs far higher between different whales than in one of 6,000 (docs/catalogue.md, "Possibly new").
So "possibly new" reads a probability learned where the match happens: up to :data:`MAX_QUERIES` of the
catalogue's photos (all of them in a smaller catalogue; else a seeded draw) are matched against the whole
catalogue with each photo left out of its own row, as a new photo of a catalogued whale would be matched, and
:class:`whale.ranking.pairprob.PairCalibration` is fitted on those pairs (same individual or not). The fitted
calibration is kept in ``CAT/calibration/<settings>-<key>.json``, ``settings`` a digest of what the scores
depend on (the keypoint config's hash, or the run's fingerprint) and ``key`` one of those and of every photo's
hash and individual: a match on an unchanged catalogue reads it back, one after an ``add``, ``accept`` or
``remove`` fits it again (and deletes the same settings' stale file). A catalogue without two photos of one whale (or with one whale only) has no pair to learn from:
:func:`catalogue_calibration` returns None and says why.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.core.files import write_json_atomic
from whale.ranking.pairprob import PairCalibration

CALIBRATION_DIR = "calibration"
MAX_QUERIES = 1000
"""Catalogue photos matched against the catalogue (left out of their own row) to learn the calibration."""
SEED = 0


def catalogue_key(settings: str, hashes: Sequence[str], individuals: Sequence[str]) -> str:
    """24 hex digits naming the calibration of a catalogue (photo hashes and their individuals) under
    ``settings`` (a string that changes whenever the scores would)."""
    digest = hashlib.sha256(settings.encode())
    for h, ind in sorted(zip(hashes, individuals)):
        digest.update(f"\n{h}\t{ind}".encode())
    return digest.hexdigest()[:24]


def kept_file(cat_root, settings: str, hashes: Sequence[str], individuals: Sequence[str],
              suffix: str = ".json") -> Path:
    """``CAT/calibration/<settings digest, 12 hex>-<catalogue key>{suffix}``: where what is learned from this
    catalogue (:func:`catalogue_key`) under ``settings`` is kept (module docstring)."""
    prefix = hashlib.sha256(settings.encode()).hexdigest()[:12]
    return Path(cat_root) / CALIBRATION_DIR / f"{prefix}-{catalogue_key(settings, hashes, individuals)}{suffix}"


def drop_earlier(path: Path) -> None:
    """Delete what the same settings learned from an earlier catalogue, beside ``path`` (:func:`kept_file`)."""
    prefix, suffix = path.name.split("-")[0], "".join(path.suffixes)
    for old in path.parent.glob(f"{prefix}-*{suffix}"):
        if old != path:
            old.unlink(missing_ok=True)


def left_out_queries(n: int, max_queries: int = MAX_QUERIES, seed: int = SEED) -> np.ndarray:
    """``[m] int64`` sorted catalogue rows matched as queries: all ``n``, or a seeded draw of ``max_queries``."""
    if n <= max_queries:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, max_queries, replace=False)).astype(np.int64)


def read_calibration(path: Path) -> PairCalibration:
    """The calibration kept in ``path``; DataError naming it when it is not one."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable calibration ({exc})") from None
    return PairCalibration.from_dict(raw.get("calibration") if isinstance(raw, dict) else raw, str(path))


def catalogue_calibration(cat_root, settings: str, hashes: Sequence[str], individuals: Sequence[str],
                          scores_of: Callable[[np.ndarray], np.ndarray], log=None,
                          max_queries: int = MAX_QUERIES) -> tuple[PairCalibration | None, str]:
    """``(calibration or None, how)``: the stored calibration of this catalogue and ``settings``, else one fitted
    now and stored (module docstring).

    Args:
        cat_root: the catalogue folder.
        settings: what the scores depend on besides the photos (a config hash, a run fingerprint).
        hashes, individuals: ``[n]`` the catalogue's photos, in the order of ``scores_of``'s columns.
        scores_of: ``rows [m] int64 -> [m, n] float`` scores of those catalogue photos against the whole
            catalogue, each left out of its own row (its own column's score is ignored).
        log: an optional ``print``-like callable, told when the calibration is fitted.
    """
    path = kept_file(cat_root, settings, hashes, individuals)
    if path.is_file():
        try:
            cal = read_calibration(path)
            return cal, f"the catalogue's calibration ({cal.describe()}; {path.name}, stored)"
        except DataError:
            pass  # a damaged cache: fitted again below
    individuals = np.asarray(individuals, dtype=str)
    rows = left_out_queries(len(individuals), max_queries)
    counts = np.unique(individuals, return_counts=True)[1]
    if counts.max(initial=0) < 2 or counts.size < 2:
        return None, ("no calibration: the catalogue needs two photos of one whale and photos of two whales to "
                      "learn what a same-whale score looks like")
    if log:
        log(f"calibrating on the catalogue: {len(rows)} of its {len(individuals)} photos matched against it, "
            "each left out of its own row")
    scores = np.asarray(scores_of(rows), dtype=np.float32)
    try:
        cal = PairCalibration.fit(scores, individuals[rows], individuals, skip=rows)
    except DataError as exc:
        return None, f"no calibration: {exc}"
    path.parent.mkdir(exist_ok=True)
    write_json_atomic(path, {"settings": settings, "photos": int(len(individuals)), "queries": int(len(rows)),
                             "calibration": cal.to_dict()})
    drop_earlier(path)  # this setting's calibration of an earlier catalogue
    return cal, f"the catalogue's calibration ({cal.describe()}; fitted now on {len(rows)} left-out photos)"
