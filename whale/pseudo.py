"""Pseudo-label rounds: confident test predictions become training rows of a new competition folder.

One round: the test scores of one or more runs (``RUN/scores/test.npz``, averaged as
``ensemble.py`` does) give every test image its best id and that id's score (per-id
maximum, :mod:`whale.ranking.topids`); test images whose score is at least ``min_score``
join ``train.csv`` of a new folder with that id and ``Origin = pseudo``. The fold rules never
validate on pseudo rows (:mod:`whale.data.folds`), so validation MAP@5 stays honest; the next
round trains ``run_fold.py`` on the new folder. ``new_whale`` is never a pseudo label, and a
test image already pseudo-labelled by an earlier round keeps its first label.

The round manager: ``pseudo_rounds.json`` in the new folder lists every round so far (those
of the source folder first): its number, the source folder, the runs, ``min_score`` and each
test image added with its id and score.

Command line::

    python -m whale.pseudo --runs RUN [RUN ...] --data DIR --min-score S --out DIR2
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from whale import command
from whale.core.errors import ConfigError, DataError

ROUNDS_JSON = "pseudo_rounds.json"


def best_ids(scores: np.ndarray, gallery_ids) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best id and its score: ``([n_query] str, [n_query] float32)``.

    ``scores`` ``[n_query, n_gallery]`` float; ``gallery_ids`` ``[n_gallery]`` str (``new_whale``
    columns are never an answer).
    """
    from whale.ranking import top_id_scores

    names, idx, vals = top_id_scores(scores, gallery_ids, k=1)
    return names[idx[:, 0]].astype(str), vals[:, 0]


def read_rounds(folder) -> list[dict]:
    """The rounds recorded in ``folder/pseudo_rounds.json`` (``[]`` when there is none)."""
    path = Path(folder) / ROUNDS_JSON
    if not path.is_file():
        return []
    try:
        rounds = json.loads(path.read_text())["rounds"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: expected a JSON object with a 'rounds' list ({exc})") from None
    return list(rounds)


def pseudo_rows(comp, test_images, ids, scores, min_score: float) -> pd.DataFrame:
    """Rows to add: test images with ``scores >= min_score`` that are not in ``comp``'s train.csv yet.

    Returns a DataFrame ``Image, Id, Origin (= pseudo), score``, by descending score.
    """
    from whale.data.competition import ORIGIN

    if not 0.0 <= float(min_score) <= 1.0:
        raise ConfigError(f"--min-score: expected a probability in [0, 1], received {min_score!r}")
    present = set(comp.train["Image"])
    rows = pd.DataFrame({"Image": list(test_images), "Id": ids, ORIGIN: "pseudo", "score": scores})
    rows = rows[(rows["score"] >= float(min_score)) & ~rows["Image"].isin(present)]
    return rows.sort_values(["score", "Image"], ascending=[False, True], ignore_index=True)


def pseudo_round(runs, data, min_score: float, out, log=print) -> pd.DataFrame:
    """One round (module docstring): writes the folder ``out`` and returns the rows added."""
    from whale.data import load_competition
    from whale.data.competition import ORIGIN
    from whale.data.derive import derive_competition
    from whale.data.fingerprint import refuse_other_photos
    from whale.ensemble.combine import average_score_files
    from whale.core.files import write_json_atomic
    from whale.inference.scorefile import score_path

    comp = load_competition(data)
    if not comp.test_images:
        raise DataError(f"{Path(data) / 'test'}: no test images to pseudo-label")
    refuse_other_photos([(f"--runs {r}", Path(r)) for r in runs], data)
    sf = average_score_files([score_path(r, "test") for r in runs])
    missing = sorted(set(comp.test_images) - set(sf.query))
    if missing:
        raise DataError(f"{sf.path}: no scores for {len(missing)} test image(s) of {data}, e.g. {missing[0]!r}")
    ids, scores = best_ids(sf.scores, sf.gallery_ids)
    added = pseudo_rows(comp, sf.query, ids, scores, min_score)
    train = comp.train if ORIGIN in comp.train.columns else comp.train.assign(**{ORIGIN: "train"})
    derive_competition(comp, out, pd.concat([train, added[["Image", "Id", ORIGIN]]], ignore_index=True))
    rounds = read_rounds(data)
    rounds.append({"round": len(rounds) + 1, "data": str(data), "runs": [str(r) for r in runs],
                   "min_score": float(min_score), "n_added": int(len(added)),
                   "added": [{"image": r.Image, "id": r.Id, "score": round(float(r.score), 6)}
                             for r in added.itertuples()]})
    write_json_atomic(Path(out) / ROUNDS_JSON, {"rounds": rounds})
    log(f"round {len(rounds)}: {len(added)} of {len(sf.query)} test images pseudo-labelled at score >= "
        f"{min_score:g}; wrote {out}")
    return added


PROG = "python -m whale.pseudo"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.pseudo`` and ``whale pseudo`` (:mod:`whale.command`)."""
    p.description = __doc__.splitlines()[0]
    p.add_argument("--runs", nargs="+", required=True, type=Path, help="run folders with scores/test.npz")
    p.add_argument("--data", required=True, type=Path, help="the competition folder the runs trained on")
    p.add_argument("--min-score", required=True, type=float, help="add test images scoring at least this")
    p.add_argument("--out", required=True, type=Path, help="the new competition folder")


def run(args: argparse.Namespace) -> int:
    """One pseudo-label round as ``args`` say; raises :class:`whale.core.errors.WhaleError` on bad input."""
    pseudo_round(args.runs, args.data, args.min_score, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
