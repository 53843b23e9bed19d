"""Score any Kaggle-format folder with a trained run: ``python -m whale.inference``.

Every test image of ``--data`` is scored against every training image of ``--data`` with a
known id, with the model of ``--run``; the result is a score file in the
``scores/test.npz`` format (``scores``, ``query``, ``gallery``, ``gallery_ids``), ready for
``ensemble.py`` or :func:`whale.ranking.predict_top5`. This is how a trained model is used on
new photos: put the catalogue in ``train/`` + ``train.csv`` and the new sightings in ``test/``.

``--matcher keypoints`` scores with no trained run at all: RootSIFT keypoints, LNBNN votes and
geometric verification (:mod:`whale.keypoints`, settings ``--config configs/keypoints.yaml``). Its
``--out`` may be a folder: ``test.npz`` there and, with ``--fold K``, the fold's ``val.npz``, so that
``whale ensemble OUT --tune`` places ``new_whale`` on validation (:mod:`whale.inference.keypoints`).

``--matcher joint --config configs/joint.yaml --with-run RUN --fold K``: one identification from all the evidence
(:mod:`whale.identify`): every source's candidates (both keypoint feature kinds' votes, each trained run's scores)
verified by every feature kind, one check of all of it; its ``--out`` folder is read by ``whale ensemble`` as any.

``--matcher outline [--config configs/outline.yaml] --fold K``: the trailing edge's outline, learned
(:mod:`whale.outline`): a score folder (``val.npz`` with ``--fold``, ``test.npz``) that ``whale ensemble`` reads and
the joint takes as ``--with-run``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from whale import command

PROG = "python -m whale.inference"


def main(argv=None) -> int:
    """``python -m whale.inference``; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.inference`` and ``whale score`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    p.add_argument("--run", help="run folder written by run_fold.py (not with --matcher keypoints)")
    p.add_argument("--data", required=True, help="Kaggle-format folder to score")
    p.add_argument("--out", required=True,
                   help="output score file (the .npz format; written under exactly this name); with "
                        "--matcher keypoints also a folder (test.npz, val.npz with --fold, run.json)")
    p.add_argument("--checkpoint", default="best", help="best, last, or a path to a .keras file")
    p.add_argument("--matcher", choices=("run", "keypoints", "joint", "outline"), default="run",
                   help="run: a trained run's model (default); keypoints: the training-free keypoint matcher; "
                        "joint: every source's candidates verified by every feature kind, one check (--fold needed); "
                        "outline: the trailing edge's outline, a net trained on it (a folder)")
    kp = p.add_argument_group("--matcher keypoints / joint / outline")
    kp.add_argument("--config", help="keypoint settings (YAML, e.g. configs/keypoints.yaml; default: built in); with "
                                     "--matcher joint the joint settings (e.g. configs/joint.yaml, required); with "
                                     "--matcher outline its settings (configs/outline.yaml; default: built in)")
    kp.add_argument("--with-run", action="append", default=[], metavar="RUN[:ALL]",
                    help="--matcher joint: a trained run of the same --data and --fold whose val/test scores propose "
                         "candidates and join the check (repeatable); RUN:ALL takes the test scores of ALL, RUN's "
                         "config trained on every known photo (whale train --fold -1)")
    kp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a keypoint setting, e.g. --set verify.shortlist=40 (repeatable)")
    kp.add_argument("--fold", type=int, default=None,
                    help="also write val.npz: fold K's validation queries against the fold's training images")
    kp.add_argument("--seed", type=int, default=0, help="seed of the fold assignment (a trained run's config seed)")
    kp.add_argument("--cache", default=None,
                    help="feature store (default $WHALE_CACHE/keypoints or ~/.cache/whale/keypoints)")
    kp.add_argument("--workers", type=int, default=None, help="extraction processes (default: every core)")
    kp.add_argument("--quiet", action="store_true", help="no progress bars")
    command.check_with(p, check_args)


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--run`` with the trained matcher, none with the keypoint matcher; ``p.error`` otherwise."""
    if args.matcher != "run" and args.run is not None:
        p.error(f"--run and --matcher {args.matcher} exclude each other (give a trained run to --matcher joint "
                "as --with-run)")
    if args.with_run and args.matcher != "joint":
        p.error("--with-run goes with --matcher joint")
    if args.matcher == "joint" and (args.config is None or args.fold is None):
        p.error("--matcher joint needs --config (e.g. configs/joint.yaml) and --fold K (its check is fitted on "
                "fold K's validation queries)")
    if args.matcher == "run" and args.run is None:
        p.error("--run is required (or --matcher keypoints)")
    if args.workers is not None and args.workers < 1:
        p.error(f"--workers: expected an integer >= 1 (extraction processes), received {args.workers}")


def run(args: argparse.Namespace) -> int:
    """Write the score file ``args`` describe; raises :class:`whale.core.errors.WhaleError` on bad input."""
    from whale.core.files import check_output

    if args.matcher == "keypoints":
        return _keypoints(args)
    if args.matcher == "joint":
        return _joint(args)
    if args.matcher == "outline":
        return _outline(args)
    check_output(args.out)  # before the model loads: a folder or a read-only place is refused now
    from whale.inference.runs import score_folder

    path = score_folder(Path(args.run), Path(args.data), Path(args.out), args.checkpoint)
    print(f"wrote {path}")
    return 0


def _keypoints(args) -> int:
    """``--matcher keypoints``: :func:`whale.inference.keypoints.score_competition`."""
    from whale.core.files import check_output
    from whale.keypoints import load_keypoint_config
    from whale.inference.keypoints import score_competition
    from whale.config.overrides import overrides

    from whale.keypoints.store import default_root

    out = Path(args.out)
    check_output(out, folder=out.suffix != ".npz")
    check_output(args.cache or default_root(), "--cache", folder=True)  # the store is written into too
    cfg = load_keypoint_config(args.config, overrides(args.set))
    score_competition(args.data, out, cfg, fold=args.fold, seed=args.seed, store_root=args.cache,
                      workers=args.workers, progress=not args.quiet)
    return 0


def _joint(args) -> int:
    """``--matcher joint``: :func:`whale.identify.score.score_joint`."""
    from whale.config.overrides import overrides
    from whale.core.files import check_output
    from whale.identify.config import load_joint_config
    from whale.identify.score import score_joint
    from whale.keypoints.store import default_root

    check_output(args.out, folder=True)
    check_output(args.cache or default_root(), "--cache", folder=True)
    cfg = load_joint_config(args.config, overrides(args.set))
    score_joint(args.data, args.out, cfg, runs=args.with_run, fold=args.fold, seed=args.seed,
                store_root=args.cache, workers=args.workers, progress=not args.quiet)
    return 0


def _outline(args) -> int:
    """``--matcher outline``: :func:`whale.outline.score.score_outline`."""
    from whale.config.overrides import overrides
    from whale.core.files import check_output
    from whale.keypoints.store import default_root
    from whale.outline.net import load_outline_config
    from whale.outline.score import score_outline

    check_output(args.out, folder=True)
    check_output(args.cache or default_root(), "--cache", folder=True)
    cfg = load_outline_config(args.config, overrides(args.set))
    score_outline(args.data, args.out, cfg, fold=args.fold, seed=args.seed, store_root=args.cache,
                  progress=not args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
