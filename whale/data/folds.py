"""The paper's 4-fold split of the training images.

Rules (Wang, Solovyev et al. 2020, section on validation):

* ids with 1 image: never validated (fold -1); they still serve as training images.
* ids with 2 images: training only (fold -1).
* ids with 3 images: the images go to 3 distinct folds, so a validation fold holds at most
  one of them and training keeps the other two. Which 3 folds is drawn at random, leaving out
  the fold that currently holds the most validation images (balance).
* ids with more than 3 images: shuffled and dealt round-robin over all folds, starting from
  the folds that currently hold the fewest images, so every fold gets at least one image.
* ``new_whale`` images: each fold receives ``round(known_k / 3)`` of them, where ``known_k``
  is its number of known-id validation images, so new_whale makes about 25% of the fold (the
  test set has about 27.6%). The rest get -1. Training never uses new_whale images.
* rows whose ``Origin`` column (optional) says ``pseudo`` or ``duplicate``: never validated
  (fold -1), and left out of the draw above; they only train.

The open-set label is the format's (:attr:`whale.formats.Format.open_label`: ``new_whale``
in 2019, ``new_individual`` in 2022). A format whose ``train.csv`` holds no open-set rows
(Happywhale 2022, :attr:`whale.formats.Format.singletons_open`) lets the ids with one image
play that part: they are shared out as above, and :func:`split` labels a validation image
whose id has no training image in the fold with the open-set label (its truth for that fold).

The assignment depends only on the (Image, Id) content and the seed, not on the row order.

CLI: ``python -m whale.data.folds --data DIR [--seed S] [--folds N]`` prints :func:`fold_summary`.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

# ``python -m whale.data.folds``: the package ``whale.data`` imports this module before runpy
# runs it as ``__main__``, and runpy warns about exactly that on every call. The second copy is
# harmless (the CLI only prints), so that one warning, and no other, is silenced here.
warnings.filterwarnings("ignore", message=r"'whale\.data\.folds' found in sys\.modules after import of package",
                        category=RuntimeWarning)
from whale.data.competition import ORIGIN
from whale.core.errors import DataError
from whale.formats import Format, get_format

NEW_WHALE_SHARE = 0.25
"""Target share of new_whale images in each validation fold."""


def _check_frame(train_df: pd.DataFrame) -> None:
    if not isinstance(train_df, pd.DataFrame):
        raise TypeError(f"train_df must be a pandas DataFrame, got {type(train_df).__name__}")
    missing = [c for c in ("Image", "Id") if c not in train_df.columns]
    if missing:
        raise DataError(
            f"train_df: missing column(s) {', '.join(missing)}; expected Image, Id, "
            f"found {', '.join(map(str, train_df.columns)) or 'no columns'}"
        )
    if not train_df.index.is_unique:
        raise DataError("train_df: the index has duplicate labels; expected a unique index (reset_index first)")


def _least_loaded(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Fold numbers ordered by ascending count, ties broken at random."""
    return np.lexsort((rng.permutation(len(counts)), counts))


def open_rows(train_df: pd.DataFrame, fmt: str | Format | None = None) -> np.ndarray:
    """``[n]`` bool: the rows that stand for unseen individuals in validation (module docstring).

    The rows labelled with the format's open-set label, and with
    :attr:`whale.formats.Format.singletons_open` also the rows of ids seen once.
    """
    fmt = get_format(fmt)
    ids = train_df["Id"].astype(str).to_numpy()
    is_open = ids == fmt.open_label
    if fmt.singletons_open and len(ids):
        _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        is_open |= counts[inverse] == 1
    return is_open


N_FOLDS = 4
"""Folds of the paper's rules: ``--fold`` 0..3 validates one of them, -1 trains on everything."""


def assign_folds(train_df: pd.DataFrame, n_folds: int = N_FOLDS, seed: int = 0,
                 fmt: str | Format | None = None) -> pd.Series:
    """Assign each training image a validation fold by the paper's rules (module docstring).

    Args:
        train_df: DataFrame with columns ``Image`` and ``Id`` (str) and a unique index.
        n_folds: number of folds, >= 3 (the paper uses 4).
        seed: seed of the ``np.random.Generator`` that draws the assignment.
        fmt: the competition format (:mod:`whale.formats`; None = 2019's): its open-set label.

    Returns:
        ``pd.Series`` of ``int64`` named ``fold``, index aligned with ``train_df``: the fold
        ``0..n_folds-1`` in which the image is validated, or -1 if it is never validated.
    """
    _check_frame(train_df)
    if int(n_folds) != n_folds or n_folds < 3:
        raise ValueError(f"n_folds must be an integer >= 3 (ids with 3 images need 3 folds), got {n_folds!r}")
    n_folds = int(n_folds)
    fmt = get_format(fmt)
    rng = np.random.default_rng(seed)

    # Positions sorted by (Id, Image): the draw below does not depend on the row order.
    ids = train_df["Id"].astype(str).to_numpy()
    images = train_df["Image"].astype(str).to_numpy()
    order = np.lexsort((images, ids))
    folds = np.full(len(train_df), -1, dtype=np.int64)
    counts = np.zeros(n_folds, dtype=np.int64)

    if ORIGIN in train_df.columns:  # pseudo labels and duplicates train only
        order = order[(train_df[ORIGIN].to_numpy()[order] == "train")]
    known = order[ids[order] != fmt.open_label]
    uniq, starts, sizes = np.unique(ids[known], return_index=True, return_counts=True)
    groups = [known[s : s + n] for s, n in zip(starts, sizes)]
    big = [g for g in groups if len(g) > 3]
    three = [g for g in groups if len(g) == 3]

    # Large ids first; the 3-image ids then even out the fold sizes.
    for gi in rng.permutation(len(big)):
        members = rng.permutation(big[gi])
        fold_order = _least_loaded(counts, rng)
        for j, pos in enumerate(members):
            f = fold_order[j % n_folds]
            folds[pos] = f
            counts[f] += 1
    for gi in rng.permutation(len(three)):
        members = rng.permutation(three[gi])
        chosen = _least_loaded(counts, rng)[:3]
        for pos, f in zip(members, chosen):
            folds[pos] = f
            counts[f] += 1

    new = rng.permutation(order[open_rows(train_df, fmt)[order]])
    ratio = NEW_WHALE_SHARE / (1.0 - NEW_WHALE_SHARE)
    targets = np.rint(counts * ratio).astype(np.int64)
    if targets.sum() > len(new):  # not enough open-set rows: share them out proportionally
        targets = np.floor(counts * len(new) / max(counts.sum(), 1)).astype(np.int64)
    start = 0
    for f in range(n_folds):
        folds[new[start : start + targets[f]]] = f
        start += targets[f]
    return pd.Series(folds, index=train_df.index, name="fold", dtype=np.int64)


