"""A catalogue of real flukes matched by the joint identification, with and without the learned outline. Not a test.

    python benchmarks/flukes/catalogue_outline.py --out runs/catol --seeds 0,1,2 --data 'runs/cut/seed{S}/data' \
        [--batch 300] [--store runs/kpstore] [--resume]

Per split seed (a folder ``benchmarks/flukes/humpback.py`` writes: its ``train.csv`` the known photos): fold 0's
gallery (:func:`whale.data.fold_data`) is the catalogue (``whale catalogue add``; a photo whose bytes another
gallery photo already brought is left out) and a seeded draw of ``--batch`` of fold 0's validation photos the batch
(none whose bytes the catalogue holds). The batch is matched twice: ``whale catalogue match --method joint``
(``configs/joint.yaml``; batch ``joint``), then the same with ``--outline configs/outline.yaml`` (batch
``joint-outline``; it reads the catalogue's pair table back). Reported per match: of the batch photos whose whale
is catalogued, the share whose whale is ranked first and among the five first candidates, and the share flagged
possibly new; of the others (new whales and whales outside the catalogue) the share flagged; wall seconds and peak
resident memory.

``--store``: a keypoint store of the same photos (``whale score --cache``), linked as the catalogue's
``keypoints/`` (the features are keyed by the photo's sha256 in both), and its ``outline-curves.npz`` copied into
the catalogue's ``outline/`` under the catalogue's keys: what would be read again is read back. ``--resume``: a
seed whose catalogue and batch are built (``truth.json``) keeps them, and a match whose log names the proposals it
wrote is read back, not run again (its seconds and memory then not reported). The last stdout line is
``{"benchmark": "catalogue_outline", "metrics": {...}, ...}``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.common import final_json, mean_sd, run_measured  # noqa: E402

METHODS = {"joint": [], "joint-outline": ["--outline", "configs/outline.yaml"]}
"""Each match's batch name and its flags beyond ``--method joint``."""


def build(data: Path, out: Path, seed: int, batch: int, store: Path | None) -> tuple[Path, Path, dict, set]:
    """The catalogue (added) and the batch folder under ``out``: ``(catalogue, batch, truth by batch file name,
    catalogued individuals)``."""
    import pandas as pd

    from whale.core.files import file_hash
    from whale.data import fold_data, load_competition

    fd = fold_data(load_competition(data), 0, 0)
    train = data / "train"
    rows, held = [], {}
    for name, ind in zip(fd.gallery.names, fd.gallery.ids):
        h = file_hash(train / name)
        if h not in held:
            held[h] = name
            rows.append((name, ind))
    labels = out / "catalogue.csv"
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=["image", "individual"]).to_csv(labels, index=False)
    cat = out / "cat"
    whale("catalogue", "add", str(cat), "--photos", str(train), "--labels", str(labels))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(fd.val))
    folder, truth, drawn = out / "batch", {}, {}
    folder.mkdir(exist_ok=True)
    for i in order:
        name, ind = fd.val.names[i], str(fd.val.ids[i])
        h = file_hash(train / name)
        if h in held:
            continue
        (folder / name).symlink_to((train / name).resolve())
        truth[name], drawn[h] = ind, name
        if len(truth) == batch:
            break
    if store is not None:
        seed_store(cat, store, {**held, **drawn}, data)
    known = sorted({ind for _, ind in rows})
    (out / "truth.json").write_text(json.dumps({"truth": truth, "known": known}))  # last: the seed is built
    return cat, folder, truth, set(known)


def seed_store(cat: Path, store: Path, names: dict[str, str], data: Path) -> None:
    """``store``'s keypoint features linked as the catalogue's, its curves of the photos ``names`` (``{sha256: file
    name in data/train}``) kept under the catalogue's keys, their sha256 (module docstring)."""
    from whale.data.fingerprint import digests, image_hashes
    from whale.outline.curve import CurveStore

    (cat / "keypoints").symlink_to(store.resolve())
    competition = CurveStore(store)
    named = digests(image_hashes(data))
    mine = CurveStore(cat / "outline")
    for h, name in names.items():  # the sha256 of each photo, read once by build()
        key = named[f"train/{name}"]
        if key in competition.curves:
            mine.curves[h] = competition.curves[key]
    mine.save()


