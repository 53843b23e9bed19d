"""Forward-pass speed of each branch on this machine (images per second). Not a test.

    python benchmarks/speed/bench_branches.py --branches tiny convnet_v1 densenet121 --size 224

Builds each branch with random weights (no downloads), runs ``--warmup`` batches, then times
``--batches`` batches of ``--batch`` random images; prints a table and, as the last line, the
results as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend


def bench(name: str, size: int, channels: int, batch: int, warmup: int, batches: int) -> dict:
    """Time ``batches`` forward passes of branch ``name``; returns a result row."""
    import numpy as np
    import tensorflow as tf

    from whale.models import build_branch

    branch = build_branch(name, (size, size, channels))
    forward = tf.function(lambda x: branch(x, training=False), jit_compile=False)
    x = tf.constant(np.random.default_rng(0).uniform(0, 255, (batch, size, size, channels)),
                    dtype=tf.float32)
    for _ in range(warmup):
        forward(x).numpy()
    t0 = time.perf_counter()
    for _ in range(batches):
        forward(x).numpy()
    seconds = time.perf_counter() - t0
    return {"branch": name, "size": size, "channels": channels, "batch": batch,
            "params": int(branch.count_params()), "feature_dim": int(branch.output_shape[-1]),
            "s_per_batch": seconds / batches, "images_per_s": batch * batches / seconds}


def main(argv=None) -> list[dict]:
    from whale.models import BRANCHES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", nargs="+", default=sorted(BRANCHES),
                        choices=sorted(BRANCHES))
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--channels", type=int, default=3, choices=(1, 3))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args(argv)

    rows = [bench(n, args.size, args.channels, args.batch, args.warmup, args.batches)
            for n in args.branches]
    print(f"{'branch':<12} {'size':>5} {'params':>11} {'d':>5} {'s/batch':>8} {'img/s':>8}")
    for r in rows:
        print(f"{r['branch']:<12} {r['size']:>5} {r['params']:>11,} {r['feature_dim']:>5} "
              f"{r['s_per_batch']:>8.3f} {r['images_per_s']:>8.1f}")
    print(json.dumps({"device": "cpu" if not _gpu() else "gpu", "results": rows}))
    return rows


def _gpu() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


if __name__ == "__main__":
    main()
