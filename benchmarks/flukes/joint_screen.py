"""The joint identification's check and aggregation chosen on validation: variants of one kept pair table. Not a test.

    python benchmarks/flukes/joint_screen.py --runs 'runs/hbj/seed{S}/joint' --seeds 0

Each ``--runs`` folder is a ``whale score --matcher joint`` run; its ``pairs_val.npz`` (the validation queries'
shortlisted pairs, every column of :func:`whale.identify.check.column_names`) is read back and, for every variant,
the check is cross-fitted again on validation alone (:class:`whale.identify.check.JointCheck`, the run's own
settings), aggregated to individuals and ranked. Variants: the shipped check's columns (all but ``log_photos``)
with ``max`` (the shipped config) and with ``noisy_or``; every column (the photo count too); without the trained
runs' columns; with each kind's ``p`` and each run's ``score`` alone (what a late fusion sees, on the joint
shortlist); without each feature kind. Reported per variant (validation only, mean over
``--seeds``): MAP@5 with the ``new_whale`` threshold tuned in-sample, the known whales' MAP@5 by ids alone, their
top-5, and the share of all queries that are known whales whose id is nowhere among the five.
The last stdout line is ``{"benchmark": "joint_screen", "rows": {...}}``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.flukes.shared import identification_figures  # noqa: E402
from whale.identify.check import JointCheck, fitted_columns, identification_scores, load_table  # noqa: E402
from whale.identify.config import JointConfig  # noqa: E402
from whale.inference.scorefile import load_score_file  # noqa: E402


def variants(columns: list[str]) -> dict[str, tuple[list[int], str]]:
    """``{name: (column indices, aggregate)}`` of the screen (module docstring)."""
    every = fitted_columns(columns)  # the shipped check's: all but NOT_FITTED
    kinds = sorted({c.split(".")[0] for c in columns if c.endswith(".inliers")})
    runs = sorted({c.split(".")[0] for c in columns if c.endswith(".gap")})
    out = {"joint, max": (every, "max"), "joint, noisy_or": (every, "noisy_or"),
           "with the individual's photo count (log_photos)": (list(range(len(columns))), "max")}
    if runs:
        out["without the runs' columns"] = ([i for i in every if columns[i].split(".")[0] not in runs], "max")
    out["each kind's p and each run's score alone"] = (
        [i for i, c in enumerate(columns) if c.endswith(".p") or c.endswith(".score")], "max")
    for k in kinds:
        out[f"without {k}"] = ([i for i in every if columns[i].split(".")[0] != k], "max")
    return out


def screen(run: Path) -> dict[str, dict]:
    """Every variant's validation figures for the joint run ``run``."""
    table = load_table(run / "pairs_val.npz")
    pairs, rows, fallback, columns = table.pairs, table.rows, table.fallback, table.columns
    kinds = sorted((run / "kinds").glob("*/val.npz"))  # written with the table: the screen may run before the check
    val = load_score_file(kinds[0] if kinds else run / "val.npz", need_query_ids=True)
    meta = run / "run.json"
    seed = int(json.loads(meta.read_text()).get("seed", 0)) if meta.is_file() else 0
    gallery_ids, truth = np.asarray(val.gallery_ids, str), np.asarray(val.query_ids, str)
    same = gallery_ids[pairs[:, 1]] == truth[pairs[:, 0]]
    base = JointConfig(kinds=())
    out = {}
    for name, (cols, aggregate) in variants(columns).items():
        check = JointCheck(base.rounds, base.leaf_nodes, base.learning_rate, base.folds, seed)
        check.fit(rows[:, cols], same, pairs[:, 0])
        scores = identification_scores(pairs, check.out_of_fold, gallery_ids, fallback, aggregate)
        out[name] = identification_figures(scores, gallery_ids, truth)
        print(f"{run}: {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in out[name].items()), flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="joint run folders with {S} for the split seed")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = {s: screen(Path(args.runs.replace("{S}", str(s)))) for s in seeds}
    rows = seed_table(per_seed, "variant (validation)")
    print(json.dumps({"benchmark": "joint_screen", "seeds": seeds, "rows": rows}))
    return 0


def seed_table(per_seed: dict[int, dict[str, dict]], heading: str) -> dict[str, dict]:
    """Print ``{seed: {row: {figure: value}}}`` as a table of each figure's mean +- sd over the seeds; returns
    ``{row: {figure: mean}}``."""
    seeds = list(per_seed)
    names = list(per_seed[seeds[0]])
    keys = list(per_seed[seeds[0]][names[0]])
    print(f"\n| {heading} | " + " | ".join(keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    rows = {}
    for name in names:
        values = {k: [per_seed[s][name][k] for s in seeds] for k in keys}
        rows[name] = {k: float(np.mean(v)) for k, v in values.items()}
        print(f"| {name} | " + " | ".join(f"{np.mean(v):.3f}" + (f" +- {np.std(v):.3f}" if len(v) > 1 else "")
                                          for v in values.values()) + " |")
    return rows


if __name__ == "__main__":
    sys.exit(main())
