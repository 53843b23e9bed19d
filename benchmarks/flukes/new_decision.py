"""Where to put `new_whale`: each query's own decision against the one tuned threshold. Not a test.

    python benchmarks/flukes/new_decision.py --runs 'runs/hbjc/seed{S}/joint' --data 'runs/hbk/seed{S}/data' \
        --seeds 0,1,2 [--share 0.276] [--views]

Per split seed, the run's validation (its ``val.npz``, with the query ids: thinned where the run's check was) and
test (truth from the split folder's ``test_solution.csv``), each query's five best individuals by the per-id maximum
of the run's scores:

* **threshold**: the toolkit's rule (``whale ensemble --tune``): ``new_whale`` placed before the first individual
  scoring below one threshold, tuned on the validation's MAP@5 with its new whales weighted to ``--share`` (as
  ``--tune-new-share``), here on the run's own scores (a 201-step grid on [0, 1]);
* **expected AP**: per query, logistic regressions on its five best scores (their log-odds, the first two's gap, the
  sum of their logs; with ``--views`` also the best three of each of the run's thinned views, ``thinned/<view>``)
  give P(new whale), weighted to the share, and for a known whale P(its id is the r-th), r = 1..5; ``new_whale`` goes
  where the expected AP@5 is highest. Fitted on the validation (its own figure cross-fitted in 5 groups of queries),
  applied to the test.

Printed per seed: each rule's validation and test MAP@5 and the test's share of queries with ``new_whale`` first,
and the test's ceiling for any rule on these five (``oracle``: ``new_whale`` first for the new whales alone); the
last stdout line is ``{"benchmark": "new_decision", ...}``. The test never chooses anything.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from whale import NEW_WHALE  # noqa: E402
from whale.core.arrays import IdGroups  # noqa: E402
from whale.inference.scorefile import load_score_file  # noqa: E402

TOP = 5


def best_ids(f) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, top [n_q, 5], scores [n_q, 5])``: a score file's individuals (``new_whale`` photos left out), each
    query's five best by the per-id maximum and their scores."""
    groups = IdGroups.of(np.asarray(f.gallery_ids, str))
    best = groups.max(np.asarray(f.scores), np.float64)
    top = np.argsort(-best, 1)[:, :TOP]
    return groups.names, top, np.take_along_axis(best, top, 1)


def features(v: np.ndarray, n: int = TOP) -> np.ndarray:
    """Per query: the log-odds of its ``n`` best scores, the first two's gap, the sum of their logs."""
    p = np.clip(v[:, :n], 1e-7, 1 - 1e-7)
    lo = np.log(p / (1 - p))
    return np.c_[lo, lo[:, :1] - lo[:, 1:2], np.log(p).sum(1, keepdims=True)]


def truth_rank(ids, top, truth) -> np.ndarray:
    """Each query's own individual's place among its five (0-based; 9: not among them or a new whale)."""
    at = np.full(len(truth), 9)
    for i, t in enumerate(truth):
        hit = np.flatnonzero(ids[top[i]] == t)
        at[i] = hit[0] if len(hit) else 9
    return at


