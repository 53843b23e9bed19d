"""``make demo``: the whole pipeline on a synthetic competition, on the CPU, in minutes.

1. generate the synthetic competition (if the folder is absent);
2. raw-pixel baseline: cosine nearest neighbour on box crops, threshold tuned on fold 0;
3. train ``configs/demo.yaml`` on fold 0 (adversarial mining, schedule, checkpoints);
4. write the submission from the trained model's test scores with the threshold tuned on
   the validation fold, and score it against the synthetic truth.

The last line printed is
``demo: validation MAP@5 0.xxx, test MAP@5 0.xxx, baseline 0.xxx, submission FILE``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


DEMO_IDS = 200
DEMO_SEED = 0


def ensure_competition(data_dir: Path, n_ids: int = DEMO_IDS, seed: int = DEMO_SEED) -> Path:
    """Generate the synthetic competition into ``data_dir`` unless it is already there."""
    from whale.data.synth import generate

    if (data_dir / "train.csv").exists():
        print(f"using the synthetic competition in {data_dir}")
        return data_dir
    print(f"generating a synthetic competition of {n_ids} ids into {data_dir}")
    return generate(data_dir, n_ids=n_ids, seed=seed)


def truth(data_dir: Path, images: list[str]) -> list[str]:
    """The true ids of ``images``, in order (:func:`whale.data.read_solution`)."""
    from whale.data import read_solution

    sol = read_solution(data_dir, images)
    return [sol[n] for n in images]


def pixel_baseline(comp, data, size: int = 32) -> tuple[float, float, list]:
    """Raw-pixel nearest neighbour: ``(validation MAP@5, test MAP@5, test predictions)``.

    The threshold is tuned on the validation fold, as for the trained model.
    """
    from whale.baseline import cosine_scores, pixel_features
    from whale.data import load_crop
    from whale.metrics import map_at_k
    from whale.ranking import predict_top5, tune_threshold
    from whale.data import ImageSet

    def feats(paths, boxes):
        return pixel_features(np.stack([load_crop(p, b, size, channels=1) for p, b in zip(paths, boxes)]))

    full = ImageSet.known(comp)
    f_full = feats(full.paths, full.boxes)
    f_gal = f_full[full.positions(data.gallery.names)]
    val_scores = cosine_scores(feats(data.val.paths, data.val.boxes), f_gal)
    t, val_map, _ = tune_threshold(val_scores, data.gallery.ids, data.val.ids)
    test = ImageSet.test(comp)
    test_scores = cosine_scores(feats(test.paths, test.boxes), f_full)
    preds = predict_top5(test_scores, full.ids, t)
    return float(val_map), map_at_k(preds, truth(comp.root, comp.test_images)), preds


def submission_from_run(run_dir: Path, comp, out: Path) -> tuple[float, float, list]:
    """Tune the threshold on the run's validation scores, write the test submission.

    Returns ``(validation MAP@5, threshold, predictions)``.
    """
    from whale.inference.scorefile import load_score_file
    from whale.ranking import predict_top5, tune_threshold
    from whale.submission import write_submission

    val = load_score_file(run_dir / "scores" / "val.npz")
    t, val_map, _ = tune_threshold(val.scores.astype(np.float32), val.gallery_ids, val.query_ids)
    test = load_score_file(run_dir / "scores" / "test.npz")
    preds = predict_top5(test.scores.astype(np.float32), test.gallery_ids, t)
    write_submission(out, list(test.query), preds, sample=comp.sample_path)
    return float(val_map), float(t), preds


def training_speed(run_dir: Path, pairs_per_epoch: int) -> str:
    """One line on how fast the run trained on this machine, from its ``log.csv``.

    Every epoch trains ``pairs_per_epoch`` pairs; its ``epoch_s`` includes its mining,
    validation and checkpoints. The rate is the machine's figure to quote beside the demo's time.
    """
    from whale.training.runlog import read_log

    rows = read_log(run_dir / "log.csv")
    seconds = sum(float(r["epoch_s"]) for r in rows)
    pairs = pairs_per_epoch * len(rows)
    return (f"training: {len(rows)} epochs of {pairs_per_epoch} pairs in {seconds:.0f} s, "
            f"{pairs / max(seconds, 1e-9):.1f} pairs/s (mining, validation and checkpoints included)")


PROG = "python -m whale.demo"


def main(argv=None) -> int:
    """``python -m whale.demo``; 2 on bad input (:func:`whale.command.main`)."""
    from whale import command

    return command.main(PROG, add_arguments, run, argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.demo`` and ``whale demo`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    p.add_argument("--data", default="data/synthetic", help="synthetic competition folder")
    p.add_argument("--out", default="runs/demo", help="run folder")
    p.add_argument("--submission", default="submissions/demo.csv")
    p.add_argument("--config", default=str(Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"))
    p.add_argument("--ids", type=int, default=DEMO_IDS, help="ids of the synthetic competition")
    p.add_argument("--baseline-only", action="store_true", help="skip training")
    p.add_argument("--resume", action="store_true", help="resume a killed demo run")


def run(args: argparse.Namespace) -> int:
    """The demo ``args`` describe; raises :class:`whale.core.errors.WhaleError` on bad input."""
    from whale.config import load_config
    from whale.data import load_competition
    from whale.metrics import map_at_k
    from whale.submission import write_submission
    from whale.data import fold_data
    from whale.training.trainer import train_fold

    t0 = time.time()
    data_dir, run_dir, sub = Path(args.data), Path(args.out), Path(args.submission)
    ensure_competition(data_dir, n_ids=args.ids)
    comp = load_competition(data_dir)
    cfg = load_config(args.config)
    data = fold_data(comp, 0, cfg.seed)
    base_val, base_test, base_preds = pixel_baseline(comp, data)
    print(f"baseline (raw-pixel nearest neighbour): validation MAP@5 {base_val:.3f}, test MAP@5 {base_test:.3f}")
    if args.baseline_only:
        write_submission(sub, comp.test_images, base_preds, sample=comp.sample_path)
        val_txt, test_map = "n/a", base_test
    else:
        train_fold(cfg, data_dir, 0, run_dir, resume=args.resume, overwrite=not args.resume, verbose=2)
        val_map, t, preds = submission_from_run(run_dir, comp, sub)
        test_map = map_at_k(preds, truth(data_dir, comp.test_images))
        val_txt = f"{val_map:.3f}"
        print(training_speed(run_dir, 2 * len(data.pairs)))
        print(f"threshold {t:g} tuned on validation fold 0; training curves in {run_dir / 'training.png'}; "
              f"{time.time() - t0:.0f} s in all")
    print(f"demo: validation MAP@5 {val_txt}, test MAP@5 {test_map:.3f}, baseline {base_test:.3f}, "
          f"submission {sub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
