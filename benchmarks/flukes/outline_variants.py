"""Ways to train the learned outline, compared on training photos only. Not a test; chooses nothing by itself.

    python benchmarks/flukes/outline_variants.py --data 'runs/cut/seed{S}/data' --seeds 0,1,2 --store runs/olr/store \\
        --variant base --variant warp=0.3 [--checked 500,1000,...] [--out runs/outline_variants.json]
    python benchmarks/flukes/outline_variants.py --report runs/ov/seed0.json runs/ov/seed1.json ...

For each split seed, fold 0's gallery (the photos the fold's outline net trains on) is what
:func:`whale.outline.net.choose_steps` reads: its individuals split in two halves by a hash of their id, the net
trained on one half under each ``--variant`` and every photo of the other half with a second photo left out matched
against that half, at each of ``--checked`` batches (the share whose individual has a photo among the best 20). A
variant is ``base`` (the toolkit's training as shipped) or ``warp=A`` (each training curve also read along a random
monotone reparametrisation of its span, :func:`whale.outline.net.warped`). The curves are read from ``--store`` (the
``--cache`` of ``whale score --matcher outline``; a photo missing there is read and kept). Neither the validation
queries nor the test are read. The last stdout line is ``{"benchmark": "outline_variants", ...}``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()

from whale.outline.net import CHECKED, CHUNK, OutlineConfig, choose_steps  # noqa: E402


def parse_variant(text: str) -> float:
    """``base`` -> 0.0, ``warp=A`` -> A (0 < A < 1)."""
    if text == "base":
        return 0.0
    name, _, value = text.partition("=")
    try:
        warp = float(value)
    except ValueError:
        warp = -1.0
    if name != "warp" or not 0.0 < warp < 1.0:
        raise SystemExit(f"--variant {text!r}: expected base or warp=A with 0 < A < 1")
    return warp


def gallery_curves(data_dir: Path, store: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(curves [n, points], ids [n])`` of fold 0's gallery photos that have a curve."""
    from whale.data import fold_data, load_competition
    from whale.data.fingerprint import digests, image_hashes
    from whale.outline.curve import CurveStore

    comp = load_competition(data_dir)
    gallery = fold_data(comp, 0, 0).gallery
    named = digests(image_hashes(Path(data_dir)))
    keys = [named[f"{comp.format.train_dir}/{name}"] for name in gallery.names]
    curves, ok = CurveStore(store).of(gallery.paths, keys, progress=True)
    return curves[ok], np.asarray(gallery.ids, str)[ok]


def table(rows: list[dict], variants: list[str]) -> None:
    """Each variant's best held-out top-20 by split seed, and its figure at the shipped length
    (:class:`whale.outline.net.OutlineConfig`'s ``steps``; NaN where not checked), paired against the first variant
    (the baseline)."""
    def stats(v: np.ndarray) -> str:
        return f"{v.mean():+.4f} +- {v.std(ddof=1) if len(v) > 1 else 0.0:.4f}"

    shipped = str(OutlineConfig().steps)
    seeds = sorted({r["split_seed"] for r in rows})
    got = {(r["split_seed"], r["variant"]): r for r in rows}
    base = variants[0]
    print(f"\n| variant | held-out half's top-20 at its best length, split seeds {', '.join(map(str, seeds))} | "
          f"mean | paired against {base} | at the shipped {shipped} batches, paired |")
    print("| --- | --- | --- | --- | --- |")
    for name in variants:
        best = np.array([got[s, name]["best"] for s in seeds])
        diff = best - np.array([got[s, base]["best"] for s in seeds])
        same = np.array([got[s, name]["held"].get(shipped, np.nan) - got[s, base]["held"].get(shipped, np.nan)
                         for s in seeds])
        cells = ", ".join(f"{v:.4f} ({got[s, name]['best_steps']})" for s, v in zip(seeds, best))
        print(f"| {name} | {cells} | {best.mean():.4f} | {stats(diff)} | {stats(same)} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="split folders, {S} the split seed")
    ap.add_argument("--seeds", default="0", help="split seeds, comma-separated")
    ap.add_argument("--net-seed", type=int, default=0, help="the nets' initialisation and augmentation seed")
    ap.add_argument("--store", help="the curve store's folder (whale score --matcher outline --cache)")
    ap.add_argument("--variant", action="append", default=None, help="base or warp=A (repeatable; default base)")
    ap.add_argument("--checked", default=",".join(map(str, CHECKED)), help="training lengths in batches compared")
    ap.add_argument("--out", help="JSON of every figure")
    ap.add_argument("--report", nargs="+", help="print the table of these --out files (runs of the same variants, "
                    "e.g. one a split seed) and stop")
    args = ap.parse_args(argv)
    if args.report:
        rows = [r for f in args.report for r in json.loads(Path(f).read_text())["rows"]]
        table(rows, list(dict.fromkeys(r["variant"] for r in rows)))
        return 0
    if not args.data or not args.store:
        raise SystemExit("--data and --store are needed unless --report")
    variants = args.variant or ["base"]
    warps = {v: parse_variant(v) for v in variants}
    checked = tuple(sorted(int(c) for c in args.checked.split(",")))
    if any(c <= 0 or c % CHUNK for c in checked):
        raise SystemExit(f"--checked {args.checked}: expected positive multiples of {CHUNK}")
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        curves, ids = gallery_curves(Path(args.data.format(S=seed)), Path(args.store))
        print(f"split seed {seed}: {len(curves)} gallery curves of {len(set(ids))} individuals", flush=True)
        for name, warp in warps.items():
            t0 = time.perf_counter()
            best, held = choose_steps(curves, ids, args.net_seed, warp=warp, checked=checked)
            seconds = time.perf_counter() - t0
            rows.append({"split_seed": seed, "variant": name, "best_steps": best, "best": held[best],
                         "held": {str(k): v for k, v in held.items()}, "seconds": round(seconds, 1)})
            print(f"  {name:10s} best {held[best]:.4f} at {best}; " +
                  ", ".join(f"{k}: {v:.4f}" for k, v in held.items()) + f"  ({seconds:.0f} s)", flush=True)
    table(rows, variants)
    result = {"benchmark": "outline_variants", "baseline": variants[0], "rows": rows}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
