"""``configs/starter.yaml`` on every real set we have, against the raw-pixel baseline. Not a test.

    python benchmarks/seeds/starter.py --out runs/bench_starter [--sets omniglot,lions,synthetic] [--seed S]

A new user's first run: a catalogue of a few hundred photos, the starter config (stages sized in
optimiser steps, so a small catalogue gets many epochs), fold 0 of the toolkit's fold rules.
Each set is one Kaggle-format mini-competition; both methods see exactly the same files:

* ``omniglot``: ``../shared/data/omniglot/images_background_small2.zip`` without the Greek and
  Latin alphabets (``images_background_small1`` holds byte-identical copies of them; small1 is
  not used at all). 60 characters drawn from the other three alphabets: 45 known ones with 4
  drawers each in ``train.csv`` and 2 other drawers each in test, 15 unknown ones (8 give
  ``new_whale`` rows of ``train.csv``, 7 give ``new_whale`` test images, 2 drawers each).
  The benchmark checks that no image's bytes are both in ``train/`` and in ``test/``.
* ``lions``: the mini-competition of ``benchmarks/seeds/lions.py`` (one photo per view per lion:
  cross-view matching), ``../shared/data/lions/Lion_Data_Zero``.
* ``synthetic``: ``whale.data.synth`` with 100 ids (the demo's generator, half its size), each
  image cut to its bounding box (both methods read whole images).

Methods: raw-pixel cosine nearest neighbour (32 px gray, :mod:`whale.baseline`) and the siamese
model trained under ``configs/starter.yaml``; the ``new_whale`` threshold of both is tuned on
validation fold 0 of ``train.csv``. Reported per set: MAP@5 on the test set, top-1/top-5 on test
images of known ids, the epochs the steps became, training seconds. A set whose data is absent
is skipped with a message. The last stdout line is
``{"benchmark": "starter", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from whale import NEW_WHALE  # noqa: E402

SETS = ("omniglot", "lions", "synthetic")
SHARED_ALPHABETS = ("Greek", "Latin")
"""Alphabets that images_background_small1 and small2 both hold, byte for byte."""
N_KNOWN, N_NEW_TRAIN, N_NEW_TEST = 45, 8, 7
TRAIN_DRAWERS, TEST_DRAWERS = 4, 2


def omniglot_catalogue(zip_path: Path, out: Path, seed: int) -> Path:
    """The ``omniglot`` mini-competition of the module docstring, under ``out``."""
    with zipfile.ZipFile(zip_path) as z:
        names = sorted(n for n in z.namelist() if n.endswith(".png")
                       and n.split("/")[1] not in SHARED_ALPHABETS)
        src = out / "src"
        if not src.is_dir():
            z.extractall(src, members=names)
    by_char: dict[str, list[Path]] = {}
    for n in names:
        by_char.setdefault("_".join(n.split("/")[1:3]), []).append(src / n)
    rng = np.random.default_rng([seed, 5])
    chars = sorted(by_char)
    chars = [chars[i] for i in rng.permutation(len(chars))[:N_KNOWN + N_NEW_TRAIN + N_NEW_TEST]]
    train, test = [], []
    for i, c in enumerate(chars):
        photos = [by_char[c][j] for j in rng.permutation(len(by_char[c]))]
        if i < N_KNOWN:
            train += [(p, c) for p in photos[:TRAIN_DRAWERS]]
            test += [(p, c) for p in photos[TRAIN_DRAWERS:TRAIN_DRAWERS + TEST_DRAWERS]]
        elif i < N_KNOWN + N_NEW_TRAIN:
            train += [(p, NEW_WHALE) for p in photos[:TEST_DRAWERS]]
        else:
            test += [(p, NEW_WHALE) for p in photos[:TEST_DRAWERS]]
    test = [test[i] for i in rng.permutation(len(test))]
    comp = common.build_competition(out / "competition", train, test)
    digest = lambda folder: set(common.byte_digests(sorted((comp / folder).iterdir())))  # noqa: E731
    shared = digest("train") & digest("test")
    if shared:
        raise ValueError(f"{comp}: {len(shared)} images are byte-identical in train/ and test/")
    return comp


def lions_catalogue(src: Path, out: Path, seed: int) -> Path:
    """The mini-competition of ``benchmarks/seeds/lions.py``."""
    from benchmarks.seeds.lions import index_lions, lion_competition

    return lion_competition(index_lions(src), out / "competition", seed)[0]


def synthetic_catalogue(out: Path, seed: int) -> Path:
    """``whale.data.synth`` with 100 ids (128 px wide), every image cut to its bounding box.

    The crops are the competition's images (no ``bounding_boxes.csv``), so the pixel baseline
    and the siamese model both see the animal, not the background, as in the other two sets.
    """
    import pandas as pd
    from PIL import Image

    from whale.data.synth import generate

    comp = out / "competition"
    if (comp / "train.csv").is_file():
        return comp
    src = out / "generated"
    if not (src / "train.csv").is_file():
        generate(src, n_ids=100, seed=seed, size=128, progress=False)
    boxes = pd.read_csv(src / "bounding_boxes.csv").set_index("Image")
    crops = out / "crops"
    crops.mkdir(parents=True, exist_ok=True)

    def crop(folder: str, name: str) -> Path:
        b = boxes.loc[name]
        Image.open(src / folder / name).crop((int(b.x0), int(b.y0), int(b.x1), int(b.y1))).save(crops / name)
        return crops / name

    train = [(crop("train", r.Image), r.Id) for r in pd.read_csv(src / "train.csv").itertuples()]
    test = [(crop("test", r.Image), r.Id) for r in pd.read_csv(src / "test_solution.csv").itertuples()]
    return common.build_competition(comp, train, test)


def catalogue(name: str, out: Path, seed: int, data: dict) -> Path | None:
    """The mini-competition of set ``name`` under ``out/name``, or None when its data is absent."""
    if name == "omniglot":
        src = data.get("omniglot") or common.shared_data("omniglot")
        z = Path(src) / "images_background_small2.zip" if src else None
        return omniglot_catalogue(z, out / name, seed) if z and z.is_file() else None
    if name == "lions":
        src = data.get("lions") or common.shared_data("lions", "Lion_Data_Zero")
        return lions_catalogue(Path(src), out / name, seed) if src and (Path(src) / "train").is_dir() else None
    return synthetic_catalogue(out / name, seed)


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (data copies, run folders)")
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    p.add_argument("--seed", type=int, default=0, help="seed of the catalogues and of training")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "starter.yaml"))
    p.add_argument("--quick", action="store_true", help="a fifth of the steps (development only)")
    p.add_argument("--budget", type=float, default=900.0, help="training seconds per set (0 = no limit)")
    p.add_argument("--omniglot", help="folder with images_background_small2.zip (default ../shared/data/omniglot)")
    p.add_argument("--lions", help="Lion_Data_Zero folder (default ../shared/data/lions/Lion_Data_Zero)")
    args = p.parse_args(argv)
    t0 = time.time()
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = sorted(set(sets) - set(SETS))
    if unknown:
        p.error(f"--sets: unknown {', '.join(unknown)}; expected some of {', '.join(SETS)}")
    cfg, out = common.prepare(args)
    from whale.data import load_competition
    from whale.training.trainer import train_fold

    rows, metrics = [], {}
    for name in sets:
        comp_dir = catalogue(name, out, args.seed, {"omniglot": args.omniglot, "lions": args.lions})
        if comp_dir is None:
            print(f"{name}: data not found; skipping")
            continue
        comp = load_competition(comp_dir)
        print(f"--- {name}: {comp_dir}: {len(comp.train)} train.csv rows "
              f"({(comp.train['Id'] == NEW_WHALE).sum()} new_whale), {len(comp.test_images)} test images")
        pixel = common.evaluate_competition(common.PixelMethod(size=32, channels=1), comp_dir, seed=args.seed)
        t1 = time.time()
        res = train_fold(cfg, comp_dir, 0, out / name / "run", resume=True, score=False, verbose=0,
                         deadline=t1 + args.budget if args.budget else None,
                         log=lambda m, n=name: print(f"  [{n}] {m}", flush=True))
        train_s = time.time() - t1
        siamese = common.evaluate_competition(common.SiameseMethod(out / name / "run", "starter"), comp_dir,
                                              seed=args.seed)
        for method, r in (("pixel NN", pixel), ("starter", siamese)):
            rows.append({"set": name, "method": method, **r,
                         "epochs": f"{res.epochs_done}/{res.epochs_total}" if method == "starter" else "-",
                         "train_s": round(train_s) if method == "starter" else None})
        metrics.update({f"{name}_map5_pixel": pixel["map5"], f"{name}_map5_starter": siamese["map5"],
                        f"{name}_top5_pixel": pixel["top5"], f"{name}_top5_starter": siamese["top5"],
                        f"{name}_gain_map5": siamese["map5"] - pixel["map5"],
                        f"{name}_epochs": res.epochs_total, f"{name}_finished": res.finished})
        print(f"{name}: pixel MAP@5 {pixel['map5']:.3f}, starter {siamese['map5']:.3f} "
              f"({res.epochs_done}/{res.epochs_total} epochs, {train_s:.0f} s)", flush=True)

    print()
    print(f"configs/starter.yaml against the raw-pixel baseline on the same mini-competitions "
          f"(seed {args.seed}{', --quick' if args.quick else ''}; threshold tuned on validation fold 0)")
    print(common.results_table(rows, [
        ("set", "set"), ("method", "method"), ("map5", "MAP@5 (test)"), ("top1", "top-1"),
        ("top5", "top-5"), ("val_map5", "val MAP@5"), ("epochs", "epochs"), ("train_s", "train s")]))
    metrics["quick"] = bool(args.quick)
    print(common.final_json("starter", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
