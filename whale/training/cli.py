"""``run_fold.py``: train one fold of one model config (or only score a run's checkpoint).

Example:
    python run_fold.py --config configs/demo.yaml --fold 0 --data data/synthetic --out runs/demo

Exit status: 0 when the schedule is done, 3 when the run stopped early (``--time-budget``,
``--max-epochs``) and can be resumed with ``--resume``.
"""

from __future__ import annotations

import argparse
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="run_fold.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="YAML model config (configs/*.yaml)")
    p.add_argument("--fold", type=int, required=True, help="validation fold 0..3, or -1 to train on everything")
    p.add_argument("--data", required=True, help="Kaggle-format competition folder")
    p.add_argument("--out", required=True, help="run folder (checkpoints, logs, scores)")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    p.add_argument("--overwrite", action="store_true",
                   help="clear a non-empty run folder first (without --resume or --overwrite it is an error)")
    p.add_argument("--playground", help="Kaggle-format folder for 'dataset: playground' stages")
    p.add_argument("--seed", type=int, help="override the config's seed")
    p.add_argument("--time-budget", type=float, help="stop cleanly before this many seconds (resume later)")
    p.add_argument("--max-epochs", type=int, help="stop after this many epochs in this call")
    p.add_argument("--score-only", action="store_true",
                   help="only write scores/{val,test}.npz from the run's checkpoint")
    p.add_argument("--checkpoint", default="best", help="checkpoint for --score-only: best, last or a path")
    p.add_argument("--verbose", type=int, default=None, help="Keras verbosity 0/1/2 (default: auto)")
    p.add_argument("--debug", action="store_true", help="show the traceback of a data or config error")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """``run_fold.py``; 2 on bad input (:func:`whale.errors.run_cli`), else :func:`run`'s status."""
    from whale.errors import run_cli

    return run_cli(run, argv, "run_fold.py")


def run(argv=None) -> int:
    """What :func:`main` runs; raises :class:`whale.errors.WhaleError` on bad input."""
    args = parse_args(argv)
    from whale.config import load_config
    from whale.training.trainer import score_fold, train_fold

    overrides = {"seed": args.seed} if args.seed is not None else None
    cfg = load_config(args.config, overrides=overrides)
    verbose = "auto" if args.verbose is None else args.verbose
    if args.score_only:
        score_fold(args.out, args.data, args.fold, cfg, checkpoint=args.checkpoint)
        return 0
    deadline = time.time() + args.time_budget if args.time_budget else None
    result = train_fold(cfg, args.data, args.fold, args.out, resume=args.resume, overwrite=args.overwrite,
                        playground=args.playground, deadline=deadline,
                        max_epochs=args.max_epochs, verbose=verbose)
    state = "finished" if result.finished else "paused (run again with --resume)"
    best = "n/a" if result.best_val_map5 is None else f"{result.best_val_map5:.4f}"
    print(f"run_fold: {state} after {result.epochs_done} epochs; best validation MAP@5 {best}; "
          f"run folder {result.run_dir}")
    return 0 if result.finished else 3

