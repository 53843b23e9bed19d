"""The paper's fold ensemble on real flukes: one config trained on folds 0-3 of one split, each alone and averaged.

    python benchmarks/flukes/fold_ensemble.py --out runs/hbfold --seed 0 --config configs/flukes_lite0_cpu.yaml \\
        [--folds 0,1,2,3] [--trunk-cache runs/hbh/trunk-cache]
    python benchmarks/flukes/fold_ensemble.py --out runs/hbfold --report      # the table of what was measured

Seed 003 trains one model per fold of the 4-fold rules and averages the folds' test-vs-train matrices
(`whale ensemble` of the fold runs: folds of one model are averaged as scores, ``new_whale``'s threshold tuned on
their validation files). Here: split ``--seed``'s competition folder (:func:`benchmarks.flukes.shared.build_split`,
as ``humpback.py`` builds it; the test checked disjoint from train by ids and bytes), ``whale train --fold K`` for
each fold of ``--folds`` (the trunk's maps computed once for all of them with ``--trunk-cache``; a fold trained
before is not trained again), then on the test: each fold alone (``whale ensemble RUN --tune``) and the first fold
averaged with each further fold (``whale ensemble RUN0 RUN1 ... --tune``), with MAP@5 over all queries, the known
whales' MAP@5 by ids alone (all, and those with one gallery photo), top-1/5, ``new_whale`` first and the seconds.
What averaging buys is each average minus the mean of the single folds it averages, and minus its first fold.
With ``--fuse-with ROOT`` (repeatable: an earlier ``humpback.py --methods keypoints`` run's folder, its
``ROOT/seedS/keypoints`` checked to be of the same split byte for byte), every row again fused with those matchers as
the recipe fuses (``--fusion logodds --tune-new-share 0.276``; the folds of the network one model of the fusion,
:mod:`whale.ensemble.models`), and the matchers fused alone.
The last stdout line is ``{"benchmark": "fold_ensemble", ...}``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()

import numpy as np  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from benchmarks.flukes import shared  # noqa: E402

COLUMNS = (("map5", "MAP@5 all"), ("map5_known_no_new", "known, ids only"),
           ("map5_one_photo", "one-photo whales, ids only"), ("top1", "top-1"), ("top5", "top-5"),
           ("new_whale_first", "`new_whale` first"))
"""Each figure of a row and its column heading."""


def fold_runs(args, comp: Path, work: Path, log=print) -> dict[int, tuple[Path, float]]:
    """``{fold: (run folder, training seconds)}``: ``whale train --fold K`` of ``args.config`` on ``comp`` for
    each fold (one finished before, with the same arguments, is not run again: :func:`shared.whale_command`)."""
    runs = {}
    for fold in args.folds:
        run = work / f"fold{fold}"
        cmd = ["train", "--config", args.config, "--fold", str(fold), "--data", str(comp), "--out", str(run),
               "--trunk-cache", str(args.trunk_cache or Path(args.out) / "trunk-cache"), "--verbose", "0", "--resume"]
        runs[fold] = run, shared.whale_command(cmd, work / f"fold{fold}.train.log", log)
    return runs


RECIPE_FLAGS = ("--fusion", "logodds", "--tune-new-share", "0.276")
"""How the recipe fuses a network with the matchers (``recipes/flukes.yaml``'s ``submission`` step)."""


def rows_of(runs: dict[int, tuple[Path, float]], comp: Path, truth: dict, work: Path, matchers=(),
            log=print) -> list[dict]:
    """Each fold alone, then folds ``0..k`` averaged for each further ``k``: one row each (module docstring); with
    ``matchers`` (score folders), the matchers fused alone and every row again fused with them."""
    from whale.ensemble.combine import average_score_files
    from whale.ensemble.fusion import read_fusion
    from whale.ensemble.identity import read_identities
    from whale.ensemble.models import model_keys, model_weights
    from whale.inference.scorefile import score_path

    work.mkdir(parents=True, exist_ok=True)
    folds = list(runs)
    groups = [[f] for f in folds] + [folds[:k] for k in range(2, len(folds) + 1)]
    plans = [(g, False) for g in groups] + ([([], True)] + [(g, True) for g in groups] if matchers else [])
    rows = []
    for group, fused in plans:
        name = (f"fold {group[0]}" if len(group) == 1 else "folds " + ",".join(map(str, group)) + " averaged"
                if group else "the matchers")
        name += " + the matchers" if fused and group else ""
        sub = work / f"{shared.slug(name)}.csv"
        folders = [*(matchers if fused else ()), *(runs[f][0] for f in group)]
        t, _ = shared.ensemble_and_check(folders, sub, comp, work, extra=RECIPE_FLAGS if fused else (), log=log)
        tests = [score_path(r, "test") for r in folders]
        weights = model_weights(model_keys(read_identities(tests), folders))  # as whale ensemble weighs them
        scores = (average_score_files(tests, weights, **read_fusion(sub.with_suffix(".calibration.json")).maps())
                  if fused else average_score_files(tests, weights))
        seconds = {"train": sum(runs[f][1] for f in group), "ensemble": t}
        rows.append({**shared.method_row(name, sub, scores, truth, seconds), "folds": group, "fused": fused})
        log(f"  {name}: MAP@5 {rows[-1]['map5']:.3f}, known ids only {rows[-1]['map5_known_no_new']:.3f}")
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one line per row, then each average's gain over the mean of its single folds and over its first."""
    single = {(r["folds"][0], r.get("fused", False)): r for r in rows if len(r["folds"]) == 1}
    head = ["runs", *(h for _, h in COLUMNS), "training s"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for r in rows:
        cells = [r["method"], *(f"{r[k]:.3f}" if r.get(k) is not None and np.isfinite(r[k]) else "" for k, _ in COLUMNS),
                 f"{r['seconds']['train']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    gains = []
    for r in rows:
        fused = r.get("fused", False)
        if len(r["folds"]) > 1 and all((f, fused) in single for f in r["folds"]):
            mean = {k: np.mean([single[f, fused][k] for f in r["folds"]]) for k, _ in COLUMNS[:3]}
            first = single[r["folds"][0], fused]
            gains.append(f"- {r['method']}: " + ", ".join(
                f"{h} {r[k] - mean[k]:+.3f} over the mean of its folds ({r[k] - first[k]:+.3f} over fold "
                f"{r['folds'][0]})" for k, h in COLUMNS[:3]))
    return "\n".join(lines + ([""] + gains if gains else []))


def main(argv=None) -> int:
    p = harness.parser(__doc__, "working folder (the split, each fold's run, submissions, results)")
    p.add_argument("--seed", type=int, default=0, help="the split seed (benchmarks/flukes/humpback.py's)")
    p.add_argument("--config", default="configs/flukes_lite0_cpu.yaml", help="the config every fold trains")
    p.add_argument("--folds", default="0,1,2,3", help="comma-separated folds (the 4-fold rules: 0-3)")
    p.add_argument("--trunk-cache", default=None,
                   help="the trunk maps' folder (default OUT/trunk-cache); another run's of the same trunk serves")
    p.add_argument("--fuse-with", action="append", default=[], metavar="ROOT",
                   help="an earlier humpback.py --methods keypoints run's folder (ROOT/seedS/keypoints, checked to be "
                        "of the same split): every row also fused with it as the recipe fuses; repeatable")
    p.add_argument("--report", action="store_true", help="print the table of what OUT holds")
    args = p.parse_args(argv)
    results = Path(args.out) / "results.json"
    if args.report:
        print(table(json.loads(results.read_text())["rows"]))
        return 0
    args.folds = [int(f) for f in args.folds.split(",")]
    source = harness.shared_source("humpback")
    if source is None:
        return 0
    t0 = time.perf_counter()
    reference = shared.machine_reference(source, lambda m: print(m, flush=True))
    work = Path(args.out) / f"seed{args.seed}"
    comp, truth, _ = shared.build_split(source, work / "data", args.seed)
    shared.assert_disjoint(comp, truth)
    matchers = [shared.earlier_run_of(root, args.seed, comp) for root in args.fuse_with]
    runs = fold_runs(args, comp, work)
    rows = rows_of(runs, comp, truth, work, matchers)
    results.write_text(json.dumps({"seed": args.seed, "config": args.config, "reference_s": reference, "rows": rows},
                                  indent=2, default=float))
    print(table(rows))
    metrics = {f"{shared.slug(r['method'])}_{k}": r[k] for r in rows for k in ("map5", "map5_known_no_new")}
    print(common.final_json("fold_ensemble", metrics, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
