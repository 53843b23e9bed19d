"""A trunk run's training store: the memory its photos' maps take, held once or joined as a copy. Not a test.

    python benchmarks/speed/trunk_store_memory.py [--photos 6000] [--views 4] [--shape 7,14,192]

A trunk run (:mod:`whale.inference.trunk`) trains on each photo's ``[1 + V, h, w, c]`` float16 maps: the plain
crop's and ``V`` augmented views', kept per kind (``plain``, ``views``) as they are computed or read from the cache.
:meth:`whale.inference.trunk.TrunkMaps.store` now joins a photo's two kinds into one array that both kinds' entries
then view, so each map is held once. Before, it joined them as a copy beside the two kinds' arrays, so a training
store held its maps twice (the former ``store`` is kept here to measure it). At the 2019 competition's size (about
24,000 gallery photos of 31,920, Lite0's 7 x 14 x 192 maps, 4 views) the maps take 4.2 GiB: twice that does not fit
the recipe's 8 GB.

Each way runs in a fresh process: ``--photos`` photos' maps (random float16 at ``--shape``, one tiny file per photo
for its content key) are put in memory as the cache would hand them, then the training store is built and kept.
Printed per way: the maps' own bytes (what any store in memory must hold: the baseline), the process's peak resident
memory (``ru_maxrss``) before and after the store, the growth and its ratio to the maps' bytes, the seconds the store
took; then the ratio of the two ways' growths, and as the last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def former_store(maps, paths, views: bool):
    """The former ``TrunkMaps.store`` for maps already in memory: each photo's kinds joined as a new array."""
    from whale.inference.trunk import MapStore, photo_key

    keys = [photo_key(Path(p)) for p in paths]
    kinds = ("plain", "views") if views and maps.views else ("plain",)
    return MapStore([np.concatenate([maps._memory[(k, kind)] for kind in kinds]) for k in keys])


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one_way(way: str, photos: int, views: int, shape: tuple[int, ...]) -> dict:
    """In this process: the maps in memory, then the training store built the ``way`` way."""
    from whale.inference.trunk import TrunkMaps, photo_key

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(photos):
            path = Path(tmp) / f"{i}.bin"
            path.write_bytes(i.to_bytes(8, "little"))
            paths.append(path)
        maps = TrunkMaps(None, (224, 448), 1, 0.0, "content", views, "default", {"benchmark": way})
        for p in paths:
            key = photo_key(p)
            maps._memory[(key, "plain")] = rng.standard_normal((1, *shape), np.float32).astype(np.float16)
            maps._memory[(key, "views")] = rng.standard_normal((views, *shape), np.float32).astype(np.float16)
        held = sum(a.nbytes for a in maps._memory.values())
        before = peak_mb()
        t0 = time.perf_counter()
        store = maps.store(paths, views=True) if way == "now" else former_store(maps, paths, True)
        seconds = time.perf_counter() - t0
        after = peak_mb()
        assert len(store) == photos and store[0].shape == (1 + views, *shape)
    return {"maps_mb": held / 2**20, "peak_before_mb": before, "peak_after_mb": after,
            "growth_mb": after - before, "growth_over_maps": (after - before) / (held / 2**20), "seconds": seconds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", type=int, default=6000, help="training photos (default 6000: a 7,980-photo split's "
                   "gallery; 24000 at the competition's size)")
    p.add_argument("--views", type=int, default=4, help="augmented views per photo (default 4, flukes_lite0_cpu)")
    p.add_argument("--shape", default="7,14,192", help="one view's map h,w,c (default Lite0's at 224 x 448)")
    p.add_argument("--way", choices=("now", "former"), help=argparse.SUPPRESS)  # one way, in this process
    args = p.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split(","))
    if args.way:
        print(json.dumps(one_way(args.way, args.photos, args.views, shape)))
        return 0
    rows = {}
    for way in ("former", "now"):
        out = subprocess.run([sys.executable, __file__, "--way", way, "--photos", str(args.photos), "--views",
                              str(args.views), "--shape", args.shape], capture_output=True, text=True, check=True)
        rows[way] = json.loads(out.stdout.strip().splitlines()[-1])
        r = rows[way]
        print(f"{way:>6}: maps {r['maps_mb']:,.0f} MB; peak resident {r['peak_before_mb']:,.0f} -> "
              f"{r['peak_after_mb']:,.0f} MB: +{r['growth_mb']:,.0f} MB ({r['growth_over_maps']:.2f}x the maps), "
              f"store built in {r['seconds']:.2f} s", flush=True)
    ratio = rows["now"]["growth_mb"] / max(rows["former"]["growth_mb"], 1e-9)
    print(f"the store's growth now / former: {ratio:.3f} ({args.photos:,} photos, {1 + args.views} maps each, "
          f"{' x '.join(map(str, shape))})")
    print(json.dumps({"benchmark": "trunk_store_memory", "photos": args.photos, "views": args.views,
                      "shape": list(shape), "rows": rows, "now_over_former": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
