"""What a second run could add to a first, on validation: of the known queries the first run (the keypoint
matcher) does not hold in its top 5 individuals, how many the second (a trained run) does, and the most that
moving them all to the first rank could add to MAP@5 over every validation query.

Reads the two runs' ``val.npz`` (``whale score``'s ``RUN/val.npz`` or ``whale train``'s ``RUN/scores/val.npz``):
the same queries, the second's gallery holding the first's. Top 5 by per-individual max, as the ensemble ranks.

Usage:
    python benchmarks/flukes/humpback_misses.py runs/cold_s0/seed0/keypoints runs/learned140_s0/seed0/learned
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.ranking.topids import top_ids  # noqa: E402


def val_file(run: str) -> Path:
    """The run's validation score file, found as ``whale ensemble`` finds it (:func:`score_path`)."""
    from whale.inference.scorefile import score_path

    path = score_path(run, "val")
    if not path.is_file():
        raise SystemExit(f"{run}: no validation score file ({path})")
    return path


def misses(first, second, open_label: str = "new_whale") -> dict:
    """Counts over the known validation queries (their individual is in the gallery) of two score files."""
    if sorted(map(str, first.query)) != sorted(map(str, second.query)):
        raise SystemExit("the two runs' validation files hold different queries")
    truth = np.asarray(first.query_ids, dtype=str)
    known = np.isin(truth, np.asarray(first.gallery_ids, dtype=str)) & (truth != open_label)
    order = {q: i for i, q in enumerate(map(str, second.query))}
    rows = np.array([order[q] for q in map(str, first.query)])
    hit_a = (top_ids(first, k=5, open_label=open_label).names == truth[:, None]).any(1) & known
    hit_b = (top_ids(second, k=5, open_label=open_label).names[rows] == truth[:, None]).any(1) & known
    added = int((hit_b & ~hit_a).sum())
    return {"queries": len(truth), "known": int(known.sum()), "first_top5": int(hit_a.sum()),
            "second_top5": int(hit_b.sum()), "first_misses": int((known & ~hit_a).sum()),
            "second_finds_of_them": added, "both": int((hit_a & hit_b).sum()),
            "map5_bound": added / max(len(truth), 1)}


def main(argv=None) -> int:
    from whale.inference.scorefile import load_score_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first", help="the run ranked first (e.g. the keypoint matcher's whale score --out)")
    p.add_argument("second", help="the run that might add to it (e.g. a whale train --out)")
    args = p.parse_args(argv)
    m = misses(load_score_file(val_file(args.first)), load_score_file(val_file(args.second)))
    print(f"known validation queries {m['known']} of {m['queries']}: first run's top 5 holds {m['first_top5']}, "
          f"second's {m['second_top5']}, both {m['both']}")
    print(f"the first misses {m['first_misses']}; the second holds {m['second_finds_of_them']} of them "
          f"({m['second_finds_of_them'] / max(m['first_misses'], 1):.3f}): at most +{m['map5_bound']:.3f} MAP@5 "
          f"over the {m['queries']} validation queries, were each moved to the first rank with nothing lost")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
