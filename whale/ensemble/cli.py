"""``ensemble.py``: runs' score files -> fused -> ``new_whale`` placed -> checked submission.

The runs, weights and mode come as flags or as a YAML recipe (``--recipe``, :mod:`whale.ensemble.recipe`).
How the runs combine is ``--fusion`` (:mod:`whale.ensemble.fusion`): the weighted average of raw scores (one
run, folds of one model, ``--weights``, ``--tune-weights``), or, the default for runs of several models, each
run calibrated on its validation file to P(same whale) and the probabilities fused (then every threshold is a
probability); the summary names the rule.

The paper's threshold rule is the default (fixed ``--threshold``, ``--tune`` on validation
MAP@5, or ``--new-whale-fraction`` of the test set: exactly that share, ties broken by query
order); ``--calibrate`` cross-validates the calibrated rule of :mod:`whale.ranking.calibrate`
against the tuned threshold and, with a threshold mode, writes the submission with the
winner (``--force-calibrated``: the calibrated rule regardless), saying which and why.
Every mode prints the implied test share of ``new_whale`` at rank 1 and warns outside
[0.10, 0.60] (the competition's test set: about 0.28). The inputs' identities are printed
and bad mixes refused (:mod:`whale.ensemble.identity`). This module holds the flags; :func:`run` is four steps,
each its own module: resolve the rule (:mod:`whale.ensemble.rule`), combine the runs
(:mod:`whale.ensemble.combined`; averaging is :mod:`whale.ensemble.combine`), decide where ``new_whale`` goes
(:mod:`whale.ensemble.decide`; the rules are :mod:`whale.ranking`), report (:mod:`whale.ensemble.report`). The file
format is :mod:`whale.inference.scorefile`.

The competition format (:mod:`whale.formats`: the open-set label ``new_whale`` or
``new_individual``, the submission's columns ``Image,Id`` or ``image,predictions``) is
``--format``, else the one of the data folder recorded in the first run's ``run.json``, else 2019's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from whale import command
from whale.ensemble.combined import combine_runs
from whale.ensemble.decide import decide
from whale.ensemble.fusion import FUSIONS
from whale.ensemble.report import report
from whale.ensemble.rule import resolve_rule
from whale.ensemble.thinning import thin_rule
from whale.formats import DEFAULT, FORMATS
from whale.ranking.pairprob import METHODS
from whale.ranking.stored import threshold_arg

PROG = "ensemble.py"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ensemble.py`` and ``whale ensemble`` (:mod:`whale.command`)."""
    p.description = "Weighted average of runs' score files -> new_whale insertion -> submission CSV."
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR",
                   help="run folders with scores/test.npz (and scores/val.npz for --tune/--calibrate), or "
                        "score folders such as a snapshot's RUN_DIR/scores/384")
    p.add_argument("--recipe", type=Path, default=None,
                   help="YAML recipe: runs with weights and the threshold mode, instead of RUN_DIR, --weights "
                        "and the mode flags (whale.ensemble.recipe; the paper's: docs/ensemble.md)")
    p.add_argument("--weights", nargs="+", type=float, default=None, metavar="W",
                   help="one weight per run (normalised to sum 1); default equal")
    p.add_argument("--tune-weights", action="store_true",
                   help="choose the weights by validation MAP@5 (threshold tuned at each) on the --weight-grid: "
                        "runs of different kinds, e.g. a trained run and the keypoint matcher")
    p.add_argument("--weight-grid", choices=("linear", "log"), default="linear",
                   help="--tune-weights' grid: linear (steps of --weight-step summing to 1, the default) or log "
                        "(each run after the first at 0 or 2^-17..2^6 of the first's weight; up to 3 runs): the "
                        "keypoint matcher with a network needs the log grid")
    p.add_argument("--weight-step", type=float, default=None, metavar="S",
                   help="step of the linear --weight-grid (default 0.1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--threshold", type=threshold_arg, default=None, metavar="T",
                      help="new_whale at the first rank whose probability is < T (paper, Table 2); T is a number "
                           "or a stored threshold file (--tune's NAME.threshold.json, a run's scores/threshold.json)")
    mode.add_argument("--new-whale-fraction", type=float, default=None, metavar="F",
                      help="choose T so a share F of test images get new_whale at rank 1 (~0.276 on Kaggle)")
    mode.add_argument("--tune", action="store_true",
                      help="choose T by validation MAP@5 over a fine grid; writes NAME.threshold.{csv,png} and "
                           "NAME.threshold.json (T itself, what --threshold, explain and catalogue read)")
    p.add_argument("--fusion", choices=FUSIONS, default=None,
                   help="how several runs combine: mean (each run's scores calibrated on its validation file to "
                        "P(same whale), the probabilities averaged: the default for runs of several models), "
                        "logodds (their log-odds beyond the base rates summed, naive Bayes) or scores (the weighted "
                        "average of raw scores: the paper's; one run's, folds', --weights' and --tune-weights' "
                        "default); a calibrated rule makes the threshold a probability (docs/ensemble.md)")
    p.add_argument("--calibration", choices=METHODS, default="isotonic",
                   help="with a calibrated --fusion: isotonic (default) or logistic on the score's log-odds")
    p.add_argument("--tune-new-share", type=float, default=None, metavar="F",
                   help="with --tune (and --tune-weights): weigh validation's new_whale queries as a share F of "
                        "them (e.g. 0.276, the 2019 test set's), when the fold holds fewer or more than the test")
    p.add_argument("--thin-validation", action="store_true",
                   help="calibrate and tune on each run's validation thinned as the test is drawn: a share of the "
                        "known queries keep one gallery photo of their individual, the same photos hidden in every "
                        "run (the views kept in NAME.thinned/; whale.ensemble.thinning)")
    p.add_argument("--thin-seed", type=int, default=0, metavar="S",
                   help="--thin-validation's draw (default 0, the joint identification's own)")
    p.add_argument("--calibrate", action="store_true",
                   help="place new_whale by expected MAP@5 from probabilities calibrated on validation; "
                        "prints its cross-validated MAP@5 beside the tuned threshold's")
    p.add_argument("--force-calibrated", action="store_true",
                   help="with --calibrate and a threshold mode: write the calibrated rule even when the "
                        "threshold wins the cross-validation")
    p.add_argument("--cv-folds", type=int, default=5, help="folds for the cross-validation of --calibrate")
    p.add_argument("--seed", type=int, default=0, help="seed of the cross-validation split")
    p.add_argument("--out", required=True, type=Path, help="submission CSV, e.g. submissions/NAME.csv")
    p.add_argument("--sample", type=Path, default=None,
                   help="sample_submission.csv giving the row order (default: the one in the data "
                        "folder recorded in the first run's run.json, if any; else the npz query order)")
    p.add_argument("--format", choices=list(FORMATS), default=None,
                   help="competition format: open-set label and submission columns (default: the data "
                        f"folder recorded in the first run's run.json, else {DEFAULT.name})")
    command.check_with(p, check_args)


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Without ``--recipe``: runs and a threshold mode are needed (a recipe gives both); ``p.error`` otherwise."""
    if args.recipe is not None:
        return
    if not args.runs:
        p.error("give RUN_DIR ... or --recipe FILE")
    if args.threshold is None and args.new_whale_fraction is None and not args.tune and not args.calibrate:
        p.error("one of --threshold, --new-whale-fraction, --tune (or --calibrate) is required")


def main(argv: Sequence[str] | None = None, log=print) -> int:
    """``ensemble.py``: 0, or 2 on bad input with a one-line error (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, lambda args: run(args, log=log), argv)


def run(args: argparse.Namespace, log=print) -> int:
    """Write the submission ``args`` describe, in four steps: resolve the rule (:mod:`whale.ensemble.rule`),
    combine the runs (:mod:`whale.ensemble.combined`), decide where ``new_whale`` goes (:mod:`whale.ensemble.decide`),
    report (:mod:`whale.ensemble.report`); returns 0. Files ``--tune`` wrote beside the submission go again if the
    submission is not written (a full disk): no threshold file speaks for a submission that is not there.

    Raises:
        whale.core.errors.WhaleError: bad input (the message names the flag or the file).
    """
    written: list[Path] = []
    try:
        rule = resolve_rule(args)
        if args.thin_validation:
            rule = thin_rule(rule, args.thin_seed, log)
        combined = combine_runs(rule, log)
        report(rule, combined, decide(rule, combined), log, written)
        return 0
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
