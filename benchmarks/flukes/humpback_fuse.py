"""Runs fused on each split seed: the submission's figures and the fused ranking's, mean +- sd, gains paired by seed.

    python benchmarks/flukes/humpback_fuse.py --out runs/hb58 --seeds 0,1,2 --data 'runs/hb56x/seed{S}/data' \\
        --run sift='runs/hb56b/seed{S}/keypoints' --run xfeat='runs/hb56x/seed{S}/keypoints' \\
        --combo sift --combo sift+xfeat -- --tune --tune-new-share 0.276

Each ``--run NAME=PATH`` is a run folder with ``{S}`` for the split seed (``benchmarks/flukes/humpback.py``'s runs:
the matcher's ``seedS/keypoints``, a network's ``seedS/learned-CONFIG``); each ``--combo`` a ``+``-joined set of
them. For every combo and seed it runs the user's command, ``whale ensemble RUN... --out OUT/COMBO_seedS.csv`` with
the flags after ``--`` (the threshold is always chosen on validation), and scores the submission against
``--data``'s ``test_solution.csv``: MAP@5 over all queries, known and ``new_whale`` queries apart, the ``new_whale``
share at rank 1; then the fused test matrix, rebuilt by the library's code, ranked without ``new_whale``: known
whales' MAP@5 by ids alone, that of whales with one gallery photo, top-1 and top-5; and on validation (where runs and
rules are chosen) the MAP@5 the ensemble printed (its threshold tuned there) and the known whales' by ids alone.
Not a test.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.flukes import shared  # noqa: E402

COLUMNS = [("map5", "MAP@5 all"), ("map5_known", "known"), ("map5_new", "`new_whale`"),
           ("map5_known_no_new", "known, ids only"), ("map5_one_photo", "one-photo whales, ids only"),
           ("top1", "top-1"), ("top5", "top-5"), ("new_whale_first", "`new_whale` first"),
           ("val_map5", "validation MAP@5, threshold in-sample"), ("val_known_no_new", "validation known, ids only")]
"""The table's columns: a row's key and its heading."""

WHY_NEW_FIRST = [("new_whale_first", "`new_whale` first"), ("new_whale_true", "true share"), *shared.WHY_NEW_FIRST]
"""The second table's columns: where the share of ``new_whale`` at rank 1 comes from, as shares of all queries."""


def parse_runs(items: list[str]) -> dict[str, str]:
    """``["NAME=PATH", ...]`` -> ``{NAME: PATH}`` (``PATH`` holding ``{S}``)."""
    runs = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or "{S}" not in path:
            raise SystemExit(f"--run {item!r}: expected NAME=PATH with {{S}} for the split seed")
        runs[name] = path
    return runs


def fuse_seed(names: list[str], runs: dict[str, str], seed: int, data: Path, out: Path, flags: list[str]) -> dict:
    """One combo on one split seed: ``whale ensemble`` then the figures (module docstring)."""
    from benchmarks.flukes.fusion_compare import fused
    from whale import NEW_WHALE

    folders = [Path(runs[n].format(S=seed)) for n in names]
    sub = out / f"{'+'.join(names)}_seed{seed}.csv"
    argv = ["ensemble", *map(str, folders), "--out", str(sub), *flags]
    print("$ whale " + " ".join(argv), flush=True)
    done = subprocess.run([sys.executable, "-m", "whale", *argv], cwd=ROOT, capture_output=True, text=True)
    sub.with_suffix(".log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"whale ensemble failed (exit {done.returncode}); see {sub.with_suffix('.log')}")
    truth = shared.read_solution(data / "test_solution.csv")
    test, valid = fused(folders, done.stdout.splitlines(), flags, NEW_WHALE, ("test", "val")).values()
    if set(map(str, test.query)) != set(truth):
        raise SystemExit(f"{data / 'test_solution.csv'}: its images are not the test queries of {folders[0]}: "
                         "another split")
    known = valid.query_ids != NEW_WHALE
    val_truth = dict(zip(map(str, valid.query[known]), map(str, valid.query_ids[known])))
    val = re.findall(r"expected MAP@5 from validation, threshold [0-9.e-]+ .*: ([0-9.]+)$", done.stdout, re.M)
    return {**shared.submission_metrics(shared.read_submission(sub), truth),
            **shared.ranking_metrics(test.scores, test.query, test.gallery_ids, truth),
            "val_map5": float(val[0]) if val else float("nan"),
            "val_known_no_new": shared.ranking_metrics(valid.scores[known], valid.query[known], valid.gallery_ids,
                                              val_truth)["map5_known_no_new"]}


def summary(rows: dict[str, list[dict]], seeds: list[int]) -> str:
    """The mean +- sd table of every combo, each combo's gain over the first, paired by seed, then where its
    ``new_whale`` first comes from."""
    def cell(values, sign=""):
        return f"{np.mean(values):{sign}.3f} +- {np.std(values, ddof=1) if len(values) > 1 else 0:.3f}"

    def table(columns):
        out = ["| runs fused | " + " | ".join(h for _, h in columns) + " |", "|" + " --- |" * (len(columns) + 1)]
        return out + [f"| {combo} | " + " | ".join(cell([r[k] for r in per_seed]) for k, _ in columns) + " |"
                      for combo, per_seed in rows.items()]

    lines = table(COLUMNS)
    base = next(iter(rows))
    lines += ["", f"Gain over {base}, paired by seed ({', '.join(map(str, seeds))}):", "",
              "| runs fused | MAP@5 all | known, ids only | one-photo whales, ids only | per seed, MAP@5 all |",
              "| --- | --- | --- | --- | --- |"]
    for combo, per_seed in list(rows.items())[1:]:
        gain = {k: [r[k] - b[k] for r, b in zip(per_seed, rows[base])] for k in
                ("map5", "map5_known_no_new", "map5_one_photo")}
        lines.append(f"| {combo} | {cell(gain['map5'], '+')} | {cell(gain['map5_known_no_new'], '+')} | "
                     f"{cell(gain['map5_one_photo'], '+')} | {', '.join(f'{g:+.3f}' for g in gain['map5'])} |")
    lines += ["", "Where `new_whale` first comes from, shares of all test queries:", "", *table(WHY_NEW_FIRST)]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1:] if "--" in argv else ["--tune"]
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="submissions, logs and results.json")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--data", required=True, help="each seed's split folder (test_solution.csv), with {S}")
    p.add_argument("--run", action="append", required=True, help="NAME=PATH of a run folder, with {S}")
    p.add_argument("--combo", action="append", required=True, help="NAME+NAME...: runs fused (one: alone)")
    args = p.parse_args(argv)
    runs = parse_runs(args.run)
    seeds = [int(s) for s in args.seeds.split(",")]
    combos = {c: c.split("+") for c in args.combo}
    unknown = sorted({n for names in combos.values() for n in names} - set(runs))
    if unknown:
        raise SystemExit(f"--combo names runs no --run gives: {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = {c: [fuse_seed(names, runs, s, Path(args.data.format(S=s)), args.out, flags) for s in seeds]
            for c, names in combos.items()}
    print(f"\n`whale ensemble RUN... {' '.join(flags)}`, {len(seeds)} split seeds, mean +- sd:\n")
    print(summary(rows, seeds))
    record = {"benchmark": "humpback_fuse", "flags": flags, "seeds": seeds, "runs": runs, "rows": rows,
              "seconds": round(time.time() - t0, 1)}
    (args.out / "results.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
