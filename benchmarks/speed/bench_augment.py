"""The training augmentation's cost per image: one random stream for the pipeline vs one per transform. Not a test.

    python benchmarks/speed/bench_augment.py [--size 64] [--channels 1] [--images 2000] [--repeats 3]

:class:`whale.data.augment.Augmenter` draws one seed per image and gives every transform of
its albumentations pipeline the same pair of generators made from it. Before, it seeded every
node of the pipeline apart with ``set_random_seed`` (parents first, so each ``Compose`` and
``OneOf`` also re-seeded its children before they were overwritten): 24 generator pairs per
image for the 11 nodes of the 1-channel pipeline. Both are deterministic given the caller's
generator and give independent draws; this times both on one uniform-noise image of the
demo's crop shape (``crop_size_for(--size)`` px a side, ``--channels``), alternating them ``--repeats`` times on one
core, and prints ms per image, the ratio, and as its last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402


def per_transform_seeding(aug):
    """The former ``Augmenter.__call__``: one ``set_random_seed`` per node, parents first."""
    compose, nodes = aug._pipeline()

    def call(image, rng):
        for node, seed in zip(nodes, rng.integers(0, 2**63 - 1, size=len(nodes))):
            node.set_random_seed(int(seed))
        return compose(image=image)["image"]
    return call


def ms_per_image(fn, image, n: int) -> float:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(image, rng)
    return (time.perf_counter() - t0) / n * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=64, help="model input side (the demo's 64)")
    p.add_argument("--channels", type=int, default=1, choices=(1, 3))
    p.add_argument("--images", type=int, default=2000, help="images per timing")
    p.add_argument("--repeats", type=int, default=3, help="alternating timings of each; the best is kept")
    args = p.parse_args(argv)
    from whale.data import crop_size_for
    from whale.data.augment import Augmenter

    side = crop_size_for(args.size)
    image = np.random.default_rng(1).integers(0, 256, (side, side, args.channels), dtype=np.uint8)
    shared = Augmenter(args.size, channels=args.channels)
    former = per_transform_seeding(Augmenter(args.size, channels=args.channels))
    nodes = len(shared._pipeline()[1])
    for fn in (shared, former):
        ms_per_image(fn, image, 50)  # warm up
    times = {"shared": [], "per_transform": []}
    for _ in range(args.repeats):
        times["shared"].append(ms_per_image(shared, image, args.images))
        times["per_transform"].append(ms_per_image(former, image, args.images))
    best = {k: min(v) for k, v in times.items()}
    ratio = best["per_transform"] / best["shared"]
    print(f"{side} px crop -> {args.size} px, {args.channels} channel(s), {nodes} pipeline nodes, "
          f"best of {args.repeats} x {args.images} images on one thread")
    print(f"  one stream per image (Augmenter):      {best['shared']:.3f} ms/image")
    print(f"  one seed per transform (former):       {best['per_transform']:.3f} ms/image")
    print(f"  speed-up: {ratio:.2f}x")
    print(json.dumps({"benchmark": "bench_augment", "size": args.size, "channels": args.channels,
                      "nodes": nodes, "ms_shared": round(best["shared"], 4),
                      "ms_per_transform": round(best["per_transform"], 4), "speedup": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
