"""How many crops a second a trunk run's frozen trunk takes on this machine, per backend and precision. Not a test.

    python benchmarks/speed/trunk_rate.py [--config configs/flukes_lite0_cpu_long.yaml] [--batches 3]
        [--variants tensorflow:float32,jax:float32,tensorflow:mixed_bfloat16] [--photos 31920]

A trunk run (``trunk: {layer, views}``) pushes every training photo's plain crop and ``views`` augmented crops
through the branch's frozen first layers once (:class:`whale.inference.trunk.TrunkMaps`); at the competition's size
that pass is most of the network step's time before any training. This builds the trunk of ``--config`` as
``TrunkMaps.for_config`` does, in a process of its own for each ``--variants`` entry (``BACKEND:POLICY``, the
first one the baseline), times ``predict_on_batch`` on batches of 64 crops at the config's input size (after one
untimed call: the trace), and prints each variant's crops a second (the best of ``--batches``), the ratio to the
baseline, the milliseconds the config's augmentation takes a view (one real photo's content crop, 64 views, in the
baseline's process), the machine reference measured in the same run, and how many minutes the ``(1 + views)``
crops of ``--photos`` training photos would take at the baseline's rate; as its last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BATCH = 64


def measure(config: str, batches: int, policy: str, augment: bool) -> dict:
    """One variant, in this process (its backend chosen by ``KERAS_BACKEND`` before Keras is imported)."""
    import keras
    import numpy as np

    from whale.config import load_config
    from whale.inference.trunk import TrunkMaps

    keras.mixed_precision.set_global_policy(policy)
    cfg = load_config(config)
    maps, _ = TrunkMaps.for_config(cfg, progress=False)
    x = np.random.default_rng(0).uniform(0, 255, (BATCH, *maps.image_size, maps.channels)).astype(np.float32)
    t0 = time.perf_counter()
    maps.trunk.predict_on_batch(x)
    first = time.perf_counter() - t0
    seconds = []
    for _ in range(batches):
        t0 = time.perf_counter()
        maps.trunk.predict_on_batch(x)
        seconds.append(time.perf_counter() - t0)
    out = {"crops_per_s": BATCH / min(seconds), "first_call_s": first, "views": cfg.trunk.views}
    if augment:
        from whale.data import crop_size_for
        from whale.data.augment import build_augmenter
        from whale.data.images import load_crop

        photo = sorted((ROOT.parent / "shared" / "data" / "humpback" / "train").glob("*.jpg"))[0]
        crop = load_crop(photo, None, crop_size_for(maps.image_size), channels=maps.channels, margin=cfg.box_margin,
                         crop=cfg.crop)
        aug = build_augmenter(maps.image_size, channels=maps.channels, style=cfg.augment_style)
        t0 = time.perf_counter()
        for v in range(BATCH):
            aug(crop, np.random.default_rng([0, v]))
        out["augment_ms_a_view"] = 1000 * (time.perf_counter() - t0) / BATCH
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "flukes_lite0_cpu_long.yaml"))
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--variants", default="tensorflow:float32,jax:float32,tensorflow:mixed_bfloat16",
                   help="comma-separated BACKEND:POLICY, the first the baseline")
    p.add_argument("--photos", type=int, default=31920, help="training photos of the projection")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child process: BACKEND:POLICY:AUGMENT
    args = p.parse_args(argv)
    if args.one:
        _, policy, augment = args.one.split(":")
        print(json.dumps(measure(args.config, args.batches, policy, augment == "1")))
        return 0
    source = ROOT.parent / "shared" / "data" / "humpback"
    if not (source / "train").is_dir():
        print(f"{source / 'train'}: no photos here (the shared flukes sit beside the checkout); nothing measured")
        return 0
    from benchmarks.flukes.shared import machine_reference

    reference = machine_reference(source)
    rows = {}
    for i, variant in enumerate(args.variants.split(",")):
        backend, policy = variant.split(":")
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        done = subprocess.run([sys.executable, __file__, "--config", args.config, "--batches", str(args.batches),
                               "--one", f"{backend}:{policy}:{int(i == 0)}"], env=env, capture_output=True, text=True)
        if done.returncode:
            print(f"{variant}: failed\n{done.stderr[-2000:]}")
            return 1
        rows[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    base = next(iter(rows))
    for variant, row in rows.items():
        print(f"{variant:>28}: {row['crops_per_s']:.1f} crops/s, {row['crops_per_s'] / rows[base]['crops_per_s']:.2f}x "
              f"the baseline (first call {row['first_call_s']:.1f} s)")
    b = rows[base]
    crops = args.photos * (1 + b["views"])
    minutes = crops / b["crops_per_s"] / 60
    print(f"augmentation: {b['augment_ms_a_view']:.1f} ms a view; {args.photos:,} training photos x {1 + b['views']} "
          f"crops = {crops:,} crops: {minutes:.0f} min through the trunk at the baseline's rate "
          f"(+{args.photos * b['views'] * b['augment_ms_a_view'] / 60000:.0f} min augmenting the views); machine "
          f"reference {reference:.1f} s")
    print(json.dumps({"benchmark": "trunk_rate", "config": Path(args.config).name, "rows": rows,
                      "projection": {"photos": args.photos, "crops": crops, "trunk_minutes": minutes},
                      "reference_s": reference}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
