"""A trunk run's training store: the memory its photos' maps take, three ways, and an epoch's reads. Not a test.

    python benchmarks/speed/trunk_store_memory.py [--photos 6000] [--views 4] [--shape 7,14,192] [--memory-limit-gb G]

A trunk run (:mod:`whale.inference.trunk`) trains on each photo's ``[1 + V, h, w, c]`` float16 maps: the plain
crop's and ``V`` augmented views', kept per kind (``plain``, ``views``) as they are computed or read from the cache.
The three ways, each in a fresh process:

* ``former`` (until b37ae1f): each kind's array in the process's memory, and the store a joined copy beside them:
  every map held twice;
* ``memory`` (b37ae1f until the mapped file): each photo's maps joined once in the process's memory, both kinds
  viewing them;
* ``mapped`` (now, :class:`whale.core.mapped.MappedRows`): the maps copied into a memory-mapped file with no name,
  made in the cache's folder, which the kernel can write out and read again under pressure.

At the 2019 competition's size (about 24,000 gallery photos of 31,920, Lite0's 7 x 14 x 192 maps, 4 views) the maps
take 4.2 GiB. In each way ``--photos`` photos' maps (a pattern of float16 maps at ``--shape``, one tiny file per
photo for its content key) are kept as the trunk's cache hands them to a run, the training store is built, then one
epoch's reads are made (one augmented view of every photo, as float32, :func:`whale.inference.trunk.any_view`).
Printed per way: the maps' own bytes (the baseline: what a store in the process's memory must hold), the resident
memory and the process's own part of it (resident less file-backed pages, ``/proc/self/statm``) after the epoch's
reads, their growth over the start, the peak resident (``ru_maxrss``), the seconds of the store and of the epoch's
reads; then the ratios to ``memory``, and as the last line one JSON object. ``--memory-limit-gb``: each way inside a
memory cgroup of that size (as ``benchmarks/flukes/humpback_growth.py`` runs the recipe; root with a writable cgroup
hierarchy), where a way that needs more memory of its own than the limit is killed, and the table says so.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

WAYS = ("former", "memory", "mapped")


def resident_mb() -> tuple[float, float]:
    """``(resident, own)`` MB of this process now: all its resident pages, and those that are no file's."""
    from benchmarks.common import tree_memory_mb

    return tree_memory_mb(os.getpid())


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one_way(way: str, photos: int, views: int, shape: tuple[int, ...]) -> dict:
    """In this process: the maps kept as the cache hands them, the training store built the ``way`` way, then one
    epoch's reads."""
    from whale.inference.trunk import MapStore, TrunkMaps, any_view, photo_key

    rng = np.random.default_rng(0)
    pattern = rng.standard_normal((257, *shape), np.float32).astype(np.float16)  # photo i: rows from 5i on
    start = resident_mb()
    with tempfile.TemporaryDirectory(dir=ROOT / "runs" if (ROOT / "runs").is_dir() else None) as tmp:
        paths = []
        for i in range(photos):
            path = Path(tmp) / f"{i}.bin"
            path.write_bytes(i.to_bytes(8, "little"))
            paths.append(path)
        maps = TrunkMaps(None, (224, 448), 1, 0.0, "content", views, "default", {"benchmark": way},
                         cache=Path(tmp) / "cache")
        keys = [photo_key(p) for p in paths]
        t0 = time.perf_counter()
        kinds = {}
        for i, key in enumerate(keys):
            rows = pattern[(5 * i + np.arange(1 + views)) % len(pattern)]
            if way == "mapped":  # as TrunkMaps keeps what the cache or the trunk gives it
                maps._keep(key, "plain", rows[:1])
            else:
                kinds[(key, "plain")] = rows[:1].copy()
        for i, key in enumerate(keys):
            rows = pattern[(5 * i + np.arange(1 + views)) % len(pattern)]
            if way == "mapped":
                maps._keep(key, "views", rows[1:])
            else:
                kinds[(key, "views")] = rows[1:].copy()
        if way == "mapped":
            store = maps.store(paths, views=True)
        elif way == "memory":  # joined once, the kinds' own arrays let go
            joined = []
            for key in keys:
                joined.append(np.concatenate([kinds.pop((key, "plain")), kinds.pop((key, "views"))]))
            store = MapStore(joined)
        else:  # joined as a copy beside the kinds' arrays
            store = MapStore([np.concatenate([kinds[(k, "plain")], kinds[(k, "views")]]) for k in keys])
        built = time.perf_counter() - t0
        assert len(store) == photos and store[0].shape == (1 + views, *shape)
        t0 = time.perf_counter()
        epoch_rng = np.random.default_rng(1)
        total = 0.0
        for i in rng.permutation(photos):
            total += float(any_view(store[int(i)], epoch_rng)[0, 0, 0])
        epoch = time.perf_counter() - t0
        resident, own = resident_mb()
        held = photos * (1 + views) * int(np.prod(shape)) * 2
    return {"maps_mb": held / 2**20, "resident_mb": resident, "own_mb": own, "resident_growth_mb": resident - start[0],
            "own_growth_mb": own - start[1], "peak_mb": peak_mb(), "store_s": built, "epoch_reads_s": epoch,
            "checksum": total}


