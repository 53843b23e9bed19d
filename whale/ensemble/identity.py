"""Which runs an ensemble mixes: the identity table of its score files and the checks that refuse bad mixes.

Every score file written by this version records the run that wrote it
(:mod:`whale.inference.scorefile`: ``run_id``, config hash, fold, seed, checkpoint, epoch, code
revision, Keras backend) and, for validation files, the images the model trained on.
:func:`identity_table` prints them; :func:`check_inputs` refuses

- two files of the same run and fold (one run counted twice: its weight doubled, its
  validation queries scored twice); a run's ``snapshot: true`` models (``scores/384/``) are
  models of their own and may join it;
- a validation file whose queries include images its model trained on (a threshold tuned
  on it would be fitted on leaked labels), or whose queries overlap its own gallery;
- a run whose ``val.npz`` and ``test.npz`` were written by different runs or folds (:func:`check_pairs`: a
  threshold tuned on the one would be applied to the other);
- for ``--tune-weights``, validation files that do not score the same queries (:func:`check_same_queries`:
  runs of different folds or data).
- runs (trained, keypoint or joint) whose records of their data's image bytes (``data_images.json``) disagree on
  an image of one name (:func:`check_same_photos`: runs of two data folders that name their photos alike, e.g. two
  split draws).

Files written before identities were recorded pass with a warning: they cannot be checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.data.fingerprint import digests, read_data_images
from whale.inference.scorefile import different_writers, file_photos, first_names, read_header, run_folder

COLUMNS = ("run_id", "config_hash", "fold", "seed", "checkpoint", "epoch", "init_from", "git_revision", "backend")
"""The identity table's columns: fields of :data:`whale.inference.scorefile.IDENTITY_FIELDS`, in the table's order."""


def read_identities(paths: Sequence[Path]) -> list[dict | None]:
    """The recorded identity of each score file (None for files without one)."""
    return [read_header(Path(p), False)["identity"] for p in paths]


def identity_table(paths: Sequence[Path], identities: Sequence[dict | None]) -> list[str]:
    """Lines of a table: one row per score file, the columns of :data:`COLUMNS`."""
    rows = [["file", *COLUMNS]]
    for path, ident in zip(paths, identities):
        if ident is None:
            rows.append([str(path), "(not recorded: written by an older version)"] + [""] * (len(COLUMNS) - 1))
            continue
        vals = [ident.get(c) for c in COLUMNS]
        vals[COLUMNS.index("git_revision")] = str(vals[COLUMNS.index("git_revision")] or "")[:10]
        rows.append([str(path), *["" if v is None else str(v) for v in vals]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def check_inputs(paths: Sequence[Path], identities: Sequence[dict | None], log=print) -> None:
    """Refuse two files of the same run and fold; warn about files that cannot be checked.

    Raises:
        DataError: naming both files.
    """
    seen: dict[tuple, Path] = {}
    unknown = []
    for path, ident in zip(paths, identities):
        if ident is None or ident.get("run_id") is None:
            unknown.append(str(path))
            continue
        # A snapshot (scores/384/) is a model of its own: the run's other snapshots may join it.
        key = (ident["run_id"], ident.get("snapshot"), ident.get("fold"), ident.get("split"))
        if key in seen:
            differ = data_differences(seen[key], path)
            if differ:  # a copied run folder, or one config scored again on other data: say what differs
                raise DataError(f"{path}: the run (run_id {ident['run_id']}) and fold {ident.get('fold')} of "
                                f"{seen[key]}, scored on other data ({'; '.join(differ)}); one config and fold may "
                                "enter an ensemble once: leave one out, or make it a run of its own (another "
                                "config or run folder)")
            raise DataError(f"{path}: same run (run_id {ident['run_id']}) and fold {ident.get('fold')} as "
                            f"{seen[key]}; each run and fold (and each of its snapshots) may enter an ensemble once")
        seen[key] = path
    check_same_photos(paths)
    if unknown:
        log(f"warning: {len(unknown)} score file(s) record no run identity, so mixes and leaks cannot be "
            f"checked: {first_names(unknown)}; re-score them with `run_fold.py ... --score-only`")


def check_same_photos(paths: Sequence[Path]) -> None:
    """Refuse score files of runs whose data held other photos under the same names: each run folder's
    record of its images' bytes (``data_images.json``, :mod:`whale.data.fingerprint`), or the file's own record when
    it was written alone (:func:`whale.inference.scorefile.file_photos`), against the earlier files', name by name:
    trained runs, keypoint and joint score runs. Files without either (of other tools, or written before them) are
    checked by names only.

    Raises:
        DataError: naming both files and a few images whose bytes differ.
    """
    owner: dict[str, tuple[str, Path]] = {}
    for path in paths:
        changed: dict[Path, list[str]] = {}
        photos = file_photos(path) or digests(read_data_images(run_folder(path)))
        for name, bytes_digest in photos.items():
            if bytes_digest is None:
                continue
            known, first = owner.setdefault(name, (bytes_digest, path))
            if known != bytes_digest:
                changed.setdefault(first, []).append(name)
        if changed:  # the first earlier file it disagrees with
            first, names = next(iter(changed.items()))
            raise DataError(f"{path}: its run used other photos than {first}'s under the same names "
                            f"({len(names)} images differ in bytes, e.g. {first_names(sorted(names), 2)}); the runs "
                            "of an ensemble score one data folder: train or score them on one")


def data_differences(a: Path, b: Path) -> list[str]:
    """What differs between the data two score files of one run identity were scored on: the split seed, the
    gallery (its images, then their labels), the queries (their images, then their labels); empty when nothing
    does (one file of one run given twice)."""
    ha, hb = read_header(Path(a), False), read_header(Path(b), False)
    out = []
    seeds = [(h["identity"] or {}).get("seed") for h in (ha, hb)]
    if seeds[0] != seeds[1]:
        out.append(f"split seed {seeds[0]} vs {seeds[1]}")

    def compare(what, names_a, names_b, labels_a, labels_b):
        if len(names_a) != len(names_b) or set(names_a.tolist()) != set(names_b.tolist()):
            only = np.setxor1d(names_a, names_b)
            out.append(f"{what}: {len(names_a)} vs {len(names_b)} images, {only.size} in one only "
                       f"(e.g. {first_names(only, 2)})")
        elif labels_a is not None and labels_b is not None:
            by_name = dict(zip(names_b.tolist(), labels_b.tolist()))
            changed = [n for n, lab in zip(names_a.tolist(), labels_a.tolist()) if by_name[n] != lab]
            if changed:
                out.append(f"{what} labels: {len(changed)} images labelled otherwise (e.g. {first_names(changed, 2)})")

    compare("gallery", ha["gallery"], hb["gallery"], ha["gallery_ids"], hb["gallery_ids"])
    compare("queries", ha["query"], hb["query"], ha.get("query_ids"), hb.get("query_ids"))
    return out


def check_no_leak(paths: Sequence[Path]) -> None:
    """Refuse validation files whose queries are images the scoring model trained on.

    A file's queries must be disjoint from its ``trained_on`` images (when recorded) and from
    its gallery (the fold's training images).

    Raises:
        DataError: naming the file and a few leaked images.
    """
    for path in paths:
        names = read_header(Path(path), True)
        for what, other in (("trained on", names.get("trained_on")), ("gallery", names["gallery"])):
            if other is None:
                continue
            leaked = np.intersect1d(names["query"], other)
            if leaked.size:
                fold = (names["identity"] or {}).get("fold")
                raise DataError(
                    f"{path}: {leaked.size} validation queries are images the model "
                    + ("trained on" if what == "trained on" else "has in its gallery (its fold's training images)")
                    + f": {first_names(leaked)}; tuning on them would fit the threshold on leaked labels "
                    f"(score the run's own fold{'' if fold is None else f', {fold}'}: run_fold.py --score-only "
                    "--fold as in its run.json)")


def check_pairs(runs: Sequence[Path], test_paths: Sequence[Path], val_paths: Sequence[Path]) -> None:
    """Refuse a run whose validation and test score files record different writers (``run_id`` or ``fold``): a
    score folder holding an earlier score run's ``val.npz`` beside a new ``test.npz``. Files without a recorded
    identity, and runs missing one of the two, pass (the callers name missing files).

    Raises:
        DataError: naming both files and their writers.
    """
    for run, test, val in zip(runs, test_paths, val_paths):
        if not (Path(test).is_file() and Path(val).is_file()):
            continue
        who = different_writers(*read_identities([test, val]))
        if who:
            raise DataError(f"{run}: {val} was written by run {who[1][0]} (fold {who[1][1]}), {test} by run "
                            f"{who[0][0]} (fold {who[0][1]}): a threshold or weights tuned on that validation "
                            "would not fit these test scores; score the run again into a new folder (whale score "
                            "... --fold K, run_fold.py --score-only)")


def check_same_queries(paths: Sequence[Path], identities: Sequence[dict | None], what: str = "--tune-weights") -> None:
    """Refuse validation files that do not hold the same set of queries (runs of different folds, seeds or data):
    ``what`` weighs the runs against each other on queries every one of them scored.

    Raises:
        DataError: naming the first file that differs from the first one, both folds and the queries shared.
    """
    ref = set(read_header(Path(paths[0]), True)["query"].tolist())
    for path, ident in zip(paths[1:], identities[1:]):
        queries = set(read_header(Path(path), True)["query"].tolist())
        if queries != ref:
            folds = [(i or {}).get("fold") for i in (identities[0], ident)]
            raise DataError(f"{what}: {path} validates {len(queries)} queries (fold {folds[1]}), {paths[0]} "
                            f"{len(ref)} (fold {folds[0]}), {len(queries & ref)} of them shared: the weights are "
                            "tuned on queries every run scored; score every run on the same fold of the same data "
                            "(same --fold and --seed)")