def ap_at(k: np.ndarray, rank: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Each query's AP@5 with ``new_whale`` at place ``k`` (0..5; 5: not among the five)."""
    shifted = np.where(rank >= k, rank + 1, rank)
    known = np.where(shifted < TOP, 1.0 / (shifted + 1), 0.0)
    return np.where(new, np.where(k < TOP, 1.0 / (k + 1), 0.0), known)


def share_weights(new: np.ndarray, share: float) -> np.ndarray:
    w = np.ones(len(new))
    w[new], w[~new] = share / max(new.mean(), 1e-9), (1 - share) / max(1 - new.mean(), 1e-9)
    return w


def fit_rule(x: np.ndarray, new: np.ndarray, rank: np.ndarray, share: float):
    """The expected-AP rule fitted on ``x`` (validation features): a function of features to ``new_whale``'s place."""
    from sklearn.linear_model import LogisticRegression

    def fitted(y, rows, w=None):
        if y[rows].min() == y[rows].max():  # one class only: its constant probability
            return lambda z, c=float(y[rows][0]): np.full(len(z), c)
        m = LogisticRegression(max_iter=2000).fit(x[rows], y[rows], sample_weight=w)
        return lambda z: m.predict_proba(z)[:, 1]

    p_new = fitted(new.astype(int), np.arange(len(x)), share_weights(new, share))
    p_rank = [fitted((rank == r).astype(int), np.flatnonzero(~new)) for r in range(TOP)]

    def place(z: np.ndarray) -> np.ndarray:
        pi = p_new(z)
        q = np.stack([m(z) for m in p_rank], 1)
        expected = []
        for k in range(TOP + 1):
            e = pi * (1.0 / (k + 1) if k < TOP else 0.0)
            for r in range(TOP):
                s = r + 1 if r >= k else r
                e = e + (1 - pi) * q[:, r] * (1.0 / (s + 1) if s < TOP else 0.0)
            expected.append(e)
        return np.argmax(np.stack(expected, 1), 1)

    return place


def one_seed(run: Path, data: Path, share: float, views: bool) -> dict[str, float]:
    import pandas as pd
    from sklearn.model_selection import KFold

    val = load_score_file(run / "val.npz", need_query_ids=True)
    test = load_score_file(run / "test.npz")
    solution = pd.read_csv(data / "test_solution.csv").set_index("Image").Id
    v_truth = np.asarray(val.query_ids, str)
    t_truth = np.array([solution[str(n)] for n in test.query], str)
    (v_ids, v_top, v_s), (t_ids, t_top, t_s) = best_ids(val), best_ids(test)
    v_rank, t_rank = truth_rank(v_ids, v_top, v_truth), truth_rank(t_ids, t_top, t_truth)
    v_new, t_new = v_truth == NEW_WHALE, t_truth == NEW_WHALE
    xv, xt = features(v_s), features(t_s)
    if views:
        for folder in sorted(p for p in (run / "thinned").glob("*") if (p / "val.npz").is_file()):
            a, b = best_ids(load_score_file(folder / "val.npz", need_query_ids=True))[2], best_ids(
                load_score_file(folder / "test.npz"))[2]
            xv, xt = np.c_[xv, features(a, 3)[:, :3]], np.c_[xt, features(b, 3)[:, :3]]
    w = share_weights(v_new, share)
    grid = np.linspace(0, 1, 201)
    tuned = [np.average(ap_at((v_s >= g).sum(1), v_rank, v_new), weights=w) for g in grid]
    g = grid[int(np.argmax(tuned))]
    t_k = (t_s >= g).sum(1)
    out = {"threshold": float(g), "threshold: validation": float(max(tuned)),
           "threshold: test": float(ap_at(t_k, t_rank, t_new).mean()),
           "threshold: new_whale first": float((t_k == 0).mean())}
    k = np.zeros(len(v_truth), int)
    for fit_rows, held in KFold(5, shuffle=True, random_state=0).split(xv):
        k[held] = fit_rule(xv[fit_rows], v_new[fit_rows], v_rank[fit_rows], share)(xv[held])
    t_k = fit_rule(xv, v_new, v_rank, share)(xt)
    out.update({"expected AP: validation": float(np.average(ap_at(k, v_rank, v_new), weights=w)),
                "expected AP: test": float(ap_at(t_k, t_rank, t_new).mean()),
                "expected AP: new_whale first": float((t_k == 0).mean()),
                "oracle: test": float(ap_at(np.where(t_new, 0, TOP), t_rank, t_new).mean())})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="run folders with {S} for the split seed (val.npz, test.npz)")
    p.add_argument("--data", required=True, help="split folders with {S} (their test_solution.csv)")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    p.add_argument("--share", type=float, default=0.276, help="new whales' weight while fitting (default 0.276)")
    p.add_argument("--views", action="store_true", help="also each thinned view's best three scores")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = {}
    for s in seeds:
        per_seed[s] = one_seed(Path(args.runs.replace("{S}", str(s))), Path(args.data.replace("{S}", str(s))),
                               args.share, args.views)
        print(f"seed {s}: " + ", ".join(f"{k} {v:.4f}" for k, v in per_seed[s].items()), flush=True)
    mean = {k: float(np.mean([r[k] for r in per_seed.values()])) for k in per_seed[seeds[0]]}
    gain = [r["expected AP: test"] - r["threshold: test"] for r in per_seed.values()]
    print("mean: " + ", ".join(f"{k} {v:.4f}" for k, v in mean.items()))
    spread = np.std(gain, ddof=1) if len(gain) > 1 else 0.0
    print(f"expected AP minus threshold, test: {np.mean(gain):+.4f} +- {spread:.4f}")
    print(json.dumps({"benchmark": "new_decision", "seeds": seeds, "per_seed": per_seed, "mean": mean}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
