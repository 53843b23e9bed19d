"""A stored tree classifier's predictions: scikit-learn's compiled walk of its arrays, against NumPy's. Not a test.

    python benchmarks/speed/tree_walk.py [--rows 200000] [--trees 200] [--repeats 2]

A keypoint selector or match check read back from the store (:mod:`whale.keypoints.selectcache`) predicts with
:class:`whale.core.trees.TreeEnsemble`, from the fitted trees' arrays (no pickle). It walked them with NumPy, one tree
at a time over every row (``TreeEnsemble.numpy_raw``, still the fallback); it now hands the same nodes to
scikit-learn's compiled walk (``TreeEnsemble.compiled``) and adds the trees' values from the baseline in the same
order. This fits scikit-learn's ``HistGradientBoostingClassifier`` as the selector fits it (``--trees`` iterations at
most, 31 leaves) on random keypoint-like rows (70 numbers: a 64-number descriptor and 6 of context), then times on
``--rows`` new rows, alternated ``--repeats`` times in one process: the NumPy walk, today's, and scikit-learn's own
``predict_proba`` (the model as fitted); and checks that the three give the same probabilities to the bit. Prints
seconds, rows a second, the ratios and, as its last line, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--trees", type=int, default=200)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    from scipy.special import expit
    from sklearn.ensemble import HistGradientBoostingClassifier

    from whale.core.trees import TreeEnsemble

    rng = np.random.default_rng(0)
    train = rng.random((100_000, 70)).astype(np.float32)
    y = (train[:, :8].sum(axis=1) + 0.5 * rng.normal(size=len(train))) > 4.2
    t0 = time.perf_counter()
    model = HistGradientBoostingClassifier(max_iter=args.trees, max_leaf_nodes=31, random_state=0).fit(train, y)
    print(f"fitted {model.n_iter_} trees on {len(train):,} rows in {time.perf_counter() - t0:.0f} s")
    ensemble = TreeEnsemble.from_model(model)
    x = rng.random((args.rows, 70)).astype(np.float32)
    assert ensemble.compiled() is not None, "this scikit-learn has no compiled walk the arrays could use"
    ways = {"NumPy walk": lambda: expit(ensemble.numpy_raw(x)), "now": lambda: ensemble.predict_proba(x)[:, 1],
            "scikit-learn": lambda: model.predict_proba(x)[:, 1]}
    seconds = {name: [] for name in ways}
    out = {}
    for _ in range(args.repeats):
        for name, way in ways.items():
            t0 = time.perf_counter()
            out[name] = way()
            seconds[name].append(time.perf_counter() - t0)
    best = {name: float(min(v)) for name, v in seconds.items()}
    same = all(np.array_equal(out["scikit-learn"], v) for v in out.values())
    for name, s in best.items():
        print(f"{name:>13}: {s:.2f} s, {args.rows / s:,.0f} rows a second (fastest of {args.repeats})")
    ratios = {"numpy / now": best["NumPy walk"] / best["now"],
              "now / scikit-learn": best["now"] / best["scikit-learn"]}
    print(f"now {ratios['numpy / now']:.1f}x as fast as the NumPy walk, {ratios['now / scikit-learn']:.1f}x "
          f"scikit-learn's time; probabilities {'equal to the bit' if same else 'DIFFERENT'} all three ways")
    print(json.dumps({"benchmark": "tree_walk", "rows": args.rows, "trees": int(model.n_iter_), "seconds": best,
                      "ratios": ratios, "equal": same}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
