"""The top 2019 solutions' tricks, each added alone to the paper's pipeline, on the synthetic competition. Not a test.

    python benchmarks/seeds/tricks.py --out runs/bench_tricks [--ids 200] [--quick] [--seeds 0 1 2]
        [--min-score 0.9] [--rounds 1] [--plant 30]

Data: the synthetic competition of ``make demo`` (``--ids`` ids, data seed 0) with ``--plant``
near-duplicates planted (:mod:`whale.data.synth`), in ``OUT/data``. Rows, fold 0, threshold
tuned on validation, test MAP@5 against the synthetic truth:

- ``paper``: ``configs/demo.yaml`` trained with each of ``--seeds`` (the seed also draws the
  folds): the mean and standard deviation are the pipeline's noise level;
- ``flip ids``: ``flip_ids: true``, seed ``seeds[0]`` (training and scoring);
- ``TTA (features)`` / ``TTA (scores)``: the ``seeds[0]`` paper run re-scored with every view of
  ``whale.config.TTA_VIEWS``; the scoring time is timed against a plain re-scoring in the same run;
- ``pseudo round r`` (``--rounds``): ``python -m whale.pseudo`` on the previous round's test
  scores (round 0: the ``seeds[0]`` paper run) at ``--min-score``, then the config trained on the
  new folder (seed ``seeds[0]``); ``pseudo added`` / ``pseudo right``: how many test images were
  added and the share whose pseudo label is their true id;
- ``duplicates (answer test)``: the ``seeds[0]`` run's submission with test images that
  duplicate a known-id training image answered directly (:mod:`whale.duplicates`).

Each trick row is one seed: its delta is read against the paper rows' standard deviation.
``--quick`` scales every stage's epochs by 0.2. Prints a table; writes ``OUT/tricks.json``; the
last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402


def _data(out: Path, ids: int, plant: int) -> Path:
    from whale.data.synth import generate

    data = out / "data"
    if not (data / "train.csv").exists():
        generate(data, n_ids=ids, seed=0, duplicates=plant)
    return data


def _train(cfg, data: Path, run_dir: Path, log) -> float:
    """Train fold 0 (resuming a run folder already there); returns the seconds it took."""
    from whale.training.trainer import train_fold

    t0 = time.time()
    log(f"--- training {run_dir.name}: {cfg.total_epochs} epochs")
    if not (run_dir / "done.json").exists() or not (run_dir / "scores" / "test.npz").exists():
        train_fold(cfg, data, 0, run_dir, resume=True, verbose=0, log=lambda m: log(f"  [{run_dir.name}] {m}"))
    return time.time() - t0


def _evaluate(run_dir: Path, comp, data: Path, name: str, **extra) -> dict:
    from whale.demo import submission_from_run, truth
    from whale.metrics import map_at_k

    val_map, t, preds = submission_from_run(run_dir, comp, run_dir / "submission.csv")
    return {"row": name, "val_map5": val_map, "map5": map_at_k(preds, truth(data, comp.test_images)),
            "threshold": t, **extra}


def _rescored(run_dir: Path, cfg, name: str, comp, data_dir: Path) -> tuple[Path, float]:
    """Score the checkpoint of ``run_dir`` under ``cfg`` into a sibling folder; ``(folder, seconds)``."""
    from whale.data import fold_data
    from whale.inference.runs import score_run

    new = run_dir.parent / name
    new.mkdir(exist_ok=True)
    if not (new / "checkpoints").exists():
        (new / "checkpoints").symlink_to((run_dir / "checkpoints").resolve())
    shutil.copyfile(run_dir / "run.json", new / "run.json")
    cfg.to_yaml(new / "config.yaml")
    t0 = time.time()
    score_run(new, comp, fold_data(comp, 0, cfg.seed, val_new_whale=cfg.val_new_whale), log=lambda m: None,
              progress=False)
    return new, time.time() - t0


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (data, run folders)")
    p.add_argument("--ids", type=int, default=200, help="ids of the synthetic competition")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the paper rows")
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)  # common.prepare reads it
    p.add_argument("--min-score", type=float, default=0.9, help="pseudo-label threshold")
    p.add_argument("--rounds", type=int, default=1, help="pseudo-label rounds (each trains once more)")
    p.add_argument("--plant", type=int, default=30, help="near-duplicates planted in the data")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "demo.yaml"))
    p.add_argument("--quick", action="store_true", help="every stage's epochs x 0.2")
    args = p.parse_args(argv)
    args.seed = args.seeds[0]
    t0 = time.time()
    log = print
    import pandas as pd

    cfg, out = common.prepare(args)
    from whale.config import config_from_dict
    from whale.data import load_competition, read_solution
    from whale.demo import truth
    from whale.duplicates import answer_test, find_duplicates
    from whale.core.files import write_json_atomic
    from whale.metrics import map_at_k
    from whale.pseudo import pseudo_round

    def variant(**changes):
        return config_from_dict({**cfg.to_dict(), **changes}, source=f"{cfg.name} {changes}")

    data = _data(out, args.ids, args.plant)
    comp = load_competition(data)
    runs = out / "runs"
    rows, paper = [], []
    for s in args.seeds:
        c = variant(seed=s)
        secs = _train(c, data, runs / f"paper-s{s}", log)
        paper.append(_evaluate(runs / f"paper-s{s}", comp, data, f"paper, seed {s}", seed=s, train_s=round(secs)))
    rows += paper
    base_dir = runs / f"paper-s{args.seeds[0]}"
    base = paper[0]

    c = variant(flip_ids=True, seed=args.seeds[0])
    secs = _train(c, data, runs / "flip", log)
    rows.append(_evaluate(runs / "flip", comp, data, "flip ids", seed=args.seeds[0], train_s=round(secs)))

    base_cfg = variant(seed=args.seeds[0])
    _rescored(base_dir, base_cfg, "rescored-plain", comp, data)  # warm-up: model load and tracing
    _, plain_s = _rescored(base_dir, base_cfg, "rescored-plain", comp, data)
    for mode in ("features", "scores"):
        from whale.config import TTA_VIEWS

        tta_dir, secs = _rescored(base_dir, variant(seed=args.seeds[0], tta=list(TTA_VIEWS), tta_mode=mode),
                                  f"tta-{mode}", comp, data)
        rows.append(_evaluate(tta_dir, comp, data, f"TTA ({mode}, {1 + len(TTA_VIEWS)} views)", seed=args.seeds[0],
                              score_s=round(secs, 1), plain_score_s=round(plain_s, 1),
                              time_ratio=round(secs / plain_s, 2)))

    sol = read_solution(data)
    prev_run, prev_data = base_dir, data
    for r in range(1, args.rounds + 1):
        added = pseudo_round([prev_run], prev_data, args.min_score, out / f"pseudo{r}", log=log)
        right = float((added["Id"] == added["Image"].map(sol)).mean()) if len(added) else None
        secs = _train(base_cfg, out / f"pseudo{r}", runs / f"pseudo{r}", log)
        rows.append(_evaluate(runs / f"pseudo{r}", comp, data, f"pseudo round {r}", seed=args.seeds[0],
                              train_s=round(secs), pseudo_added=len(added), pseudo_correct=right))
        prev_run, prev_data = runs / f"pseudo{r}", out / f"pseudo{r}"

    t_dup = time.time()
    dups = find_duplicates(comp, progress=False)
    sub = pd.read_csv(base_dir / "submission.csv", dtype=str, keep_default_na=False)
    names = list(sub["Image"])
    answered = answer_test(names, [r.split() for r in sub["Id"]], dups)
    planted = pd.read_csv(data / "planted_duplicates.csv", dtype=str)
    found = set(dups.train_pairs["Image_a"]) | set(dups.train_pairs["Image_b"]) | set(dups.test_pairs["Test"])
    recall = float(planted["Image"].isin(found).mean()) if len(planted) else float("nan")
    rows.append({"row": "duplicates (answer test)", "seed": args.seeds[0], "val_map5": base["val_map5"],
                 "map5": map_at_k(answered, truth(data, names)), "score_s": round(time.time() - t_dup, 1),
                 "planted_found": round(recall, 3), "dup_pairs": f"{len(dups.train_pairs)}+{len(dups.test_pairs)}"})

    maps = [r["map5"] for r in paper]
    mean, sd = statistics.mean(maps), (statistics.stdev(maps) if len(maps) > 1 else float("nan"))
    for r in rows:
        r["delta"] = r["map5"] - base["map5"]
        r["delta_sd"] = r["delta"] / sd if sd and sd == sd else None
    print()
    print(f"Synthetic competition {data} ({args.ids} ids, {args.plant} planted duplicates); fold 0; "
          f"{'--quick: epochs x 0.2' if args.quick else 'full demo schedule'}; paper test MAP@5 "
          f"{mean:.3f} +- {sd:.3f} over seeds {args.seeds}")
    print(common.results_table(rows, [("row", "row"), ("map5", "test MAP@5"), ("delta", "vs seed-0 paper"),
                                      ("delta_sd", "in paper sd"), ("val_map5", "val MAP@5"),
                                      ("train_s", "train s"), ("score_s", "score s"), ("time_ratio", "x plain"),
                                      ("pseudo_added", "pseudo added"), ("pseudo_correct", "pseudo right"),
                                      ("planted_found", "planted found")]))
    metrics = {"paper_mean": mean, "paper_sd": sd, "quick": bool(args.quick)}
    metrics.update({r["row"]: r["map5"] for r in rows})
    write_json_atomic(out / "tricks.json", json.loads(json.dumps({"rows": rows, **metrics}, default=float)))
    print(common.final_json("tricks", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
