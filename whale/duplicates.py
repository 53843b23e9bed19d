"""Duplicate and near-duplicate images by perceptual hash: train/train, train/test, conflicting labels.

The 2019 data holds the same photo more than once (re-uploads, re-encodings, small crops).
Each image gets a 64-bit perceptual hash (:func:`phash`: the signs of the lowest 8 x 8
DCT coefficients of a 32 x 32 gray thumbnail against their median); two images whose hashes
differ in at most ``threshold`` bits (Hamming distance) are duplicates. Re-encoding, resizing
and a brightness change move few bits; another sighting of the same whale moves many.

:func:`find_duplicates` lists train/train pairs (a *conflict* when their labels differ) and
train/test pairs; what can be done with them:

- ``merge_labels``: ids joined by a duplicate pair become one id (the one with most images;
  ``new_whale`` images take the known id of their duplicate);
- ``drop_from_validation``: all but one image of each duplicate group get ``Origin =
  duplicate``, so the fold rules never validate on an image whose copy is in training;
- ``answer_test``: a test image that duplicates a known-id training image gets that id first.

Command line::

    python -m whale.duplicates --data DIR [--threshold 6] [--report CSV]
        [--out DIR2 [--merge-labels] [--drop-val]] [--submission IN.csv --answered OUT.csv]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from whale import NEW_WHALE, command
from whale.core.errors import DataError

DEFAULT_THRESHOLD = 6
"""Hamming distance (bits of 64) at or under which two images are duplicates."""
_BLOCK = 2048


def phash(image: np.ndarray) -> np.uint64:
    """64-bit perceptual hash of ``image`` (uint8 ``[H, W]``, ``[H, W, 1]`` or RGB ``[H, W, 3]``).

    Gray 32 x 32 thumbnail -> 2-D DCT -> the 8 x 8 lowest frequencies -> bit ``k`` set where
    coefficient ``k`` (row-major) exceeds their median (the DC term left out of the median).
    """
    import cv2

    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim not in (2, 3):
        raise ValueError(f"phash: expected a uint8 image [H, W] or [H, W, C], received {img.dtype} {img.shape}")
    if img.ndim == 3:
        img = img[:, :, 0] if img.shape[2] == 1 else cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    small = cv2.resize(img, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)
    low = cv2.dct(small)[:8, :8].reshape(-1)
    bits = low > np.median(low[1:])
    return np.packbits(bits).view(">u8")[0].astype(np.uint64)  # coefficient 0 is the top bit


def hash_files(paths, progress: bool = True) -> np.ndarray:
    """``[n] uint64`` perceptual hashes of image files (whole images, decoded as RGB)."""
    from whale.data.images import load_image
    from whale.core.progress import progress_bar

    return np.array([phash(load_image(p, channels=3)) for p in progress_bar(paths, total=len(paths),
                                                                            desc="hashing", enabled=progress)],
                    dtype=np.uint64)


def _bits(h: np.ndarray) -> np.ndarray:
    """``[n, 64] float32`` 0/1 bits of ``[n] uint64`` hashes."""
    return np.unpackbits(np.asarray(h, dtype=">u8").view(np.uint8).reshape(-1, 8), axis=1).astype(np.float32)


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[n, m] int64`` Hamming distances between ``[n]`` and ``[m]`` uint64 hashes."""
    ba, bb = _bits(a), _bits(b)
    return np.rint(ba @ (1 - bb).T + (1 - ba) @ bb.T).astype(np.int64)


def close_pairs(a: np.ndarray, b: np.ndarray | None = None, threshold: int = DEFAULT_THRESHOLD):
    """Index pairs within ``threshold`` bits: ``(i [k] int64, j [k] int64, distance [k] int64)``.

    ``b=None`` compares ``a`` with itself and returns each pair once (``i < j``). Computed in
    blocks of rows, so ``n x m`` is never held whole.
    """
    if not 0 <= int(threshold) <= 64:
        raise ValueError(f"threshold: expected a number of bits in [0, 64], received {threshold!r}")
    same = b is None
    b = a if same else b
    out_i, out_j, out_d = [], [], []
    for start in range(0, len(a), _BLOCK):
        d = hamming(a[start:start + _BLOCK], b)
        i, j = np.nonzero(d <= threshold)
        i = i + start
        keep = i < j if same else np.ones(len(i), bool)
        out_i.append(i[keep])
        out_j.append(j[keep])
        out_d.append(d[i[keep] - start, j[keep]])
    cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)  # noqa: E731
    return cat(out_i), cat(out_j), cat(out_d)


