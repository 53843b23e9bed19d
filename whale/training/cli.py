"""``run_fold.py``: train one fold of one model config (or only score a run's checkpoint).

Example:
    python run_fold.py --config configs/demo.yaml --fold 0 --data data/synthetic --out runs/demo
    python run_fold.py --config configs/densenet121.yaml --data DIR --plan --rates RATES.json --slowdown 5.8
    python run_fold.py --config configs/densenet121.yaml --pretrain --playground PG --out runs/densenet121/pretrain
    python run_fold.py --config configs/densenet121.yaml --fold 0 --data DIR \
        --init-from runs/densenet121/pretrain --out runs/densenet121/fold0

``--pretrain`` trains the schedule's leading PlayGround stages once; ``--init-from`` starts a fold
from that run's model after them (:mod:`whale.training.pretrain`), so no fold trains them again.

``--plan`` trains nothing: it prints the schedule (stage, epochs, image size, pairs per epoch,
minings) of the fold and, with ``--rates``, the hours it takes, the Kaggle kernel versions and
the weeks of Kaggle's weekly GPU quota (:mod:`whale.training.plan`).

Exit status: 0 when the schedule is done, 3 when the run stopped early (``--time-budget``,
``--max-epochs``) and can be resumed with ``--resume``, 2 on bad input (one line), 130 after
Ctrl-C (one line: the epochs kept and that ``--resume`` continues).

Before the backend loads, :mod:`whale.training.preflight` refuses what the files alone show
wrong: the fold's range, training ids without a positive pair or that a submission cannot
carry, and a ``--resume`` onto other data or under another config (``--allow-changes`` accepts
the changes, printed and recorded in ``run.json``). A run that fails before its first epoch
leaves the run folder as it found it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from whale import command
from whale.core.files import check_output
from whale.training.preflight import FolderGuard, check_fold, interrupted_message

PROG = "run_fold.py"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``run_fold.py`` and ``whale train`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    p.add_argument("--config", required=True, help="YAML model config (configs/*.yaml)")
    p.add_argument("--fold", type=int, help="validation fold 0..3, or -1 to train on everything (--plan: 0)")
    p.add_argument("--data", help="Kaggle-format competition folder")
    p.add_argument("--out", help="run folder (checkpoints, logs, scores); not needed with --plan")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    p.add_argument("--allow-changes", action="store_true",
                   help="--resume even when the data (train.csv, image lists) or the resolved config differ "
                        "from the paused run's: each change is printed and recorded in run.json")
    p.add_argument("--overwrite", action="store_true",
                   help="clear a non-empty run folder first (without --resume or --overwrite it is an error)")
    p.add_argument("--playground", help="Kaggle-format folder for 'dataset: playground' stages")
    p.add_argument("--pretrain", action="store_true",
                   help="train only the schedule's leading PlayGround stages, once for every fold (needs "
                        "--playground and --out; no --fold, --data); folds then start from it with --init-from")
    p.add_argument("--init-from", metavar="RUN_DIR[:CHECKPOINT]",
                   help="start from that run's model (checkpoint 'last' by default) after the stages it trained, "
                        "e.g. a --pretrain run; overrides the config's init_from")
    p.add_argument("--seed", type=int, help="override the config's seed")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override any config key (YAML value), e.g. --set objective=triplet --set stages[0].lr=1e-4")
    p.add_argument("--precision", help="override the config's precision (float32, mixed_float16, mixed_bfloat16): "
                                       "it depends on the GPU")
    p.add_argument("--time-budget", type=float, help="stop cleanly before this many seconds (resume later)")
    p.add_argument("--max-epochs", type=int, help="stop after this many epochs in this call")
    p.add_argument("--score-only", action="store_true",
                   help="only write scores/{val,test}.npz from the run's checkpoint")
    p.add_argument("--checkpoint", default="best", help="checkpoint for --score-only: best, last or a path")
    p.add_argument("--trunk-cache", metavar="DIR",
                   help="a config with trunk: keep its maps in DIR, by photo content (default OUT/trunk-cache); "
                        "runs and folds on the same photos share them")
    p.add_argument("--verbose", type=int, default=None, help="Keras verbosity 0/1/2 (default: auto)")
    p.add_argument("--plan", action="store_true", help="print the schedule and its cost; train nothing")
    p.add_argument("--rates",
                   help="--plan: pairs/s per branch, size, precision (JSON of benchmarks/speed/bench_train.py)")
    p.add_argument("--pair-images", type=int,
                   help="--plan: training images of the fold instead of counting them in --data")
    p.add_argument("--playground-images", type=int,
                   help="--plan: training images of the playground (default: --playground's, else --pair-images)")
    p.add_argument("--slowdown", type=float, default=1.0,
                   help="--plan: training hours x this: the planned GPU's time over the rates file's GPU's "
                        "(estimates vs an H100 by memory bandwidth: P100 4.6, T4 10.5, 2 x T4 5.8; default 1)")
    p.add_argument("--mining-seconds", type=float, default=0.0,
                   help="--plan: seconds per mining on the planned machine (default 0: mining not included)")
    p.add_argument("--hours-per-version", type=float, default=None,
                   help="--plan: training hours of one Kaggle kernel version (default "
                        "8.5 h budget - 45 min scoring margin = 7.75)")
    command.check_with(p, check_args)


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The flags each mode needs (training, ``--pretrain``, ``--plan``); ``p.error`` otherwise."""
    needed = [] if args.plan else ["playground", "out"] if args.pretrain else ["fold", "data", "out"]
    if args.pretrain and (args.fold is not None or args.init_from or args.score_only):
        p.error("--pretrain trains the PlayGround stages for every fold: no --fold, --init-from or --score-only")
    if args.plan and args.data is None and args.pair_images is None:
        needed.append("data")
    missing = [f"--{name.replace('_', '-')}" for name in needed if getattr(args, name) is None]
    if missing:
        p.error(f"the following arguments are required: {', '.join(missing)}")


