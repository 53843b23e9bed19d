"""The sources of candidates: each trained run's score files, checked against the split they must score, and the
one shortlist per query that every source feeds.

A trained run (``whale train ... --fold K``) wrote ``val.npz`` (fold ``K``'s validation queries against the fold's
gallery) and ``test.npz`` (the test photos against every known training photo). Here they are read back
(:func:`run_scores`) and put in the order of the split the joint identification scores; a run of other data, of
another fold or seed, or one that trained on a validation query is refused with a line naming the run and the file,
since its scores would describe other photos, or describe as held out photos the network learned. Names alone do
not tell two folders apart when both name their photos alike (a split drawn again, ``tr00000.jpg``...), so the
bytes are compared too (:func:`check_photo_bytes`): each run's record of its data's images (``data_images.json``,
written by ``whale train``) against ``--data``'s.

A run's two files must come from one writer (:func:`check_runs`): the check is fitted on the validation scores and
applied to the test scores, so a folder holding one run's ``val.npz`` beside another's ``test.npz`` is refused. The
one pairing allowed is explicit, ``--with-run RUN:ALL``: ``RUN``'s validation scores with the test scores of ``ALL``,
a run of the same config trained on every known photo (``whale train --fold -1``), which scores the test as the
submission's network would; its fold and config are checked.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.data.fingerprint import refuse_other_photos
from whale.inference.scorefile import (different_writers, first_names, load_score_file, read_header,
                                      score_path)


def run_scores(run, split: str, query: Sequence[str], gallery: Sequence[str], fold: int) -> np.ndarray:
    """``[n_query, n_gallery] float32``: run ``run``'s ``split`` scores (``val`` or ``test``) in the order of
    ``query`` and ``gallery`` (image names).

    Raises:
        DataError: the file is missing or unreadable, holds other queries or gallery photos than the split's
            (other data), is of another fold, or (``val``) trained on one of its queries; each names the file.
    """
    path = score_path(run, split)
    f = load_score_file(path, need_query_ids=split == "val")
    for what, have, want in (("queries", f.query, query), ("gallery photos", f.gallery, gallery)):
        extra, missing = sorted(set(have) - set(want)), sorted(set(want) - set(have))
        if extra or missing:
            raise DataError(f"{path}: --with-run {run} scored other data: its {what} are not the {split} split's of "
                            f"--data (" + "; ".join(
                                [f"{len(extra)} not in it, e.g. {first_names(extra)}"] * bool(extra) +
                                [f"{len(missing)} missing, e.g. {first_names(missing)}"] * bool(missing)) +
                            "): train it on this folder and fold")
    ident = f.identity or {}
    if split == "val" and ident.get("fold") is not None and int(ident["fold"]) != fold:
        raise DataError(f"{path}: --with-run {run} is fold {ident['fold']}'s run, not fold {fold}'s")
    if f.trained_on is not None:
        leak = sorted(set(f.trained_on) & set(query)) if split == "val" else []
        if leak:
            raise DataError(f"{path}: --with-run {run} trained on {len(leak)} of the validation queries (e.g. "
                            f"{first_names(leak)}): its scores for them are not held out")
    rows = _positions(f.query, query)
    cols = _positions(f.gallery, gallery)
    return np.asarray(f.scores, np.float32)[np.ix_(rows, cols)]


def check_photo_bytes(runs: Sequence[TrainedRun], data_dir) -> dict | None:
    """Refuse a run trained on other photos under ``--data``'s names (:func:`whale.data.fingerprint.
    refuse_other_photos`: each run folder's ``data_images.json`` against ``data_dir``'s bytes); returns the data's
    image hashes when it read them, else None.

    Raises:
        DataError: an image named alike in both with other bytes; names the record, the run and such images.
    """
    return refuse_other_photos([(f"--with-run {r.spec}", f) for r in runs for f in dict.fromkeys((r.val, r.test))],
                               data_dir)


def _positions(names: np.ndarray, wanted: Sequence[str]) -> np.ndarray:
    at = {str(n): i for i, n in enumerate(names)}
    return np.array([at[str(w)] for w in wanted], np.int64)


def top_photos(scores: np.ndarray, n: int) -> list[np.ndarray]:
    """Per query, ``[min(n, n_g)] int64`` the gallery photos of the ``n`` highest scores (``scores`` ``[n_q, n_g]``;
    a zero score proposes nothing: a photo without a vote is no candidate)."""
    if n <= 0 or not scores.size:
        return [np.zeros(0, np.int64) for _ in range(len(scores))]
    n = min(n, scores.shape[1])
    top = np.argpartition(-scores, n - 1, axis=1)[:, :n]
    return [row[scores[i, row] > 0].astype(np.int64) for i, row in enumerate(top)]


def merge(*lists: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per query, the sorted union of every source's proposed photos (each photo once)."""
    return [np.unique(np.concatenate([np.asarray(src[i], np.int64) for src in lists])) for i in range(len(lists[0]))]


def shortlist_of(votes: Sequence[np.ndarray], runs: Sequence[np.ndarray], n_votes: int,
                 n_runs: int) -> list[np.ndarray]:
    """Per query, ``[c] int64`` the one shortlist every feature kind verifies: each kind's best ``n_votes`` photos by
    its LNBNN ``votes`` and each trained run's best ``n_runs`` by its scores (all ``[n_q, n_g]``), merged
    (:func:`top_photos`, :func:`merge`)."""
    return merge(*[top_photos(v, n_votes) for v in votes], *[top_photos(s, n_runs) for s in runs])


@dataclass(frozen=True)
class TrainedRun:
    """One ``--with-run``: the run whose ``val.npz`` the check is fitted on and the run whose ``test.npz`` it is
    applied to (the same folder, or ``ALL`` of ``RUN:ALL``); ``spec`` as given."""
    val: Path
    test: Path
    spec: str

    @property
    def full(self) -> bool:
        """Whether the test scores come from another run (``RUN:ALL``)."""
        return self.test != self.val

    def path(self, split: str) -> Path:
        """The folder whose ``split`` scores this source reads."""
        return self.val if split == "val" else self.test


def parse_run(spec) -> TrainedRun:
    """``RUN`` or ``RUN:ALL`` (a path holding no colon of its own) as a :class:`TrainedRun`."""
    spec = str(spec)
    head, sep, tail = spec.rpartition(":")
    if sep and head and tail and not Path(spec).exists():
        return TrainedRun(Path(head), Path(tail), spec)
    return TrainedRun(Path(spec), Path(spec), spec)


def check_runs(runs: Sequence) -> list[TrainedRun]:
    """``runs`` (``RUN`` or ``RUN:ALL``, :func:`parse_run`) checked: each ``RUN`` holding ``val.npz`` and a test file
    (its own ``test.npz``, or ``ALL``'s), both files of one writer, or ``ALL`` a ``--fold -1`` run of ``RUN``'s config.

    Raises:
        DataError: a missing file, a run given twice, a folder whose two files record different writers, an ``ALL``
            of a fold or of another config; each names the run and the file.
    """
    parsed = [parse_run(r) for r in runs]
    seen = set()
    for r in parsed:
        key = r.val.resolve()
        if key in seen:
            raise DataError(f"--with-run {r.val}: given twice")
        seen.add(key)
        for split in ("val", "test"):
            if not score_path(r.path(split), split).is_file():
                raise DataError(f"--with-run {r.spec}: {score_path(r.path(split), split)} is missing (a trained run "
                                f"of --fold K writes both its val.npz and test.npz when it finishes" +
                                (", a --fold -1 run its test.npz)" if r.full else ")"))
        _check_writers(r)
    return parsed


def _identity(path: Path) -> dict | None:
    return read_header(path, False)["identity"]


def _check_writers(r: TrainedRun) -> None:
    """Refuse a run whose test scores are not what its validation scores make the check fit (:func:`check_runs`)."""
    val, test = score_path(r.val, "val"), score_path(r.test, "test")
    vi, ti = _identity(val), _identity(test)
    if not r.full:
        who = different_writers(vi, ti)
        if who:
            raise DataError(f"--with-run {r.spec}: {val} was written by run {who[0][0]} (fold {who[0][1]}), {test} by "
                            f"run {who[1][0]} (fold {who[1][1]}): the check fitted on the one would be applied to the "
                            "other's scores; give a run trained on every known photo explicitly (--with-run RUN:ALL) "
                            "or score the run again into a new folder")
        return
    if ti is None or ti.get("fold") is None:
        raise DataError(f"--with-run {r.spec}: {test} records no fold: ALL of RUN:ALL must be a run trained on every "
                        "known photo (whale train --fold -1), scored by this version")
    if int(ti["fold"]) != -1:
        raise DataError(f"--with-run {r.spec}: {test} is fold {ti['fold']}'s run: ALL of RUN:ALL must be trained on "
                        "every known photo (whale train --fold -1)")
    hashes = [(vi or {}).get("config_hash"), ti.get("config_hash")]
    if None not in hashes and hashes[0] != hashes[1]:
        raise DataError(f"--with-run {r.spec}: {val} is of config {hashes[0]}, {test} of config {hashes[1]}: the check "
                        "fitted on the one's validation scores would be applied to another network's; train ALL "
                        "with RUN's config")
