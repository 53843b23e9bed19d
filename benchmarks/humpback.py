"""Real humpback flukes: every method through the user's own commands, on Kaggle-like splits. Not a test.

    python benchmarks/humpback.py --out runs/humpback [--seeds 0,1,2] [--methods keypoints,learned,fusion]

Data: ``../shared/data/humpback/{train.csv,train/}`` beside the checkout (real 2019 competition photos,
half of its identified individuals; read in place, copied under ``--out``; the benchmark prints a
message and exits 0 when absent). Nothing of it is committed.

The split (:func:`split_flukes`, one per ``--seeds`` value), as Kaggle's 2019 test set was made:

* known queries: one photo drawn per individual with two or more photos (the rest stay in ``train``);
* ``new_whale`` queries: half of the one-photo individuals (their id appears nowhere in ``train``);
* the other one-photo individuals stay in ``train`` labelled ``new_whale`` (as Kaggle's unidentified
  photos): the fold rules turn them into the open-set part of validation, so ``new_whale``'s threshold
  is tuned on validation queries whose individuals the gallery lacks, never on the test queries (about
  10% of fold 0's validation queries: the data has no more one-photo individuals to give; the test
  set's share is about 26%, Kaggle's 27.6%). The gallery's one-photo individuals are those with two
  photos, one of which became a query.

:func:`check_disjoint` refuses a split whose ``new_whale`` queries share an id with ``train`` or whose
query photos share their bytes with a ``train`` photo (the data holds a few byte-identical photos:
such a query is moved to ``train``).

Methods, each a user's command line (printed with its wall time), scored from its submission:

* ``keypoints``: ``whale score --matcher keypoints --data D --out K --fold 0`` then
  ``whale ensemble K --tune --out S.csv`` and ``whale submission check S.csv``;
* ``learned``: ``whale train --config configs/flukes_cpu.yaml --fold 0 --data D --out L`` (it scores its
  fold and the test set when done), then the same ensemble and check;
* ``fusion``: ``whale ensemble K L --tune --tune-weights --out S.csv``;
* references measured in the same run: raw pixels (32 px gray cosine nearest neighbour, the threshold
  tuned on the same validation fold, :func:`benchmarks.common.evaluate_competition`) and the
  submission of ``new_whale`` alone for every photo.

Reported per method: MAP@5 over all queries and split into known / ``new_whale`` queries, top-1 and
top-5 of the known queries (the per-id maximum of the test scores, ``new_whale`` left out), the
``new_whale`` share at rank 1, and the wall time of each command. With several seeds: mean +- sd.
The last stdout line is ``{"benchmark": "humpback", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402
from whale import NEW_WHALE  # noqa: E402

METHODS = ("keypoints", "learned", "fusion", "pixels", "all_new_whale")
LEARNED_CONFIG = "configs/flukes_cpu.yaml"


def read_source(root: Path) -> pd.DataFrame:
    """``Image, Id, path`` rows of ``root/train.csv`` whose photo exists under ``root/train``."""
    df = pd.read_csv(root / "train.csv")
    if list(df.columns[:2]) != ["Image", "Id"]:
        raise ValueError(f"{root / 'train.csv'}: expected columns Image,Id, found {','.join(df.columns)}")
    df["path"] = [root / "train" / n for n in df["Image"]]
    missing = [str(p) for p in df["path"] if not p.is_file()]
    if missing:
        raise ValueError(f"{root / 'train.csv'}: {len(missing)} photos missing under train/, e.g. {missing[0]}")
    return df


def split_flukes(df: pd.DataFrame, seed: int) -> tuple[list[tuple], list[tuple]]:
    """``(train, test)`` lists of ``(photo path, id)`` (module docstring); test ids go to test_solution.csv."""
    rng = np.random.default_rng(seed)
    groups = df.groupby("Id").indices
    names = sorted(groups)
    test_rows, train_rows = [], []
    singles = []
    for name in names:
        rows = groups[name]
        if len(rows) == 1:
            singles.append(rows[0])
            continue
        q = int(rng.choice(rows))
        test_rows.append(q)
        train_rows += [int(r) for r in rows if r != q]
    singles = rng.permutation(singles)
    n_new = len(singles) // 2
    new_queries, unidentified = singles[:n_new], singles[n_new:]
    paths, ids = df["path"].to_numpy(), df["Id"].to_numpy()
    train = [(paths[r], ids[r]) for r in train_rows] + [(paths[r], NEW_WHALE) for r in unidentified]
    test = [(paths[r], ids[r]) for r in test_rows] + [(paths[r], NEW_WHALE) for r in new_queries]
    order = rng.permutation(len(test))  # known and new queries mixed, as in a real test folder
    return train, [test[i] for i in order]


def check_disjoint(train: list[tuple], test: list[tuple], log=print) -> tuple[list[tuple], list[tuple]]:
    """The split with every query's bytes absent from ``train`` (such queries join ``train``), checked.

    Raises:
        ValueError: a ``new_whale`` query whose photo's true id is in ``train`` (by id), or, after the move,
            any byte-identical photo on both sides (by SHA-1 of the file).
    """
    digest_train = set(common.byte_digests([p for p, _ in train]))
    digest_test = common.byte_digests([p for p, _ in test])
    moved = [t for t, d in zip(test, digest_test) if d in digest_train]
    if moved:
        log(f"split: {len(moved)} query photos have a byte-identical twin in train: moved to train")
        test = [t for t, d in zip(test, digest_test) if d not in digest_train]
        train = train + [(p, i) for p, i in moved]
    return train, test


def assert_disjoint(comp_dir: Path, truth_ids: dict[str, str]) -> dict:
    """Check the written folder itself: ``new_whale`` queries' individuals absent from train.csv, no query
    photo byte-identical to a train photo. Returns counts for the report; raises ValueError otherwise."""
    train = pd.read_csv(comp_dir / "train.csv")
    test_names = sorted(truth_ids)
    d_train = set(common.byte_digests([comp_dir / "train" / n for n in train["Image"]]))
    d_test = common.byte_digests([comp_dir / "test" / n for n in test_names])
    shared = sum(d in d_train for d in d_test)
    if shared:
        raise ValueError(f"{comp_dir}: {shared} test photos are byte-identical to train photos")
    return {"train": len(train), "test": len(test_names),
            "known_queries": sum(v != NEW_WHALE for v in truth_ids.values()),
            "new_queries": sum(v == NEW_WHALE for v in truth_ids.values())}


def build_split(source: Path, out: Path, seed: int, log=print) -> tuple[Path, dict[str, str], dict[str, str]]:
    """The seed's competition folder ``out`` and ``(folder, truth, true_individual)``: the test image ->
    truth (its id or ``new_whale``) and -> its real individual (to check new queries' ids against train)."""
    df = read_source(source)
    train, test = split_flukes(df, seed)
    train, test = check_disjoint(train, test, log)
    source_id = dict(zip(df["path"].astype(str), df["Id"]))
    comp = common.build_competition(out, train, test, suffix=".jpg")
    truth = dict(zip(*pd.read_csv(comp / "test_solution.csv")[["Image", "Id"]].to_numpy().T))
    individual = {f"te{i:05d}.jpg": source_id[str(p)] for i, (p, _) in enumerate(test)}
    train_individuals = {source_id[str(p)] for p, _ in train}
    clash = [n for n, t in truth.items() if t == NEW_WHALE and individual[n] in train_individuals]
    if clash:
        raise ValueError(f"{comp}: new_whale queries whose individual is in train, e.g. {clash[0]}")
    return comp, truth, individual