def whale(*argv: str) -> None:
    import subprocess

    subprocess.run([sys.executable, "-m", "whale", *argv, "--quiet"], cwd=ROOT, check=True, capture_output=True)


def measure(proposals: dict, truth: dict, known: set) -> dict:
    """The figures of one match (module docstring)."""
    photos = {Path(p["photo"]).name: p for p in proposals["photos"]}
    inside = [n for n in truth if truth[n] in known]
    outside = [n for n in truth if truth[n] not in known]

    def ranked(n):
        return [c["individual"] for c in photos[n]["candidates"]]

    return {"catalogued": len(inside), "others": len(outside),
            "top1": float(np.mean([ranked(n)[:1] == [truth[n]] for n in inside])),
            "top5": float(np.mean([truth[n] in ranked(n)[:5] for n in inside])),
            "catalogued_flagged": float(np.mean([photos[n]["possibly_new"] for n in inside])),
            "others_flagged": float(np.mean([photos[n]["possibly_new"] for n in outside])) if outside else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="0")
    p.add_argument("--data", required=True, help="split folders, {S} the split seed")
    p.add_argument("--batch", type=int, default=300, help="validation photos matched")
    p.add_argument("--store", help="a keypoint store of the same photos (module docstring)")
    p.add_argument("--resume", action="store_true", help="keep what a killed run built and matched (module docstring)")
    args = p.parse_args(argv)
    t0 = time.time()
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        out = Path(args.out) / f"seed{seed}"
        if args.resume and (out / "truth.json").is_file():
            built = json.loads((out / "truth.json").read_text())
            cat, batch, truth, known = out / "cat", out / "batch", built["truth"], set(built["known"])
        else:
            shutil.rmtree(out, ignore_errors=True)
            cat, batch, truth, known = build(Path(args.data.format(S=seed)), out, seed, args.batch,
                                             Path(args.store) if args.store else None)
        row = {"seed": seed}
        for name, extra in METHODS.items():
            log, seconds, memory = out / f"{name}.log", None, {"resident": float("nan")}
            if not (args.resume and log.is_file() and "\nwrote " in log.read_text()):
                cmd = [sys.executable, "-m", "whale", "catalogue", "match", str(cat), "--method", "joint",
                       "--photos", str(batch), "--batch", name, "--top", "5", "--joint-config", "configs/joint.yaml",
                       *extra] + (["--rematch"] if args.resume else [])
                rc, seconds, memory = run_measured(cmd, log, cwd=ROOT)
                if rc:
                    raise SystemExit(f"{' '.join(cmd)}: exit {rc}; see {log}")
            written = log.read_text().split("\nwrote ")[-1].split(": ")[0]
            m = measure(json.loads(Path(written).read_text()), truth, known)
            row[name] = {**m, "seconds": None if seconds is None else round(seconds),
                         "peak_resident_mb": round(memory["resident"]) if seconds is not None else None}
            print(f"seed {seed} {name}: {json.dumps(row[name])}", flush=True)
        results.append(row)
    metrics = {}
    for name in METHODS:
        for k in ("top1", "top5", "catalogued_flagged", "others_flagged"):
            metrics[f"{name.replace('-', '_')}_{k}"] = mean_sd([r[name][k] for r in results])["mean"]
    for k in ("top1", "top5"):
        gain = mean_sd([r["joint-outline"][k] - r["joint"][k] for r in results])
        metrics[f"outline_gain_{k}"], metrics[f"outline_gain_{k}_sd"] = gain["mean"], gain["sd"]
        print(f"outline's gain, {k}: {gain['mean']:+.3f} +- {gain['sd']:.3f} over {gain['n']} split seed(s)")
    print(final_json("catalogue_outline", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
