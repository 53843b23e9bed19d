"""Calibrated fusion against the raw scores and the log weight grid, on a humpback split's score runs. Not a test.

    python benchmarks/flukes/fusion_compare.py --split RUNS/seed0 [--second pixels] [--out RUNS/seed0/fusion]

``RUNS/seed0`` is a split of ``benchmarks/flukes/humpback.py --methods keypoints`` (``data/``, the matcher's score
folder ``keypoints/``); ``--second`` names a second score folder beside it (``pixels``:
``benchmarks/flukes/pixel_scores.py``; a network's ``learned/scores``). Every configuration is one user command,
``whale ensemble RUN... --out OUT/NAME.csv FLAGS`` (printed), scored against ``data/test_solution.csv``:

* the matcher alone: ``--tune`` (its raw scores, as before), ``--tune --fusion mean`` (the threshold tuned on
  its calibrated probabilities) and ``--threshold 0.5 --fusion mean`` (P(same whale) 0.5, nothing tuned);
* the two runs: ``--tune`` (the default: calibrated ``mean``), ``--tune --fusion logodds``, both again with
  ``--calibration logistic``, and the log weight grid ``--tune --tune-weights --weight-grid log`` (raw scores).

Reported: MAP@5 over all test queries, the known and ``new_whale`` ones apart, the known queries' MAP@5 by
the fused ids alone (``new_whale`` never predicted), the share of ``new_whale`` at rank 1 against the true share,
the validation MAP@5 the ensemble printed (in-sample) and the threshold. The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def configs(kp: Path, second: Path | None) -> list[tuple[str, list[Path], list[str]]]:
    out = [("matcher, threshold tuned (raw scores)", [kp], ["--tune"]),
           ("matcher, threshold tuned on calibrated P", [kp], ["--tune", "--fusion", "mean"]),
           ("matcher, P(same) 0.5 (nothing tuned)", [kp], ["--threshold", "0.5", "--fusion", "mean"])]
    if second is not None:
        out += [("2 runs, calibrated mean (the default)", [kp, second], ["--tune"]),
                ("2 runs, calibrated logodds", [kp, second], ["--tune", "--fusion", "logodds"]),
                ("2 runs, calibrated mean, logistic", [kp, second], ["--tune", "--calibration", "logistic"]),
                ("2 runs, calibrated logodds, logistic", [kp, second],
                 ["--tune", "--fusion", "logodds", "--calibration", "logistic"]),
                ("2 runs, log weight grid (raw scores)", [kp, second],
                 ["--tune", "--tune-weights", "--weight-grid", "log"])]
    return out


def fused(runs: list[Path], lines: list[str], flags: list[str], open_label: str, splits=("test",)) -> dict:
    """``{split: ScoreFile}``: the matrices the ensemble ranked (``test``: for the ids-only figure), rebuilt with
    the library's own code: each split's score files of the runs fused as the ensemble's output (``lines``) says
    it fused them, the runs calibrated once for all the splits, with the ``--weights`` of ``flags`` (or the weights
    ``--tune-weights`` printed); with ``--thin-validation``, the thinned views the ensemble wrote and read."""
    from whale.cli import build_parser
    from whale.ensemble.combine import average_score_files
    from whale.ensemble.fusion import calibrate_runs
    from whale.ensemble.thinning import view_of
    from whale.inference.scorefile import score_path

    args = build_parser(only=["ensemble"]).parse_args(["ensemble", *map(str, runs), "--out", "fused.csv", *flags])
    text = "\n".join(lines)
    if args.thin_validation:
        views = Path(re.search(r"the runs' thinned views in (.+)$", text, re.M).group(1))
        runs = [view_of(views, i, r) if view_of(views, i, r).is_dir() else r  # no view: a joint run thinned
                for i, r in enumerate(runs)]                                   # by the same draw, read as it is
    rule = re.search(r"fused by: (\w+)", text).group(1)
    if rule != "scores":
        maps = calibrate_runs(runs, [score_path(r, "val") for r in runs], rule, open_label, args.calibration).maps()
        return {split: average_score_files([score_path(r, split) for r in runs], args.weights, **maps)
                for split in splits}
    tuned = re.search(r"tuned weights ([0-9., e-]+):", text)
    weights = [float(w) for w in tuned.group(1).split(",")] if tuned else args.weights
    return {split: average_score_files([score_path(r, split) for r in runs], weights) for split in splits}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", required=True, type=Path)
    p.add_argument("--second", default=None, help="a second score folder's name under --split")
    p.add_argument("--out", type=Path, default=None, help="submissions and logs (default SPLIT/fusion)")
    args = p.parse_args(argv)
    import numpy as np

    from benchmarks.flukes.shared import ranking_metrics, read_solution, read_submission, submission_metrics
    from whale import NEW_WHALE

    t0 = time.time()
    out = args.out or args.split / "fusion"
    out.mkdir(parents=True, exist_ok=True)
    truth = read_solution(args.split / "data" / "test_solution.csv")
    true_share = float(np.mean([w == NEW_WHALE for w in truth.values()]))
    second = args.split / args.second if args.second else None
    rows = []
    for k, (name, runs, flags) in enumerate(configs(args.split / "keypoints", second)):
        sub = out / f"c{k}.csv"
        argv = ["ensemble", *map(str, runs), "--out", str(sub), *flags]
        print("$ whale " + " ".join(argv), flush=True)
        started = time.time()
        done = subprocess.run([sys.executable, "-m", "whale", *argv], cwd=ROOT, capture_output=True, text=True)
        (out / f"c{k}.log").write_text(done.stdout + done.stderr)
        if done.returncode:
            print(done.stdout[-2000:] + done.stderr[-2000:])
            return 1
        lines = done.stdout.splitlines()
        test = fused(runs, lines, flags, NEW_WHALE)["test"]
        row = {"config": name, **submission_metrics(read_submission(sub), truth),
               **ranking_metrics(test.scores, test.query, test.gallery_ids, truth), "true_share": true_share,
               "seconds": round(time.time() - started, 1)}
        val = re.search(r"expected MAP@5 from validation, threshold ([0-9.e-]+).*: ([0-9.]+)$", done.stdout, re.M)
        row["threshold"], row["val_map5"] = (float(val.group(1)), float(val.group(2))) if val else (None, None)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"| configuration | MAP@5 all | known | new_whale | known, ids only | {NEW_WHALE} first (true "
          f"{true_share:.3f}) | threshold | validation MAP@5 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['config']} | {r['map5']:.3f} | {r['map5_known']:.3f} | {r['map5_new']:.3f} | "
              f"{r['map5_known_no_new']:.3f} | {r['new_whale_first']:.3f} | {r['threshold']} | {r['val_map5']} |")
    print(json.dumps({"benchmark": "fusion_compare", "metrics": rows, "seconds": round(time.time() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
