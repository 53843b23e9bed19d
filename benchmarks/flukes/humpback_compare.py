"""Two runs of ``benchmarks/flukes/humpback.py`` side by side, paired by split seed: each metric's mean +- sd
over the seeds both hold, for A and for B, the mean +- sd of its difference (B - A), and each seed's difference.

Reads each run's per-seed rows (``OUT/seed*/results.json``); no scoring is repeated. A side may be several
``--out`` folders (seeds run apart), and a seed found twice on one side is refused.

Usage:
    python benchmarks/flukes/humpback_compare.py --a runs/humpback_nf2000 --b runs/sel_s0 runs/sel_s1 runs/sel_s2
    python benchmarks/flukes/humpback_compare.py --a RUN_A --b RUN_B --share     # the --tune-new-share submissions
    python benchmarks/flukes/humpback_compare.py --a runs/hbk --b runs/hbf --method-b 'fusion learned X, calibrated logodds'
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.flukes.shared import KAGGLE_NEW_SHARE  # noqa: E402

METRICS = (("map5", "MAP@5, all queries"), ("map5_known", "known"), ("map5_new", "new_whale"),
           ("map5_known_no_new", "known, ids only"), ("map5_one_photo", "one-photo whales, ids only"),
           ("top1", "top-1"), ("top5", "top-5"), ("new_whale_first", "new_whale first"),
           ("new_whale_true", "new_whale true share"))


def rows_by_seed(folders: list[str], method: str) -> dict[int, dict]:
    """``{split seed: row}`` of ``method`` in the ``seed*/results.json`` under ``folders``."""
    out: dict[int, dict] = {}
    for folder in folders:
        files = sorted(Path(folder).glob("seed*/results.json"))
        if not files:
            raise SystemExit(f"{folder}: no seed*/results.json "
                             "(a finished benchmarks/flukes/humpback.py --out folder?)")
        for path in files:
            for row in json.loads(path.read_text()):
                if row["method"] != method:
                    continue
                if row["seed"] in out:
                    raise SystemExit(f"{path}: split seed {row['seed']} of {method!r} found twice on one side")
                out[row["seed"]] = row
    return out


def sd(values: np.ndarray) -> float:
    """The sample standard deviation (0 for one value)."""
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def compare(a: dict[int, dict], b: dict[int, dict]) -> str:
    """A markdown table: per metric, A's and B's mean +- sd and the paired difference (mean +- sd, each seed)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise SystemExit(f"no split seed in both runs (A: {sorted(a)}, B: {sorted(b)})")
    lines = [f"split seeds {', '.join(map(str, seeds))}",
             "| metric | A | B | B - A | B - A per seed |", "| --- | --- | --- | --- | --- |"]
    for key, label in METRICS:
        if any(key not in a[s] or key not in b[s] for s in seeds):
            continue
        va, vb = np.array([a[s][key] for s in seeds]), np.array([b[s][key] for s in seeds])
        d = vb - va
        lines.append(f"| {label} | {va.mean():.3f} +- {sd(va):.3f} | {vb.mean():.3f} +- {sd(vb):.3f} | "
                     f"{d.mean():+.3f} +- {sd(d):.3f} | " + ", ".join(f"{x:+.3f}" for x in d) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", nargs="+", required=True, help="the baseline run's --out folder(s)")
    p.add_argument("--b", nargs="+", required=True, help="the compared run's --out folder(s)")
    p.add_argument("--method", default="keypoints", help="the rows' method (default keypoints)")
    p.add_argument("--method-b", default=None,
                   help="B's rows' method when it is another (default --method), e.g. a fusion row against the matcher")
    p.add_argument("--share", action="store_true",
                   help=f"the method's rows with --tune-new-share {KAGGLE_NEW_SHARE} (its _share submission)")
    args = p.parse_args(argv)
    method = f"{args.method}, --tune-new-share {KAGGLE_NEW_SHARE}" if args.share else args.method
    print(compare(rows_by_seed(args.a, method), rows_by_seed(args.b, args.method_b or method)))


if __name__ == "__main__":
    main()
