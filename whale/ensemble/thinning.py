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
A joint run whose check was fitted on a thinned validation (``check.validation: thinned``) already has one and is
refused: fuse its ``OUT/thinned/`` views instead.
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
from whale.inference.scorefile import load_score_file, score_path

HIDDEN = "hidden.json"


def views_folder(rule: Rule) -> Path:
    """The views' folder beside the submission: ``NAME.csv`` -> ``NAME.thinned``."""
    return rule.beside_out(".thinned")


def view_of(folder: Path, index: int, run: Path) -> Path:
    """Run number ``index`` (``run``)'s thinned view in the views' ``folder``."""
    return Path(folder) / f"{index}-{Path(run).name}"


def thin_rule(rule: Rule, seed: int, log=print) -> Rule:
    """``rule`` with each run replaced by its thinned view, written under :func:`views_folder` (module docstring).

    Raises:
        ConfigError: a run that already holds a thinned validation, or a views' folder that is not the ensemble's.
        DataError: a run without a validation file, or one without the queries' ids.
    """
    if rule.fusion == "scores" and not (rule.tune or rule.calibrate or rule.tune_weights):
        raise ConfigError("--thin-validation changes what is read from the validation files: give --tune, "
                          "--calibrate, --tune-weights or a calibrated --fusion (logodds, mean)")
    for run in rule.runs:
        meta = Path(run) / "run.json"
        if meta.is_file() and "thinned" in json.loads(meta.read_text() or "{}"):
            raise ConfigError(f"--thin-validation: {run} fitted its check on a thinned validation already "
                              f"(check.validation: thinned); fuse its views in {Path(run) / 'thinned'} without "
                              "--thin-validation")
    out = views_folder(rule)
    if out.exists():
        if not (out / HIDDEN).is_file():
            raise ConfigError(f"--thin-validation writes its views to {out}, which exists and is not an earlier "
                              f"view folder (no {HIDDEN}): move it or name another --out")
        shutil.rmtree(out)  # an earlier --thin-validation's views, rewritten whole
    files = []
    for run in rule.runs:
        path = score_path(run, "val")
        if not path.is_file():
            raise DataError(f"--thin-validation: {run} has no validation scores ({path}) to thin")
        files.append(load_score_file(path, need_query_ids=True))
    groups: dict[tuple, list[int]] = {}
    for i, f in enumerate(files):
        groups.setdefault(tuple(map(str, f.query)), []).append(i)
    open_label = rule.fmt.open_label
    record, views = [], []
    for members in groups.values():
        first = files[members[0]]
        gallery_ids, truth = np.asarray(first.gallery_ids, str), np.asarray(first.query_ids, str)
        share = mirror_share(gallery_ids, open_label)
        hidden = hidden_photos(gallery_ids, truth, share, seed, open_label)
        names = hidden_names(hidden, first.query, first.gallery)
        known = int((truth != open_label).sum())
        log(f"validation thinned as the test is drawn (share {share:.3f}, seed {seed}): {len(hidden)} of {known} "
            f"known queries keep one gallery photo, in " + ", ".join(str(rule.runs[i]) for i in members))
        for i in members:
            run = rule.runs[i]
            test = score_path(run, "test")
            views.append((i, write_view(run, view_of(out, i, run), names, files[i].path,
                                        test if test.is_file() else None)))
        record.append({"runs": [str(rule.runs[i]) for i in members], "share": share, "known": known,
                       "hidden": names})
    write_json_atomic(out / HIDDEN, {"seed": seed, "groups": record})
    log(f"the runs' thinned views in {out}")
    sample = rule.sample if rule.sample is not None else recorded_sample(rule.runs)
    return replace(rule, runs=tuple(view for _, view in sorted(views)), sample=sample)
