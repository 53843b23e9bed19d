"""What a fresh head costs the scorer: the trainer builds a new HeadScorer every mining and validation. Not a test.

    python benchmarks/speed/scorer_rebuild.py [--heads 12] [--n 424] [--d 128] [--mid 32] [--hidden 0]
                                        [--rate-n 2000] [--rate-d 512]

The training loop changes the head's weights every epoch, so each mining block and each
validation scores with a new :class:`whale.models.HeadScorer` of the same shapes. This builds
``--heads`` heads of one architecture with different random weights and, for each, times
``HeadScorer(head)`` (its numerical check included) plus one symmetric ``--n`` x ``--n``
matrix: the demo's mining step (424 training images, d = 128, mid = 32). The first head pays
the compilation; the figure is the mean of the later ones and its ratio to the first, measured
in the same run. Every matrix is also checked against ``head.predict`` on 2,000 pairs.

Then the price per pair: one head (``--rate-d`` features), the symmetric ``--rate-n`` x
``--rate-n`` matrix scored with the weights as arguments (what training uses) and folded in as
constants (``HeadScorer(head, constants=True)``, what inference uses), each timed after a
warm-up call that compiles it, in pairs per second, and their ratio.

Prints one line per head and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", type=int, default=12, help="heads of the same shapes, new weights each")
    p.add_argument("--n", type=int, default=424, help="images of the symmetric matrix")
    p.add_argument("--d", type=int, default=128, help="feature dimension")
    p.add_argument("--mid", type=int, default=32, help="the head's per-feature width")
    p.add_argument("--hidden", type=int, default=0, help="the head's hidden dense width (0: none)")
    p.add_argument("--rate-n", type=int, default=2000, help="images of the per-pair speed matrix (0: skip)")
    p.add_argument("--rate-d", type=int, default=512, help="feature dimension of the per-pair speed head")
    args = p.parse_args(argv)
    t0 = time.time()
    common.setup_tensorflow()
    import keras

    from whale.models import HeadScorer, build_head

    rng = np.random.default_rng(0)
    f = rng.random((args.n, args.d), dtype=np.float32)
    ia, ib = rng.integers(0, args.n, 2000), rng.integers(0, args.n, 2000)
    seconds, worst = [], 0.0
    for h in range(args.heads):
        keras.utils.set_random_seed(h)
        head = build_head(args.d, args.mid, args.hidden)
        t = time.perf_counter()
        scorer = HeadScorer(head)
        m = scorer.matrix(f, progress=False)
        seconds.append(time.perf_counter() - t)
        ref = np.asarray(head.predict([f[ia], f[ib]], batch_size=2048, verbose=0), np.float32).reshape(-1)
        worst = max(worst, float(np.abs(m[ia, ib] - ref).max()))
        print(f"head {h}: scorer + {args.n} x {args.n} matrix {seconds[-1]:.3f} s "
              f"(exact formula: {scorer.exact_formula})", flush=True)
    later = float(np.mean(seconds[1:])) if len(seconds) > 1 else float("nan")
    print(f"first head {seconds[0]:.3f} s (compiles), later heads {later:.3f} s each: "
          f"{seconds[0] / later:.1f}x less; max abs difference from head.predict {worst:.2e}")
    metrics = {"first_s": round(seconds[0], 4), "later_mean_s": round(later, 4),
               "ratio_first_to_later": round(seconds[0] / later, 2), "max_abs_diff": f"{worst:.2e}",
               "n": args.n, "d": args.d, "mid": args.mid, "hidden": args.hidden}
    if args.rate_n > 0:
        keras.utils.set_random_seed(0)
        head = build_head(args.rate_d, args.mid, args.hidden)
        g = rng.random((args.rate_n, args.rate_d), dtype=np.float32)
        pairs = args.rate_n * (args.rate_n + 1) / 2
        rates = {}
        for form, constants in (("arguments", False), ("constants", True)):
            scorer = HeadScorer(head, constants=constants)
            scorer.matrix(g[:64], progress=False)  # compiles the block function
            t = time.perf_counter()
            scorer.matrix(g, progress=False)
            rates[form] = pairs / (time.perf_counter() - t)
            print(f"weights as {form}: {rates[form]:,.0f} pairs/s ({args.rate_n} x {args.rate_n}, d = {args.rate_d})")
        ratio = rates["constants"] / rates["arguments"]
        print(f"constants / arguments: {ratio:.2f}x per pair")
        metrics.update(rate_arguments=round(rates["arguments"]), rate_constants=round(rates["constants"]),
                       rate_ratio_constants=round(ratio, 3))
    print(common.final_json("scorer_rebuild", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
