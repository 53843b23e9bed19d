"""Score any Kaggle-format folder with a trained run: ``python -m whale.score``.

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


def score_folder(run_dir, data_dir, out, checkpoint: str = "best", verbose: bool = True) -> Path:
    """Write ``out`` (.npz): test images of ``data_dir`` vs its known-id training images."""
    from whale.data import load_competition
    from whale.inference import RunScorer, load_run_model, write_test_scores

    comp = load_competition(data_dir)
    if not comp.test_images:
        raise ValueError(f"{data_dir}: no test images to score (test/ is empty)")
    model, cfg = load_run_model(run_dir, checkpoint)
    rs = RunScorer(model, cfg.model.channels, cfg.box_margin, verbose=verbose)
    return write_test_scores(rs, comp, out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run folder written by run_fold.py")
    p.add_argument("--data", required=True, help="Kaggle-format folder to score")
    p.add_argument("--out", required=True, help="output .npz score file")
    p.add_argument("--checkpoint", default="best", help="best, last, or a path to a .keras file")
    args = p.parse_args(argv)
    path = score_folder(Path(args.run), Path(args.data), Path(args.out), args.checkpoint)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
