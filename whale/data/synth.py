"""A synthetic competition in the format of Kaggle's Humpback Whale Identification (or Happywhale 2022).

``generate(out)`` writes a folder that ``whale.data.load_competition`` reads like the real
one::

    out/train.csv               Image,Id        (``new_whale`` for individuals seen once)
    out/train/*.jpg
    out/test/*.jpg
    out/sample_submission.csv   Image,Id        Id = "new_whale" + the 4 most common ids
    out/bounding_boxes.csv      Image,x0,y0,x1,y1   true fluke box of every train and test image
    out/test_solution.csv       Image,Id        the truth, for local MAP@5

Every individual is a fluke silhouette (two lobes, a central notch) with a fixed identity
pattern: white/black pigmentation blobs, speckles, scars and trailing-edge notches. The
pattern is a pure function of the individual's 7-hex key (``w_<key>`` for known ids), so an
id looks the same whatever the seed or image size. Each sighting is a new modest viewpoint
(perspective homography), scale and position in a sea-and-sky frame, with lighting change,
blur, noise, JPEG quality 40-95, and 5% of images saved as 1-channel gray JPEGs.

How many images each id gets follows the real competition's long tail (``REAL_IMAGES_PER_ID``,
scaled to ``n_ids`` by stratified quantiles). About 38% of train rows are ``new_whale`` and
about 27.6% of test rows are unseen individuals, as in the real data.

Everything is drawn from ``np.random.Generator``s seeded from ``seed`` (layout) or from the
image name (rendering), so the same seed gives the same bytes.

``fmt="happywhale2022"`` (``--format``) writes the same individuals and photos in the Happywhale
2022 layout (:mod:`whale.formats`)::

    out/train.csv               image,species,individual_id   (every row an individual: no open-set rows)
    out/train_images/*.jpg, out/test_images/*.jpg
    out/sample_submission.csv   image,predictions   "new_individual" + the 4 most common ids
    out/test_solution.csv       image,species,individual_id   new_individual for unseen individuals
    out/bounding_boxes.csv      Image,x0,y0,x1,y1   (the toolkit's optional boxes, as for 2019)

The individuals 2019 labels ``new_whale`` in train are singletons with their own id there (as
Kaggle's 2022 data has many); individual ids are 12 hex digits. Species is an attribute of the
individual (``species`` names from Kaggle's list, misspellings included), drawn from its key,
and tints its skin, so a species is also a colour family.

Command line::

    python -m whale.data.synth --out DIR [--ids N] [--seed S] [--size PX] [--duplicates N] [--force]
                               [--format happywhale2022 [--species N]]

``duplicates`` plants near-duplicates (a train image re-encoded a little brighter or darker, at
another JPEG quality), in turn: a train copy with the same id, a train copy labelled
``new_whale`` (a conflicting label), a test copy whose true id is the original's. They are
listed in ``planted_duplicates.csv`` (``Image,Of,Kind``) to test :mod:`whale.duplicates`.

This module writes the folder and is the command; the drawing lives beside it, one concept each:
:mod:`whale.data.synth_layout` (the long tail of images per id, which image goes where),
:mod:`whale.data.synth_fluke` (an individual's silhouette and pattern) and
:mod:`whale.data.synth_photo` (one sighting of it: background, viewpoint, lighting, camera).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from whale import NEW_WHALE, command
from whale.data.synth_fluke import Fluke
from whale.data.synth_fluke import render_fluke as _render_fluke  # this module's names from before the split
from whale.data.synth_layout import (NEW_PER_KNOWN_TRAIN, REAL_IMAGES_PER_ID, TEST_KNOWN_PER_KNOWN_TRAIN, TEST_NEW_SHARE,
                                     Sighting, plan_sightings, sample_counts, unique_hex)
from whale.data.synth_photo import encode_jpeg
from whale.data.synth_photo import render_sighting as _render_sighting
from whale.core.errors import WRITE_ERRNOS, OutputError, WhaleError, describe_write_error
from whale.core.files import check_output
from whale.formats import FORMATS, HUMPBACK2019, Format, get_format

__all__ = ["generate", "main", "add_arguments", "run", "PROG", "SPECIES_2022", "REAL_IMAGES_PER_ID", "sample_counts",
           "NEW_PER_KNOWN_TRAIN", "TEST_KNOWN_PER_KNOWN_TRAIN", "TEST_NEW_SHARE"]

_OUTPUT_FILES = ("train.csv", "sample_submission.csv", "bounding_boxes.csv", "test_solution.csv",
                 "planted_duplicates.csv")
_DUPLICATE_KINDS = ("train", "conflict", "test")
SPECIES_2022 = ("humpback_whale", "bottlenose_dolpin", "beluga", "kiler_whale", "globis", "pilot_whale",
                "blue_whale", "false_killer_whale", "dusky_dolphin", "melon_headed_whale", "minke_whale",
                "fin_whale", "gray_whale", "southern_right_whale", "common_dolphin", "spinner_dolphin")
"""Species labels of Kaggle's 2022 ``train.csv`` (a selection, its misspellings kept): the first
``n_species`` are used."""


# --------------------------------------------------------------------------------------
# Writing the folder.
# --------------------------------------------------------------------------------------
def _individual_id(key: str) -> str:
    """The 2022-style id (12 hex digits) of the individual with 7-hex ``key``."""
    return key + key[:5]


def _species_of(key: str, n_species: int) -> int:
    """Index into :data:`SPECIES_2022` of the individual ``key``: a pure function of the key."""
    return int(key, 16) % n_species


def _species_tint(index: int, n_species: int) -> np.ndarray:
    """``[3]`` float32 RGB gain of species ``index``: evenly spaced hues, +-15%."""
    phase = 2 * np.pi * index / max(n_species, 1)
    return (1 + 0.15 * np.cos(phase + np.array([0.0, 2.0, 4.0]) * np.pi / 3)).astype(np.float32)


def _folders(fmt: Format) -> dict[str, str]:
    """Split (``train``, ``test``) -> image folder of the format."""
    return {"train": fmt.train_dir, "test": fmt.test_dir}


def _prepare_out(out: Path, force: bool, fmt: Format = HUMPBACK2019) -> None:
    """Create ``out``; refuse a non-empty one unless ``force`` (then clear our own files)."""
    if out.exists() and not out.is_dir():
        raise WhaleError(f"{out}: expected a directory for the synthetic competition, found a file")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise WhaleError(f"{out}: expected an empty or missing directory, found files in it "
                             "(pass force=True / --force to overwrite)")
        for name in _OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)
        for sub in _folders(fmt).values():
            if (out / sub).is_dir():
                for f in (out / sub).glob("*.jpg"):
                    f.unlink()
    for sub in _folders(fmt).values():
        (out / sub).mkdir(parents=True, exist_ok=True)


def _plant_duplicates(out: Path, plan: list[Sighting], boxes: dict, n: int,
                      rng: np.random.Generator) -> list[tuple[Sighting, str, str]]:
    """Write ``n`` near-duplicates of known-id train images; returns ``(sighting, of, kind)`` each."""
    import cv2

    sources = [sg for sg in plan if sg.split == "train" and sg.label != NEW_WHALE]
    if n > len(sources):
        raise WhaleError(f"{out}: {n} duplicates asked for, but only {len(sources)} known-id train images")
    taken = {sg.image[:8] for sg in plan}
    names = unique_hex(rng, n, 8, taken)
    planted = []
    for k, (src, name) in enumerate(zip(rng.choice(len(sources), n, replace=False), names)):
        sg, kind = sources[int(src)], _DUPLICATE_KINDS[k % 3]
        img = cv2.imdecode(np.frombuffer((out / "train" / sg.image).read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
        img = np.clip(img.astype(np.int16) + int(rng.choice([-1, 1]) * rng.integers(4, 12)), 0, 255).astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(60, 92))])
        copy = Sighting(f"{name}.jpg", "test" if kind == "test" else "train", sg.key,
                         NEW_WHALE if kind == "conflict" else sg.label)
        (out / copy.split / copy.image).write_bytes(buf.tobytes())
        boxes[copy.image] = boxes[sg.image]
        planted.append((copy, sg.image, kind))
    return planted


def generate(out, n_ids: int = 200, seed: int = 0, size: int = 256, *, force: bool = False,
             progress: bool = True, duplicates: int = 0, fmt: str | Format = HUMPBACK2019,
             n_species: int = 4) -> Path:
    """Write a synthetic competition with ``n_ids`` known ids into folder ``out``.

    ``size`` is the width in pixels of every image (heights 0.6-0.9 x size). ``out`` must be
    missing or empty unless ``force`` (then the files this function writes are replaced).
    ``progress`` shows a tqdm bar and prints a summary on stderr. ``duplicates``: how many
    near-duplicates to plant (module docstring; 0 = none, the same bytes as before; 2019 only).
    ``fmt``: the layout (:mod:`whale.formats`); ``n_species``: species of the 2022 layout
    (1..len(SPECIES_2022)). Returns ``Path(out)``.
    """
    import pandas as pd

    out = Path(out)
    fmt = get_format(fmt)
    if int(n_ids) < 1:
        raise WhaleError(f"{out}: expected n_ids >= 1, received {n_ids}")
    if int(size) < 32:
        raise WhaleError(f"{out}: expected size >= 32 pixels, received {size}")
    if fmt.species_column is not None and not 1 <= int(n_species) <= len(SPECIES_2022):
        raise WhaleError(f"{out}: expected 1 <= n_species <= {len(SPECIES_2022)}, received {n_species}")
    if duplicates and fmt != HUMPBACK2019:
        raise WhaleError(f"{out}: planted duplicates exist for the {HUMPBACK2019.name} layout only, "
                         f"received duplicates={duplicates} with {fmt.name}")
    n_ids, seed, size, n_species = int(n_ids), int(seed), int(size), int(n_species)
    _prepare_out(out, force, fmt)
    folder = _folders(fmt)

    t0 = time.perf_counter()
    plan = plan_sightings(n_ids, np.random.default_rng([seed, 0]))
    by_key: dict[str, list[Sighting]] = {}
    for sg in plan:
        by_key.setdefault(sg.key, []).append(sg)

    boxes: dict[str, tuple[int, int, int, int]] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), desc="synth", unit="img", file=sys.stderr)
    for key, sightings in by_key.items():
        fluke = _render_fluke(key, size)
        if fmt.species_column is not None:
            tint = _species_tint(_species_of(key, n_species), n_species)
            fluke = Fluke(rgb=np.clip(fluke.rgb * tint, 0, 255), alpha=fluke.alpha)
        for sg in sightings:
            rng = np.random.default_rng([seed, 1, int(sg.image[:8], 16)])
            img, box = _render_sighting(fluke, rng, size)
            quality = int(rng.integers(40, 96))
            (out / folder[sg.split] / sg.image).write_bytes(encode_jpeg(img, quality))
            boxes[sg.image] = box
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    if duplicates:
        planted = _plant_duplicates(out, plan, boxes, int(duplicates), np.random.default_rng([seed, 2]))
        plan = plan + [sg for sg, _, _ in planted]
        pd.DataFrame([(sg.image, of, kind) for sg, of, kind in planted],
                     columns=["Image", "Of", "Kind"]).to_csv(out / "planted_duplicates.csv", index=False)

    if fmt == HUMPBACK2019:
        rows = [(s.image, s.split, s.label) for s in plan]
        columns = ["Image", "Id"]
    else:  # 2022: train's "new_whale" individuals are singletons; unseen test ones new_individual
        rows = [(s.image, s.split, SPECIES_2022[_species_of(s.key, n_species)],
                 fmt.open_label if s.label == NEW_WHALE and s.split == "test" else _individual_id(s.key))
                for s in plan]
        columns = list(fmt.train_columns)
    train = pd.DataFrame([(r[0], *r[2:]) for r in rows if r[1] == "train"], columns=columns)
    train = train.sort_values(columns[0], kind="stable").reset_index(drop=True)
    test = pd.DataFrame([(r[0], *r[2:]) for r in rows if r[1] == "test"], columns=columns)
    test = test.sort_values(columns[0], kind="stable").reset_index(drop=True)
    train.to_csv(out / "train.csv", index=False)
    test.to_csv(out / "test_solution.csv", index=False)

    image_col, id_col = fmt.image_column, fmt.id_column
    known = train[train[id_col] != fmt.open_label][id_col].value_counts()
    top = sorted(known.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
    placeholder = " ".join([fmt.open_label] + [k for k, _ in top])
    pd.DataFrame({fmt.submission_columns[0]: test[image_col], fmt.submission_columns[1]: placeholder}).to_csv(
        out / "sample_submission.csv", index=False)

    box_rows = [(name, *boxes[name]) for name in sorted(boxes)]
    pd.DataFrame(box_rows, columns=["Image", "x0", "y0", "x1", "y1"]).to_csv(out / "bounding_boxes.csv", index=False)

    if progress:
        label = fmt.open_label
        n_new_train = int((train[id_col] == label).sum())
        n_new_test = int((test[id_col] == label).sum())
        species = f", {train[fmt.species_column].nunique()} species" if fmt.species_column else ""
        print(f"synth: {out}  seed={seed} size={size} format={fmt.name}  {time.perf_counter() - t0:.1f} s\n"
              f"  train: {len(train)} images, {len(known)} ids{species}, "
              f"{n_new_train} {label} ({n_new_train / max(len(train), 1):.0%}), "
              f"ids with 1/2/3/4+ images: {(known == 1).sum()}/{(known == 2).sum()}/"
              f"{(known == 3).sum()}/{(known >= 4).sum()}, max {known.max()}\n"
              f"  test:  {len(test)} images, {n_new_test} {label} ({n_new_test / max(len(test), 1):.0%})",
              file=sys.stderr)
    return out


PROG = "python -m whale.data.synth"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 on bad input, see :func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.data.synth`` and ``whale synth`` (:mod:`whale.command`)."""
    parser.description = ("Write a synthetic Kaggle Humpback Whale Identification competition "
                          "(train.csv, train/, test/, sample_submission.csv, bounding_boxes.csv, "
                          "test_solution.csv).")
    parser.add_argument("--out", required=True, type=Path, help="output folder (created)")
    parser.add_argument("--ids", type=int, default=200, help="number of known ids (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--size", type=int, default=256, help="image width in pixels (default 256)")
    parser.add_argument("--duplicates", type=int, default=0, help="near-duplicates to plant (default 0)")
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.add_argument("--format", choices=list(FORMATS), default=HUMPBACK2019.name,
                        help=f"the competition's layout (default {HUMPBACK2019.name}; whale.formats)")
    parser.add_argument("--species", type=int, default=4,
                        help=f"species of the happywhale2022 layout (1..{len(SPECIES_2022)}, default 4)")


