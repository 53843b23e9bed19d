"""Score any Kaggle-format folder with a trained run: ``python -m whale.inference``.

Every test image of ``--data`` is scored against every training image of ``--data`` with a
known id, with the model of ``--run``; the result is a score file in the
``scores/test.npz`` format (``scores``, ``query``, ``gallery``, ``gallery_ids``), ready for
``ensemble.py`` or :func:`whale.ranking.predict_top5`. This is how a trained model is used on
new photos: put the catalogue in ``train/`` + ``train.csv`` and the new sightings in ``test/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    """``python -m whale.inference``; 2 on bad input (:func:`whale.errors.run_cli`)."""
    from whale.errors import run_cli

    return run_cli(run, argv, "python -m whale.inference")


def run(argv=None) -> int:
    """What :func:`main` runs; raises :class:`whale.errors.WhaleError` on bad input."""
    p = argparse.ArgumentParser(prog="python -m whale.inference", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run folder written by run_fold.py")
    p.add_argument("--data", required=True, help="Kaggle-format folder to score")
    p.add_argument("--out", required=True, help="output score file (the .npz format; written under exactly this name)")
    p.add_argument("--checkpoint", default="best", help="best, last, or a path to a .keras file")
    args = p.parse_args(argv)
    from whale.files import check_output

    check_output(args.out)  # before the model loads: a folder or a read-only place is refused now
    from whale.inference.runs import score_folder

    path = score_folder(Path(args.run), Path(args.data), Path(args.out), args.checkpoint)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
