"""Would matching a shortlisted pair's two photos directly verify what LNBNN's correspondences could not? Not a test.

    python benchmarks/flukes/direct_pairs.py --runs 'runs/hbjl/seed{S}/joint' --data 'runs/hbk/seed{S}/data' \
        --seeds 0,1,2 --queries 40 --cache runs/kpstore [--kinds keypoints_checked]

The joint identification verifies a shortlisted pair from the correspondences its LNBNN votes give (each query
keypoint's nearest neighbours in the whole gallery): a candidate another source proposed, with few votes of that kind,
goes unverified by it (``whale/keypoints/verify.py``). Here, on a seeded sample of ``--queries`` validation queries
of a joint run (its ``pairs_val.npz``, the features read from ``--cache``), every shortlisted pair is matched
directly: each query keypoint's nearest keypoint in the candidate photo alone, kept when the two are each other's
nearest and pass Lowe's ratio (0.9), every keypoint of both photos, then fitted by the kind's own verifier
(``verify`` of its config). Printed per kind, for the pairs the kind verified and those it did not, same whale or
not: how many, their direct inliers (median, 90th percentile) and the share with 15 or more, and the seconds a pair.
The last stdout line is ``{"benchmark": "direct_pairs", ...}``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from whale.data import ImageSet, fold_data, load_competition  # noqa: E402
from whale.identify.check import load_table  # noqa: E402
from whale.identify.config import load_joint_config  # noqa: E402
from whale.inference.keypoints import Photos  # noqa: E402
from whale.keypoints.pairs import pair_matches  # noqa: E402
from whale.keypoints.verify import GeometricVerifier  # noqa: E402

RATIO = 0.9
STRONG = 15


def direct_inliers(q, g, verifier) -> int:
    """Verified correspondences of photos ``q`` and ``g`` matched directly (:func:`whale.keypoints.pairs.pair_matches`:
    mutual nearest neighbours, Lowe's ratio ``RATIO``, the kind's own verifier)."""
    return len(pair_matches(q, g, verifier, ratio=RATIO)[0])


def one_seed(run: Path, data: Path, kinds, queries: int, cache: str) -> dict:
    meta = json.loads((run / "run.json").read_text())
    comp = load_competition(data)
    split = fold_data(comp, int(meta["fold"]), int(meta.get("seed", 0)))
    photos = Photos([ImageSet.known(comp), ImageSet.test(comp), split.val])
    table = load_table(run / "pairs_val.npz")
    col = {c: i for i, c in enumerate(table.columns)}
    same = (np.asarray(split.gallery.ids, str)[table.pairs[:, 1]] == np.asarray(split.val.ids, str)[table.pairs[:, 0]])
    chosen = np.random.default_rng(0).choice(len(split.val), min(queries, len(split.val)), replace=False)
    rows = np.flatnonzero(np.isin(table.pairs[:, 0], chosen))
    out = {}
    for name, kcfg in kinds:
        f = photos.extract(kcfg, cache, 1, False, {}, {}, lambda *_: None, name)
        qf, gf = f.of(split.val), f.of(split.gallery)
        t0 = time.perf_counter()
        verifier = GeometricVerifier(kcfg.verify)
        inl = np.array([direct_inliers(qf[i], gf[j], verifier) for i, j in table.pairs[rows]])
        seconds = (time.perf_counter() - t0) / max(len(rows), 1)
        verified = table.rows[rows, col[f"{name}.inliers"]] > 0
        groups = {}
        for label, where in (("verified", verified), ("not verified", ~verified)):
            for whale, s in (("same whale", True), ("other whale", False)):
                m = where & (same[rows] == s)
                if m.any():
                    groups[f"{label}, {whale}"] = {"pairs": int(m.sum()), "median": float(np.median(inl[m])),
                                                   "p90": float(np.percentile(inl[m], 90)),
                                                   f"share >= {STRONG}": float((inl[m] >= STRONG).mean())}
        out[name] = {"groups": groups, "seconds_a_pair": seconds, "pairs": int(len(rows))}
        print(f"{run} {name}: {len(rows)} pairs of {len(chosen)} queries, {seconds * 1000:.1f} ms a pair", flush=True)
        for g, r in groups.items():
            print(f"  {g}: {r['pairs']} pairs, direct inliers median {r['median']:.0f}, p90 {r['p90']:.0f}, "
                  f"{STRONG} or more {r[f'share >= {STRONG}']:.3f}", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="joint run folders with {S} for the split seed")
    p.add_argument("--data", required=True, help="split folders with {S}")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    p.add_argument("--queries", type=int, default=40, help="validation queries sampled a seed (default 40)")
    p.add_argument("--cache", required=True, help="the feature store the joint run read")
    p.add_argument("--config", default=str(ROOT / "configs" / "joint.yaml"), help="the joint config (its kinds)")
    p.add_argument("--kinds", default="keypoints_checked", help="comma-separated kinds of the config (default "
                   "keypoints_checked: XFeat's 4,000 keypoints a photo make a pair about 10x as slow)")
    args = p.parse_args(argv)
    wanted = args.kinds.split(",")
    kinds = [(n, k) for n, k in load_joint_config(args.config).kinds if n in wanted]
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = {s: one_seed(Path(args.runs.replace("{S}", str(s))), Path(args.data.replace("{S}", str(s))), kinds,
                            args.queries, args.cache) for s in seeds}
    print(json.dumps({"benchmark": "direct_pairs", "seeds": seeds, "per_seed": per_seed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