def _check_folds(train_df: pd.DataFrame, folds: pd.Series) -> None:
    _check_frame(train_df)
    if not isinstance(folds, pd.Series) or not folds.index.equals(train_df.index):
        raise ValueError("folds must be a pd.Series with the same index as train_df (from assign_folds)")


def split(train_df: pd.DataFrame, folds: pd.Series, k: int,
          fmt: str | Format | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training and validation rows for fold ``k``.

    Args:
        train_df: DataFrame with columns ``Image``, ``Id``.
        folds: output of :func:`assign_folds` for ``train_df``.
        k: the validation fold (a fold with no rows gives an empty ``val_part``), or -1 to
            train on everything (empty ``val_part``).
        fmt: the competition format (None = 2019's): its open-set label.

    Returns:
        ``(train_part, val_part)``: ``val_part`` holds the rows with ``folds == k`` (open-set
        rows included); ``train_part`` every other row except open-set ones. Both keep
        ``train_df``'s index and columns. With :attr:`whale.formats.Format.singletons_open`,
        a ``val_part`` row whose id has no row in ``train_part`` carries the open-set label.
    """
    _check_folds(train_df, folds)
    if int(k) != k or k < -1:
        raise ValueError(f"fold k={k!r} is invalid; expected -1 (train on everything) or a fold >= 0")
    k = int(k)
    fmt = get_format(fmt)
    in_val = (folds == k).to_numpy() if k != -1 else np.zeros(len(train_df), dtype=bool)
    is_new = (train_df["Id"] == fmt.open_label).to_numpy()
    train_part, val_part = train_df[~in_val & ~is_new], train_df[in_val]
    if fmt.singletons_open:
        unseen = (~val_part["Id"].isin(set(train_part["Id"]))).to_numpy()
        if unseen.any():
            val_part = val_part.copy()
            val_part.loc[unseen, "Id"] = fmt.open_label
    return train_part, val_part


def fold_summary(train_df: pd.DataFrame, folds: pd.Series, n_folds: int | None = None,
                 fmt: str | Format | None = None) -> str:
    """A small text table, one line per fold (and one for -1 = never validated).

    Columns: known-id images, open-set images (:func:`open_rows`: ``new_whale``, or for 2022
    the ids seen once), their share, distinct known ids. Folds ``0..n_folds-1`` are listed
    even when empty (``n_folds`` defaults to the largest fold + 1).
    """
    _check_folds(train_df, folds)
    fmt = get_format(fmt)
    is_new = open_rows(train_df, fmt)
    f = folds.to_numpy()
    label, width = fmt.open_label, max(9, len(fmt.open_label))
    lines = [f"{'fold':>5} {'known':>7} {label:>{width}} {'nw share':>8} {'ids':>6}"]
    n_folds = int(max(f.max(initial=-1) + 1, n_folds or 0))
    for k in range(-1, n_folds):
        sel = f == k
        n_known = int((sel & ~is_new).sum())
        n_new = int((sel & is_new).sum())
        share = n_new / max(n_known + n_new, 1)
        n_ids = train_df["Id"].to_numpy()[sel & ~is_new]
        name = str(k) if k >= 0 else "-1*"
        lines.append(f"{name:>5} {n_known:>7} {n_new:>{width}} {share:>8.1%} {len(set(n_ids)):>6}")
    lines.append(f"* -1: never validated (ids with 1-2 images, unused {label})")
    return "\n".join(lines)


PROG = "python -m whale.data.folds"


def main(argv: list[str] | None = None) -> int:
    """CLI: print the fold summary of ``DIR/train.csv``; 2 on bad input (:func:`whale.command.main`)."""
    from whale import command

    return command.main(PROG, add_arguments, run, argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.data.folds`` and ``whale folds`` (:mod:`whale.command`)."""
    from whale.formats import FORMATS

    parser.description = __doc__.splitlines()[0]
    parser.add_argument("--data", required=True, type=Path, help="competition folder holding train.csv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--format", choices=list(FORMATS), default=None,
                        help="competition format (default: read from train.csv's header)")


def run(args: argparse.Namespace) -> int:
    """Print the fold summary ``args`` ask for; raises :class:`whale.core.errors.WhaleError` on bad input."""
    from whale.data.competition import read_train_csv
    from whale.formats import detect_format

    fmt = detect_format(args.data, args.format)
    train = read_train_csv(args.data / "train.csv", fmt)
    folds = assign_folds(train, n_folds=args.folds, seed=args.seed, fmt=fmt)
    print(fold_summary(train, folds, n_folds=args.folds, fmt=fmt))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