def run_way(way: str, args, limit) -> dict:
    cmd = [sys.executable, __file__, "--way", way, "--photos", str(args.photos), "--views", str(args.views),
           "--shape", args.shape]
    out = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit.preexec if limit else None)
    if out.returncode != 0:
        why = "killed (out of memory)" if out.returncode in (-9, 137) else f"exit status {out.returncode}"
        return {"failed": why, "stderr": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", type=int, default=6000, help="training photos (default 6000: a 7,980-photo split's "
                   "gallery; 24000 at the competition's size)")
    p.add_argument("--views", type=int, default=4, help="augmented views per photo (default 4, flukes_lite0_cpu)")
    p.add_argument("--shape", default="7,14,192", help="one view's map h,w,c (default Lite0's at 224 x 448)")
    p.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    p.add_argument("--memory-limit-gb", type=float, help="each way inside a memory cgroup of this size")
    p.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # one way, in this process
    args = p.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split(","))
    if args.way:
        print(json.dumps(one_way(args.way, args.photos, args.views, shape)))
        return 0
    ways = [w for w in args.ways.split(",") if w]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown:
        p.error(f"--ways: unknown {unknown}; expected some of {list(WAYS)}")
    from benchmarks.common import MemoryLimit

    rows = {}
    for way in ways:
        limit = MemoryLimit(args.memory_limit_gb) if args.memory_limit_gb else None
        try:
            rows[way] = r = run_way(way, args, limit)
        finally:
            if limit:
                rows[way]["cgroup_peak_mb"] = limit.peak_mb()
                limit.close()
        inside = f" (cgroup of {args.memory_limit_gb:g} GB, its peak {r['cgroup_peak_mb']:,.0f} MB)" if limit else ""
        if "failed" in r:
            print(f"{way:>6}: {r['failed']}{inside}", flush=True)
            continue
        print(f"{way:>6}: maps {r['maps_mb']:,.0f} MB; after the store and an epoch's reads resident "
              f"{r['resident_mb']:,.0f} MB (+{r['resident_growth_mb']:,.0f}), own {r['own_mb']:,.0f} MB "
              f"(+{r['own_growth_mb']:,.0f}, {r['own_growth_mb'] / r['maps_mb']:.2f}x the maps), peak resident "
              f"{r['peak_mb']:,.0f} MB; store {r['store_s']:.2f} s, epoch's reads {r['epoch_reads_s']:.2f} s{inside}",
              flush=True)
    base = rows.get("memory", {})
    ratios = {}
    if "own_growth_mb" in base:
        for way, r in rows.items():
            if way != "memory" and "own_growth_mb" in r:
                ratios[way] = {"own_growth": r["own_growth_mb"] / max(base["own_growth_mb"], 1e-9),
                               "epoch_reads": r["epoch_reads_s"] / max(base["epoch_reads_s"], 1e-9)}
                print(f"{way} / memory: own memory's growth {ratios[way]['own_growth']:.3f}x, an epoch's reads "
                      f"{ratios[way]['epoch_reads']:.2f}x the seconds")
    print(json.dumps({"benchmark": "trunk_store_memory", "photos": args.photos, "views": args.views,
                      "shape": list(shape), "memory_limit_gb": args.memory_limit_gb,
                      "rows": rows, "over_memory": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
