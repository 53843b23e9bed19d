"""Where ``new_whale`` goes, rule by rule, on the test sets of a ``benchmarks/flukes/humpback.py`` run: MAP@5 and the
share of queries answered ``new_whale`` first, beside the true share.

Rows, each a submission of the run's keypoint score files (``OUT/seed*/keypoints``), every threshold chosen on
validation except the last row's:
- ``--tune``: the threshold that maximises validation MAP@5 (what the benchmark ships);
- ``--tune --calibrate --force-calibrated``: ``new_whale`` inserted where it maximises expected MAP@5 under
  probabilities calibrated on validation (:mod:`whale.ranking.calibrate`);
- thinned: the threshold tuned on validation after ``--thin`` of the known queries lost all but one (seeded) gallery
  photo of their own whale, so validation holds whales seen once as the test does;
- ``--new-whale-fraction``: ``new_whale`` first for exactly the true share;
- the threshold tuned on the test itself: the best any threshold does, a bound read, never a choice.

Usage:
    python benchmarks/flukes/humpback_newwhale.py runs/hb56b --thin 0.44
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.flukes.shared import (NEW_WHALE, WHY_NEW_FIRST, read_submission, submission_metrics,  # noqa: E402
                                      whale_command)

COLUMNS = (("map5", "MAP@5"), ("map5_known", "known"), ("map5_new", "new_whale"), ("new_whale_first", "new_whale first"),
           *WHY_NEW_FIRST)


def thinned(scores: np.ndarray, gallery_ids: np.ndarray, query_ids: np.ndarray, share: float, seed: int = 0):
    """A copy of ``scores`` where a seeded ``share`` of the known queries keeps one photo of its own whale (the
    others' scores set to 0)."""
    rng = np.random.default_rng(seed)
    out = np.array(scores, np.float32, copy=True)
    for i in np.flatnonzero(query_ids != NEW_WHALE):
        own = np.flatnonzero(gallery_ids == query_ids[i])
        if rng.random() < share and len(own) > 1:
            out[i, rng.permutation(own)[1:]] = 0
    return out


def seed_rows(seed_dir: Path, thin: float, log=print) -> dict[str, dict]:
    """``{rule: submission metrics}`` of one split seed's keypoint run."""
    from whale.ranking.newwhale import predict_top5, tune_threshold

    run, work = seed_dir / "keypoints", seed_dir / "newwhale"
    work.mkdir(exist_ok=True)
    solution = pd.read_csv(seed_dir / "data" / "test_solution.csv")
    truth = dict(zip(solution["Image"].astype(str), solution["Id"].astype(str)))
    rows = {}
    true_share = float(np.mean([v == NEW_WHALE for v in truth.values()]))
    for name, extra in (("tuned on validation (--tune)", ["--tune"]),
                        ("calibrated (--tune --calibrate --force-calibrated)", ["--tune", "--calibrate", "--force-calibrated"]),
                        ("true share (--new-whale-fraction at each seed's)", ["--new-whale-fraction", f"{true_share:.6f}"])):
        sub = work / f"{len(rows)}.csv"
        whale_command(["ensemble", str(run), *extra, "--out", str(sub)], work / f"{len(rows)}.ensemble.log", log)
        rows[name] = submission_metrics(read_submission(sub), truth)
    with np.load(run / "val.npz", allow_pickle=False) as v, np.load(run / "test.npz", allow_pickle=False) as t:
        val, g_val, q_val = v["scores"], v["gallery_ids"], v["query_ids"]
        test, g_test, queries = t["scores"], t["gallery_ids"], t["query"].astype(str)
    q_test = np.array([truth[q] for q in queries])
    for name, (scores, g, q) in ((f"tuned on validation, {thin:.0%} of known queries thinned to one photo",
                                  (thinned(val, g_val, q_val, thin), g_val, q_val)),
                                 ("tuned on the test itself (a bound, not a choice)", (test, g_test, q_test))):
        threshold = tune_threshold(scores, g, q)[0]
        rows[name] = submission_metrics(dict(zip(queries, predict_top5(test, g_test, threshold))), truth)
    return rows


def table(by_seed: dict[int, dict[str, dict]]) -> str:
    rules = list(next(iter(by_seed.values())))
    lines = ["| rule | " + " | ".join(label for _, label in COLUMNS) + " |", "| --- |" + " --- |" * len(COLUMNS)]
    for rule in rules:
        cells = []
        for key, _ in COLUMNS:
            values = np.array([rows[rule][key] for rows in by_seed.values()])
            cells.append(f"{values.mean():.3f} +- {values.std(ddof=1) if len(values) > 1 else 0:.3f}")
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    true = np.mean([next(iter(rows.values()))["new_whale_true"] for rows in by_seed.values()])
    return "\n".join(lines) + f"\n\nnew_whale's true share: {true:.3f}; mean +- sd over split seeds {sorted(by_seed)}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="a humpback.py --out folder with seed*/keypoints score files")
    p.add_argument("--thin", type=float, default=0.44,
                   help="share of known validation queries thinned to one photo of their whale (default 0.44: the "
                        "test's share of known queries whose whale has one gallery photo)")
    args = p.parse_args(argv)
    seeds = sorted(Path(args.out).glob("seed*/keypoints/test.npz"))
    if not seeds:
        p.error(f"{args.out}: no seed*/keypoints/test.npz (run benchmarks/flukes/humpback.py --out {args.out} first)")
    by_seed = {int(f.parent.parent.name[4:]): seed_rows(f.parent.parent, args.thin) for f in seeds}
    print(table(by_seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