@dataclass
class Duplicates:
    """What :func:`find_duplicates` found.

    ``train_pairs``: ``Image_a, Id_a, Image_b, Id_b, distance, conflict`` (labels differ);
    ``test_pairs``: ``Test, Image, Id, distance`` (test image duplicating a training image).
    """

    train_pairs: pd.DataFrame
    test_pairs: pd.DataFrame

    def summary(self) -> str:
        conflicts = int(self.train_pairs["conflict"].sum())
        known = self.test_pairs[self.test_pairs["Id"] != NEW_WHALE]["Test"].nunique()
        return (f"train/train duplicate pairs: {len(self.train_pairs)} ({conflicts} with conflicting labels); "
                f"train/test: {len(self.test_pairs)} ({known} test images duplicating a known-id training image)")


def find_duplicates(comp, threshold: int = DEFAULT_THRESHOLD, progress: bool = True,
                    hashes: tuple[np.ndarray, np.ndarray] | None = None) -> Duplicates:
    """Train/train and train/test duplicates of a :class:`whale.data.Competition`.

    ``hashes``: ``(train [n_train] uint64, test [n_test] uint64)`` when already computed.
    """
    train = comp.train.reset_index(drop=True)
    if hashes is None:
        hashes = (hash_files([comp.train_path(n) for n in train["Image"]], progress),
                  hash_files([comp.test_path(n) for n in comp.test_images], progress))
    h_train, h_test = hashes
    names, ids = train["Image"].to_numpy(), train["Id"].to_numpy()
    i, j, d = close_pairs(h_train, None, threshold)
    tt = pd.DataFrame({"Image_a": names[i], "Id_a": ids[i], "Image_b": names[j], "Id_b": ids[j],
                       "distance": d, "conflict": ids[i] != ids[j]})
    q, g, d = close_pairs(h_test, h_train, threshold) if len(h_test) else (np.zeros(0, int),) * 3
    test = np.asarray(comp.test_images, dtype=object)
    te = pd.DataFrame({"Test": test[q], "Image": names[g], "Id": ids[g], "distance": d})
    return Duplicates(tt.sort_values(["distance", "Image_a", "Image_b"], ignore_index=True),
                      te.sort_values(["Test", "distance", "Image"], ignore_index=True))