def run(args: argparse.Namespace) -> int:
    """Write the competition ``args`` describe; raises :class:`whale.core.errors.WhaleError` on bad input."""
    check_output(args.out, folder=True)
    fresh = not args.out.exists()
    # A folder holding files is refused (without --force) before anything is written: those files are not ours.
    ours = fresh or args.force or not any(args.out.iterdir())
    try:
        generate(args.out, n_ids=args.ids, seed=args.seed, size=args.size, force=args.force,
                 progress=not args.quiet, duplicates=args.duplicates, fmt=args.format, n_species=args.species)
    except BaseException as exc:  # a full disk, Ctrl-C, a late refusal or a bug: nothing half-written stays
        if ours:
            _remove_partial(args.out, fresh, get_format(args.format))  # a folder that was not there is gone again
        if isinstance(exc, OSError) and not isinstance(exc, WhaleError) and exc.errno in WRITE_ERRNOS:
            raise OutputError(describe_write_error(exc.filename or args.out, exc)) from exc
        raise
    return 0


def _remove_partial(out: Path, fresh: bool, fmt: Format = HUMPBACK2019) -> None:
    """After a failed :func:`generate`: remove ``out`` if it was created, else the files it writes."""
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
        return
    for name in _OUTPUT_FILES:
        (out / name).unlink(missing_ok=True)
    for sub in _folders(fmt).values():
        for f in (out / sub).glob("*.jpg") if (out / sub).is_dir() else ():
            f.unlink(missing_ok=True)
        if (out / sub).is_dir() and not any((out / sub).iterdir()):
            (out / sub).rmdir()


if __name__ == "__main__":
    sys.exit(main())
