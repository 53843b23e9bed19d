"""Which K / learning-rate schedule lets the miner help on Omniglot? Not a test.

    python benchmarks/seeds/omniglot_schedules.py --out runs/omniglot_schedules [--only NAME ...] [--quick]

Trains the first stage of ``configs/omniglot.yaml`` (random negatives, K = 1000) once on
``images_background_small1`` (the same folder and fold as ``benchmarks/seeds/omniglot.py``), then
continues a copy of that run under each schedule of :data:`SCHEDULES` (random or adversarial
negatives, different K ranges, learning rates and lengths) and scores each on the 100 20-way
one-shot tasks of ``images_background_small2``'s own alphabets (the leak-free evaluation set of
:func:`benchmarks.seeds.omniglot.leak_free`: characters never seen in training) plus the
best validation MAP@5 on small1's fold 0. Pairs of rows with the same epochs and learning
rates differ only in the negatives, so their gap is the miner's effect under that schedule.

Prints a table and, as its last line, one JSON object. About 2 minutes per 8-epoch schedule
and 5 per 24-epoch one on 2 CPU cores (all of :data:`SCHEDULES`: ~28 minutes).
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

from benchmarks import common, harness  # noqa: E402
from benchmarks.seeds import omniglot  # noqa: E402

# name -> stages after the shared random stage: (epochs, k, k_end, lr)
SCHEDULES: dict[str, list[tuple]] = {
    "random, 8 ep, lr 3e-4": [(8, 1000.0, None, 3e-4)],
    "K 2->0.5, 8 ep, lr 3e-4": [(8, 2.0, 0.5, 3e-4)],
    "K 0.5->0.1, 8 ep, lr 3e-4": [(8, 0.5, 0.1, 3e-4)],
    "random, 8 ep, lr 1e-4": [(8, 1000.0, None, 1e-4)],
    "K 1->0.25, 8 ep, lr 1e-4": [(8, 1.0, 0.25, 1e-4)],
    "K 0.5->0.1, 8 ep, lr 1e-4": [(8, 0.5, 0.1, 1e-4)],
    "random, 24 ep, lr 3e-4 then 1e-4": [(12, 1000.0, None, 3e-4), (12, 1000.0, None, 1e-4)],
    "K 1->0.5->0.25, 24 ep, lr 3e-4 then 1e-4": [(12, 1.0, 0.5, 3e-4), (12, 0.5, 0.25, 1e-4)],
    "K 10->1->0.25, 24 ep, lr 3e-4 then 1e-4": [(12, 10.0, 1.0, 3e-4), (12, 1.0, 0.25, 1e-4)],
}


def with_stages(cfg, first: dict, rest: list[tuple], epochs_scale: float = 1.0):
    """``cfg`` with stages ``[first] + rest`` (rest as ``(epochs, k, k_end, lr)``)."""
    from whale.config import config_from_dict

    d = cfg.to_dict()
    stages = [first]
    for epochs, k, k_end, lr in rest:
        stages.append({**first, "epochs": max(1, round(epochs * epochs_scale)), "k": k, "k_end": k_end, "lr": lr})
    d["stages"] = stages
    return config_from_dict(d, source=f"{cfg.name} (schedule ablation)")


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (data copies, run folders)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME", help="schedules to run (default: all)")
    p.add_argument("--quick", action="store_true", help="every stage a fifth as long (development)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tasks and training")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "omniglot.yaml"))
    p.add_argument("--data", default=None, help="folder of the two zips (default ../shared/data/omniglot)")
    args = p.parse_args(argv)
    t0 = time.time()
    zips = omniglot.find_zips(args.data)
    if zips is None:
        print("omniglot_schedules: Omniglot zips not found; skipping")
        print(common.final_json("omniglot_schedules", {"skipped": True}, time.time() - t0))
        return 0
    unknown = sorted(set(args.only or ()) - set(SCHEDULES))
    if unknown:
        p.error(f"unknown schedule(s) {unknown}; expected names from: {list(SCHEDULES)}")

    from whale.training.trainer import train_fold

    cfg, out = common.prepare(args)  # --quick: every stage of the config a fifth as long
    scale = 0.2 if args.quick else 1.0  # the same for the schedules' own stages
    first = cfg.to_dict()["stages"][0]
    train_rows = omniglot.index_images(omniglot.extract(zips[0], out / "raw"))
    eval_rows = omniglot.leak_free(train_rows, omniglot.index_images(omniglot.extract(zips[1], out / "raw")))
    train_dir = common.build_competition(out / "train_small1", [(r["path"], r["id"]) for r in train_rows])
    tasks = omniglot.small2_tasks(eval_rows, args.seed)

    base = out / "runs" / "first-stage"
    t1 = time.time()
    train_fold(with_stages(cfg, first, []), train_dir, 0, base, resume=True, score=False, verbose=0,
               log=lambda m: None)
    print(f"shared first stage: {first['epochs']} epochs K = {first['k']:g}, lr {first['lr']:g} "
          f"({time.time() - t1:.0f} s) -> {base}")
    rows = []
    for i, (name, rest) in enumerate(SCHEDULES.items()):
        if args.only and name not in args.only:
            continue
        run = out / "runs" / f"schedule{i}"
        if not (run / "checkpoints").exists():
            shutil.rmtree(run, ignore_errors=True)
            shutil.copytree(base, run)
        c = with_stages(cfg, first, rest, scale)
        t1 = time.time()
        res = train_fold(c, train_dir, 0, run, resume=True, score=False, verbose=0, log=lambda m: None)
        acc = omniglot.one_shot(common.SiameseMethod(run, name), eval_rows, tasks)
        rows.append({"schedule": name, "one_shot": acc, "val_map5": res.best_val_map5,
                     "epochs": c.total_epochs, "train_s": round(time.time() - t1), "run": str(run)})
        print(f"{name}: one-shot {acc:.3f}, best validation MAP@5 {res.best_val_map5:.3f} "
              f"({rows[-1]['train_s']} s)", flush=True)

    print()
    print(f"Omniglot schedules after a shared {first['epochs']}-epoch random stage: 20-way one-shot "
          f"on {omniglot.N_TASKS} small2 tasks{' (--quick)' if args.quick else ''}")
    print(common.results_table(rows, [("schedule", "schedule after the shared stage"),
                                      ("one_shot", "20-way 1-shot acc"),
                                      ("val_map5", "val MAP@5 (small1 fold 0)"),
                                      ("epochs", "epochs in all"), ("train_s", "s")]))
    metrics = {r["schedule"]: {"one_shot": round(r["one_shot"], 4), "val_map5": round(r["val_map5"], 4)}
               for r in rows}
    print(common.final_json("omniglot_schedules", {"schedules": metrics, "quick": bool(args.quick)},
                            time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
