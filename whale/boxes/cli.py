"""``python -m whale.boxes``: train the box models on labelled images, predict a folder's boxes, evaluate.

    python -m whale.boxes train   --data DIR --labels LABELS.csv --out RUN [--model vgg|retinanet|both]
                                  [--config configs/boxes.yaml] [--set KEY=VALUE ...]
    python -m whale.boxes predict --run RUN --data DIR --out DIR/bounding_boxes.csv
    python -m whale.boxes eval    --run RUN --data DIR --labels LABELS.csv [--worst N]

``train`` prints each fold's held-out IoU and the cross-validated mean IoU of each model and of
their average (also in RUN/run.json, per image in RUN/cv.csv). ``predict`` boxes every image of
DIR's train.csv and test/ and counts the images that fell back to the whole image. ``eval``
scores the run's boxes against a labels file (mean IoU, histogram, worst images): on the
run's own training labels this is optimistic; the honest figure is the cross-validated one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from whale import command
from whale.config.overrides import overrides

ROOT = Path(__file__).resolve().parents[2]


def _train(args) -> int:
    from whale.boxes.config import load_box_config
    from whale.boxes.labels import read_labels

    cfg = load_box_config(args.config, overrides(args.set))
    labels = read_labels(args.labels, args.data)
    from whale.boxes.train import train_run

    models = ("vgg", "retinanet") if args.model == "both" else (args.model,)
    print(f"{len(labels.names)} labelled images from {args.labels}; models {', '.join(models)}; "
          f"{cfg.folds} folds x {cfg.epochs} epochs at {cfg.image_size} px")
    train_run(cfg, labels, args.out, models, verbose=2 if args.verbose else 0)
    print(f"run written to {args.out}")
    return 0


def _predict(args) -> int:
    from whale.boxes.predict import predict_boxes, write_boxes_csv
    from whale.data import load_competition

    comp = load_competition(args.data)
    names = list(comp.train["Image"]) + list(comp.test_images)
    paths = [comp.train_path(n) for n in comp.train["Image"]] + [comp.test_path(n) for n in comp.test_images]
    pred = predict_boxes(args.run, paths)
    write_boxes_csv(args.out, names, pred.boxes)
    failed = {k: int((~(v == v).all(axis=1)).sum()) for k, v in pred.per_model.items()}
    print(f"wrote {len(names)} boxes to {args.out}; {int(pred.fallback.sum())} whole-image fallbacks; "
          f"failed detections per model: {failed}")
    return 0


def _eval(args) -> int:
    from whale.boxes import geometry
    from whale.boxes.labels import read_labels
    from whale.boxes.predict import iou_report, predict_boxes

    labels = read_labels(args.labels, args.data)
    pred = predict_boxes(args.run, labels.paths)
    print(iou_report(geometry.iou(pred.boxes, labels.boxes), labels.names, args.worst))
    print(f"{int(pred.fallback.sum())} whole-image fallbacks")
    for kind, unit in pred.per_model.items():
        ious = geometry.iou(geometry.to_pixels(unit, labels.sizes)[0], labels.boxes)
        print(f"{kind}: mean IoU {ious.mean():.4f}")
    return 0


PROG = "python -m whale.boxes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommands and flags of ``python -m whale.boxes`` and ``whale boxes`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="cross-validate and keep the box models")
    t.add_argument("--data", required=True, help="competition folder (images in train/ and test/)")
    t.add_argument("--labels", required=True, help="CSV Image,x0,y0,x1,y1 of the labelled images")
    t.add_argument("--out", required=True, help="run folder")
    t.add_argument("--model", choices=("vgg", "retinanet", "both"), default="both")
    t.add_argument("--config", default=str(ROOT / "configs" / "boxes.yaml"))
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key")
    t.add_argument("--verbose", action="store_true", help="Keras progress per epoch")
    pr = sub.add_parser("predict", help="write bounding_boxes.csv for a competition folder")
    pr.add_argument("--run", required=True)
    pr.add_argument("--data", required=True)
    pr.add_argument("--out", required=True, help="output CSV, e.g. DIR/bounding_boxes.csv")
    e = sub.add_parser("eval", help="IoU of the run's boxes against labels")
    e.add_argument("--run", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--labels", required=True)
    e.add_argument("--worst", type=int, default=10)


def run(args: argparse.Namespace) -> int:
    """Train, predict or evaluate as ``args.command`` says."""
    return {"train": _train, "predict": _predict, "eval": _eval}[args.command](args)


def main(argv=None) -> int:
    """``python -m whale.boxes``; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
