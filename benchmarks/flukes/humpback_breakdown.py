"""Where a method of ``benchmarks/flukes/humpback.py`` wins and loses: known queries by their individual's gallery
photos.

Reads what a finished run left (``OUT/seed*/data/train.csv``, ``test_solution.csv`` and the method's
submission ``OUT/seed*/METHOD.csv``) and prints, per number of gallery photos of the query's individual,
how many known queries there are and their MAP@5 (mean +- sd over the seeds); no scoring is repeated.

``--misses SCORES`` (a keypoint score folder under each seed whose matcher ran the learned check,
``check.model: gbm``) also splits the known test queries whose first id is wrong by whether any photo of their
whale was verified (a score of at least :data:`whale.keypoints.check.UNVERIFIED`): a miss the check could
reorder, or one that verification never saw.

Usage:
    python benchmarks/flukes/humpback_breakdown.py runs/humpback_final            # keypoints.csv of every seed
    python benchmarks/flukes/humpback_breakdown.py runs/humpback_final --method keypoints_share
    python benchmarks/flukes/humpback_breakdown.py runs/hb56c --misses keypoints
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from whale import NEW_WHALE  # noqa: E402
from whale.metrics import map_at_k  # noqa: E402

BINS = ((1, 1, "1"), (2, 2, "2"), (3, 5, "3-5"), (6, 10**9, "6+"))
"""Gallery photos of the query's individual: ``(low, high, label)``."""


def breakdown(seed_dir: Path, method: str) -> dict[str, tuple[int, float]]:
    """``{bin label: (known queries, MAP@5)}`` of one seed's submission ``seed_dir/METHOD.csv``."""
    data = seed_dir / "data"
    photos = pd.read_csv(data / "train.csv")["Id"].value_counts()
    truth = pd.read_csv(data / "test_solution.csv")
    sub = pd.read_csv(seed_dir / f"{method}.csv")
    pred = {str(i): str(p).split() for i, p in zip(sub["Image"], sub["Id"])}
    known = truth[truth["Id"] != NEW_WHALE]
    counts = known["Id"].map(photos).to_numpy()
    out = {}
    for low, high, label in BINS:
        rows = known[(counts >= low) & (counts <= high)]
        out[label] = (len(rows), map_at_k([pred[str(n)] for n in rows["Image"]], rows["Id"].astype(str).tolist()))
    return out


def misses(seed_dir: Path, scores: str) -> dict[str, int]:
    """Known test queries of one seed by how their first id went, from the score file
    ``seed_dir/SCORES/test.npz`` of a matcher with the learned check: ``right``, ``verified`` (wrong, but a photo
    of their whale was verified) and ``unverified`` (no photo of their whale was)."""
    from whale.inference.scorefile import load_score_file
    from whale.keypoints.check import UNVERIFIED
    from whale.ranking import top_id_scores

    truth = pd.read_csv(seed_dir / "data" / "test_solution.csv")
    answer = dict(zip(truth["Image"].astype(str), truth["Id"].astype(str)))
    sf = load_score_file(seed_dir / scores / "test.npz")
    actual = np.array([answer[str(q)] for q in sf.query])
    known = actual != NEW_WHALE
    names, idx, best = top_id_scores(sf.scores[known], sf.gallery_ids, k=len(np.unique(sf.gallery_ids)))
    ranked = names[idx]
    right = ranked[:, 0] == actual[known]
    own = np.where(ranked == actual[known][:, None], best, -np.inf).max(axis=1)  # the whale's best photo's score
    return {"right": int(right.sum()), "verified": int((~right & (own >= UNVERIFIED)).sum()),
            "unverified": int((~right & (own < UNVERIFIED)).sum())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="a benchmarks/flukes/humpback.py --out folder")
    p.add_argument("--method", default="keypoints", help="the submission of each seed: OUT/seed*/METHOD.csv")
    p.add_argument("--misses", metavar="SCORES", help="also the wrong first ids by whether their whale was verified, "
                                                      "from OUT/seed*/SCORES/test.npz (a matcher with the check)")
    args = p.parse_args(argv)
    seeds = sorted(d for d in Path(args.out).glob("seed*") if (d / f"{args.method}.csv").is_file())
    if not seeds:
        print(f"{args.out}: no seed*/{args.method}.csv", file=sys.stderr)
        return 2
    per_seed = [breakdown(d, args.method) for d in seeds]
    print(f"{args.method}: known queries by their individual's photos in the gallery ({len(seeds)} seeds)")
    print("| gallery photos | known queries (mean) | MAP@5 |")
    print("| --- | --- | --- |")
    for _, _, label in BINS:
        n = np.mean([s[label][0] for s in per_seed])
        m = [s[label][1] for s in per_seed]
        print(f"| {label} | {n:.0f} | {np.mean(m):.3f} +- {np.std(m):.3f} |")
    if args.misses:
        counts = [misses(d, args.misses) for d in seeds]
        print(f"\n{args.misses}: known test queries by their first id (per seed)")
        print("| first id | " + " | ".join(d.name for d in seeds) + " |")
        print("| --- " * (len(seeds) + 1) + "|")
        for kind in ("right", "verified", "unverified"):
            print(f"| {kind} | " + " | ".join(str(c[kind]) for c in counts) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