def _groups(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Union-find: each element of ``pairs`` -> the smallest member of its connected group."""
    parent: dict[str, str] = {}

    def root(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: root(x) for x in parent}


def merge_labels(train: pd.DataFrame, dups: Duplicates) -> pd.DataFrame:
    """``train`` with the ids joined by duplicate pairs merged (a copy; module docstring).

    The merged id of a group of ids is the one with most images (ties: the first by name);
    a ``new_whale`` image duplicating a known-id image takes the group's id.
    """
    out = train.copy()
    known = dups.train_pairs[(dups.train_pairs["Id_a"] != NEW_WHALE) & (dups.train_pairs["Id_b"] != NEW_WHALE)]
    group = _groups(list(zip(known["Id_a"], known["Id_b"])))
    counts = out["Id"].value_counts()
    members: dict[str, list[str]] = {}
    for i, r in group.items():
        members.setdefault(r, []).append(i)
    best = {r: min(m, key=lambda i: (-counts.get(i, 0), i)) for r, m in members.items()}
    rename = {i: best[r] for i, r in group.items()}
    out["Id"] = out["Id"].map(lambda i: rename.get(i, i))
    label = dict(zip(out["Image"], out["Id"]))
    image_group = _groups(list(zip(dups.train_pairs["Image_a"], dups.train_pairs["Image_b"])))
    group_id: dict[str, str] = {}
    for image, r in sorted(image_group.items()):
        if label[image] != NEW_WHALE:
            group_id.setdefault(r, label[image])
    out["Id"] = [group_id.get(image_group.get(n), i) if i == NEW_WHALE else i for n, i in zip(out["Image"], out["Id"])]
    return out


def drop_from_validation(train: pd.DataFrame, dups: Duplicates) -> pd.DataFrame:
    """``train`` with ``Origin = duplicate`` on all but the first (by name) image of each
    duplicate group, so that no fold validates on an image whose copy trains (a copy)."""
    from whale.data.competition import ORIGIN

    out = train.copy()
    if ORIGIN not in out.columns:
        out[ORIGIN] = "train"
    group = _groups(list(zip(dups.train_pairs["Image_a"], dups.train_pairs["Image_b"])))
    later = {image for image, r in group.items() if image != r}
    out.loc[out["Image"].isin(later), ORIGIN] = "duplicate"
    return out


def answer_test(images, predictions, dups: Duplicates) -> list[list[str]]:
    """``predictions`` (five labels per test image, in ``images`` order) with the id of a test
    image's closest known-id training duplicate moved to rank 1 (the rest shift down)."""
    known = dups.test_pairs[dups.test_pairs["Id"] != NEW_WHALE]
    direct = known.sort_values(["distance", "Image"]).drop_duplicates("Test").set_index("Test")["Id"].to_dict()
    out = []
    for name, pred in zip(images, predictions):
        pred = list(pred)
        if name in direct:
            pred = [direct[name]] + [p for p in pred if p != direct[name]]
        out.append(pred[:5])
    return out


PROG = "python -m whale.duplicates"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.duplicates`` and ``whale duplicates`` (:mod:`whale.command`)."""
    p.description = __doc__.splitlines()[0]
    p.add_argument("--data", required=True, type=Path, help="competition folder")
    p.add_argument("--threshold", type=int, default=DEFAULT_THRESHOLD, help="Hamming distance in bits")
    p.add_argument("--report", type=Path, help="write the pairs as CSV (train/train, then train/test)")
    p.add_argument("--out", type=Path, help="write a new competition folder with the changed train.csv")
    p.add_argument("--merge-labels", action="store_true", help="merge ids joined by duplicates (with --out)")
    p.add_argument("--drop-val", action="store_true", help="never validate on duplicates (with --out)")
    p.add_argument("--submission", type=Path, help="a submission to answer duplicated test images in")
    p.add_argument("--answered", type=Path, help="where the answered submission goes (with --submission)")


def run(args: argparse.Namespace) -> int:
    """Find the duplicates and write what ``args`` ask for; raises :class:`whale.core.errors.WhaleError` on bad input."""
    from whale.data import load_competition
    from whale.core.files import atomic_write

    if (args.merge_labels or args.drop_val) and args.out is None:
        raise DataError("--merge-labels and --drop-val change train.csv: give --out DIR for the new folder")
    if (args.submission is None) != (args.answered is None):
        raise DataError("--submission and --answered go together")
    comp = load_competition(args.data)
    dups = find_duplicates(comp, args.threshold)
    print(dups.summary())
    for row in dups.train_pairs[dups.train_pairs["conflict"]].head(20).itertuples():
        print(f"  conflict: {row.Image_a} ({row.Id_a}) ~ {row.Image_b} ({row.Id_b}), {row.distance} bits")
    if args.report:
        report = pd.concat([dups.train_pairs.assign(kind="train/train"),
                            dups.test_pairs.rename(columns={"Test": "Image_a", "Image": "Image_b", "Id": "Id_b"})
                            .assign(kind="train/test")], ignore_index=True)
        atomic_write(args.report, lambda tmp: report.to_csv(tmp, index=False))
        print(f"wrote {args.report}")
    if args.out:
        from whale.data.derive import derive_competition

        train = merge_labels(comp.train, dups) if args.merge_labels else comp.train
        train = drop_from_validation(train, dups) if args.drop_val else train
        print(f"wrote {derive_competition(comp, args.out, train)}")
    if args.submission:
        from whale.submission import check_submission, write_submission

        check_submission(args.submission, comp.sample_path)
        sub = pd.read_csv(args.submission, dtype=str, keep_default_na=False)
        preds = answer_test(sub["Image"], [r.split() for r in sub["Id"]], dups)
        write_submission(args.answered, list(sub["Image"]), preds, sample=comp.sample_path)
        print(f"wrote {args.answered}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