def preflight(args, cfg):
    """The fold (or ``--pretrain``'s PlayGround) prepared once and checked before the backend loads.

    Returns the :class:`whale.training.foldjob.FoldJob` that training takes: the checks of
    :mod:`whale.training.preflight` run while it is prepared (a used run folder first; with ``--resume``
    the sized config compared with the run's; ``--overwrite`` clears the folder only after them).
    """
    from whale.training.foldjob import prepare_fold, prepare_pretrain

    common = dict(resume=args.resume, overwrite=args.overwrite, allow_changes=args.allow_changes, check=True)
    if args.pretrain:
        return prepare_pretrain(cfg, args.playground, args.out, source=args.config, **common)
    return prepare_fold(cfg, args.data, args.fold, args.out, playground=args.playground, **common)


def plan(args, cfg) -> int:
    """``--plan``: print the stages, pairs per epoch, minings and (with rates) hours of one fold."""
    from whale.training.foldjob import load_fold
    from whale.training.plan import KERNEL_HOURS_PER_VERSION, format_plan, load_rates, plan_fold

    if args.pair_images is not None:
        images = {"main": args.pair_images}
    else:
        given = args.playground_images is not None
        job = load_fold(cfg, args.data, 0 if args.fold is None else args.fold,
                        playground=None if given else args.playground, log=lambda _: None)
        images = {name: n for name, n in job.pair_images().items() if n is not None}
    if args.playground_images is not None or args.pair_images is not None:
        images["playground"] = args.playground_images or args.pair_images
    rates = load_rates(args.rates) if args.rates else None
    per_version = KERNEL_HOURS_PER_VERSION if args.hours_per_version is None else args.hours_per_version
    print(format_plan(cfg, plan_fold(cfg, images, rates, args.slowdown, args.mining_seconds), args.rates,
                      slowdown=args.slowdown, mining_seconds=args.mining_seconds, hours_per_version=per_version))
    return 0


def main(argv=None) -> int:
    """``run_fold.py``; 2 on bad input, 130 after Ctrl-C (:func:`whale.command.main`), else :func:`run`'s status."""
    return command.main(PROG, add_arguments, run, argv)


def run(args: argparse.Namespace) -> int:
    """Train (or plan, or score) as ``args`` say; raises :class:`whale.core.errors.WhaleError` on bad input."""
    from whale.config import load_config

    from whale.config.overrides import overrides as set_flags

    overrides = {**set_flags(args.set), **{key: getattr(args, key) for key in ("seed", "precision", "init_from")
                                           if getattr(args, key) is not None}}
    cfg = load_config(args.config, overrides=overrides or None)
    verbose = "auto" if args.verbose is None else args.verbose
    if args.plan:
        return plan(args, cfg)
    if args.out:
        check_output(args.out, "--out", folder=True)
    if args.score_only and args.fold is not None:
        check_fold(args.fold)
    try:
        # Prepared once (data, sized config, init_from, the claimed folder) and refused before the backend loads.
        job = None if args.score_only else preflight(args, cfg)
        with FolderGuard(Path(args.out), cleared=args.overwrite):
            from whale.training.rescore import score_fold
            from whale.training.trainer import train_fold

            trunk_cache = (args.trunk_cache or Path(args.out) / "trunk-cache") if cfg.trunk.layer else None
            if args.score_only:
                score_fold(args.out, args.data, args.fold, cfg, checkpoint=args.checkpoint, trunk_cache=trunk_cache)
                return 0
            deadline = time.time() + args.time_budget if args.time_budget else None
            result = train_fold(job, deadline=deadline, max_epochs=args.max_epochs, verbose=verbose,
                                trunk_cache=trunk_cache)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(interrupted_message(Path(args.out))) from None
    state = "finished" if result.finished else "paused (run again with --resume)"
    best = "n/a" if result.best_val_map5 is None else f"{result.best_val_map5:.4f}"
    print(f"run_fold: {state} after {result.epochs_done} epochs; best validation MAP@5 {best}; "
          f"run folder {result.run_dir}")
    return 0 if result.finished else 3

