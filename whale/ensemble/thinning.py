"""``whale ensemble --thin-validation``: the runs calibrated and the threshold tuned on a validation drawn as the test is.

A fold's validation queries are photos of individuals with three or more photos (:mod:`whale.data.folds`), so each
keeps two or more in the gallery, where a test query's individual may keep one. A fusion calibrated and a
``new_whale`` threshold tuned there never see a known whale with one gallery photo. With ``--thin-validation``
each run's validation file is replaced by its **thinned view** before anything is read
(:func:`whale.identify.thin.write_view`): each known validation query, with the share a test split drawn from the
fold's gallery gives (:func:`whale.identify.thin.mirror_share`), keeps one random gallery photo of its individual,
the others scored at its row's lowest. Every run whose validation holds the same queries hides the same photos (the
draw seeded by ``--thin-seed``); runs of other folds get their own draw. The test files are not touched.

The views are kept beside the submission, ``NAME.thinned/`` (each run's folder ``<i>-<run>`` with ``val.npz``, its
``test.npz`` linked and its ``run.json``; ``hidden.json``: the share, the seed and each query's hidden photos), so a
figure can be read again from them. Measured in docs/humpback.md ("The 40-epoch network with both checked matchers").
A joint run whose check was fitted on a thinned validation (``check.validation: thinned``, seeded by its ``--seed``)
is read as it is where it hid the same photos (``--thin-seed`` its seed), and refused otherwise.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError, DataError
from whale.core.files import write_json_atomic
from whale.ensemble.rule import Rule, recorded_sample
from whale.identify.thin import hidden_names, hidden_photos, mirror_share, write_view
from whale.inference.scorefile import read_header, score_path

HIDDEN = "hidden.json"


def views_folder(rule: Rule) -> Path:
    """The views' folder beside the submission: ``NAME.csv`` -> ``NAME.thinned``."""
    return rule.beside_out(".thinned")


def view_of(folder: Path, index: int, run: Path) -> Path:
    """Run number ``index`` (``run``)'s thinned view in the views' ``folder``."""
    return Path(folder) / f"{index}-{Path(run).name}"


def thinned_already(run: Path) -> dict | None:
    """A joint run's record of its thinned validation (``OUT/thinned/hidden.json``: the share, the draw's seed and
    each query's hidden photos) where its check was fitted there (``check.validation: thinned``), else None.

    Raises:
        DataError: its ``run.json`` says so and the record is missing.
    """
    meta = Path(run) / "run.json"
    if not meta.is_file() or "thinned" not in json.loads(meta.read_text() or "{}"):
        return None
    path = Path(run) / "thinned" / HIDDEN
    if not path.is_file():
        raise DataError(f"{meta}: its validation was thinned, but {path} (the photos hidden from it) is missing")
    return json.loads(path.read_text())


def check_same_draw(run: Path, record: dict, names: dict[str, list[str]], seed: int) -> None:
    """Refuse a run thinned already whose hidden photos are not ``names``: its validation cannot be thinned again
    (its check's cross-fitted scores are of that draw), and the runs must hide the same photos."""
    theirs = {q: sorted(g) for q, g in record.get("hidden", {}).items()}
    if theirs != {q: sorted(g) for q, g in names.items()}:
        raise ConfigError(f"--thin-validation --thin-seed {seed}: {run} fitted its check on a validation thinned by "
                          f"another draw (seed {record.get('seed')}, {Path(run) / 'thinned' / HIDDEN}): give "
                          f"--thin-seed {record.get('seed')} so every run hides the same photos")


def thin_rule(rule: Rule, seed: int, log=print) -> Rule:
    """``rule`` with each run replaced by its thinned view, written under :func:`views_folder` (module docstring).

    Raises:
        ConfigError: a run thinned already by another draw, or a views' folder that is not the ensemble's.
        DataError: a run without a validation file, or one without the queries' ids.
    """
    if rule.fusion == "scores" and not (rule.tune or rule.calibrate or rule.tune_weights):
        raise ConfigError("--thin-validation changes what is read from the validation files: give --tune, "
                          "--calibrate, --tune-weights or a calibrated --fusion (logodds, mean)")
    already = [thinned_already(run) for run in rule.runs]
    out = views_folder(rule)
    if out.exists():
        if not (out / HIDDEN).is_file():
            raise ConfigError(f"--thin-validation writes its views to {out}, which exists and is not an earlier "
                              f"view folder (no {HIDDEN}): move it or name another --out")
        shutil.rmtree(out)  # an earlier --thin-validation's views, rewritten whole
    paths = [score_path(run, "val") for run in rule.runs]
    headers = []  # the names only: write_view reads each matrix once
    for run, path in zip(rule.runs, paths):
        if not path.is_file():
            raise DataError(f"--thin-validation: {run} has no validation scores ({path}) to thin")
        headers.append(read_header(path, need_query_ids=True))
    groups: dict[tuple, list[int]] = {}
    for i, h in enumerate(headers):
        groups.setdefault(tuple(map(str, h["query"])), []).append(i)
    open_label = rule.fmt.open_label
    record, views = [], []
    for members in groups.values():
        first = headers[members[0]]
        gallery_ids, truth = np.asarray(first["gallery_ids"], str), np.asarray(first["query_ids"], str)
        share = mirror_share(gallery_ids, open_label)
        hidden = hidden_photos(gallery_ids, truth, share, seed, open_label)
        names = hidden_names(hidden, first["query"], first["gallery"])
        known = int((truth != open_label).sum())
        log(f"validation thinned as the test is drawn (share {share:.3f}, seed {seed}): {len(hidden)} of {known} "
            f"known queries keep one gallery photo, in " + ", ".join(str(rule.runs[i]) for i in members))
        for i in members:
            run = rule.runs[i]
            if already[i] is not None:
                check_same_draw(run, already[i], names, seed)
                log(f"  {run}: thinned by this draw already (its check fitted there), its validation read as it is")
                views.append((i, run))
                continue
            test = score_path(run, "test")
            views.append((i, write_view(run, view_of(out, i, run), names, paths[i],
                                        test if test.is_file() else None)))
        record.append({"runs": [str(rule.runs[i]) for i in members], "share": share, "known": known,
                       "hidden": names})
    write_json_atomic(out / HIDDEN, {"seed": seed, "groups": record})
    log(f"the runs' thinned views in {out}")
    sample = rule.sample if rule.sample is not None else recorded_sample(rule.runs)
    return replace(rule, runs=tuple(view for _, view in sorted(views)), sample=sample)
