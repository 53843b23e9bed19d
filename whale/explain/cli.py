"""``python -m whale.explain``: the paper's heatmaps over images, and match sheets for a query.

    python -m whale.explain --run RUN --data DIR --images A.jpg [B.jpg ...] --out FILE.png
    python -m whale.explain --run RUN --data DIR --query TEST.jpg [--top 5] --out FILE.png

Image arguments are paths, or names looked up in DIR's ``test/`` then ``train/``; each is cut to
its box from DIR's ``bounding_boxes.csv`` (the whole image when it has none), as the model sees it.

``--images``: one row per image, the crop and its heatmap (:mod:`whale.explain.heatmap`).
``--query``: a match sheet: the query and its heatmap, then one row per ranked id (best first):
that id's best gallery image (known-id training images of DIR), the head's score, and the
heatmaps of the query and of that image side by side; the title says where ``new_whale``
stands in the five submitted labels under the run's threshold (tuned on its validation scores
when it has them; ``--threshold`` overrides).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from whale import command
from whale.core.errors import DataError
from whale.ranking.stored import threshold_arg

DISPLAY = 192  # pixels per panel side (its height for a model of another aspect)


def _resolve(comp, arg: str) -> tuple[Path, tuple | None]:
    """An image argument -> (path, box from the competition or None)."""
    from whale.boxes.labels import find_image

    path = Path(arg)
    if not path.is_file():
        found = find_image(comp.root, arg)
        if found is None:
            raise DataError(f"{arg}: no such file, and no image of that name in {comp.root}/test or "
                            f"{comp.root}/train")
        path = found
    return path, comp.box(path.name)


class Explainer:
    """A run's model, crops as it sees them, and heatmaps of those crops."""

    def __init__(self, run_dir, checkpoint: str = "best"):
        from whale.explain.heatmap import FeatureTap
        from whale.inference.runs import RunScorer, load_run_model

        model, self.cfg = load_run_model(run_dir, checkpoint)
        if self.cfg.trunk.layer is not None:
            from whale.core.errors import ConfigError

            raise ConfigError(f"{run_dir}: a trunk run (trunk.layer {self.cfg.trunk.layer}): its branch reads its "
                              "frozen trunk's maps, not photos, and whale explain draws heatmaps of a whole branch")
        self.scorer = RunScorer(model, self.cfg.model.channels, self.cfg.box_margin, verbose=False, crop=self.cfg.crop)
        self.tap = FeatureTap(model.get_layer("branch"))

    def crop(self, path, box, size, channels: int) -> np.ndarray:
        from whale.data import load_crop

        return load_crop(path, box, size, channels=channels, margin=self.cfg.box_margin, crop=self.cfg.crop)

    def panels(self, path, box, label: str) -> list[tuple[str, np.ndarray]]:
        """``[(label, crop), (label + ' heatmap', overlay)]`` at the display size."""
        from whale.explain.heatmap import heatmap, overlay

        x = self.crop(path, box, self.tap.size, self.tap.channels)[None].astype(np.float32)
        heat = heatmap(self.tap(x)[0])
        h, w = self.tap.size
        shown = self.crop(path, box, (DISPLAY, round(DISPLAY * w / h)), 3)  # the model's aspect
        return [(label, shown), (f"heatmap ({self.tap.layer})", overlay(shown, heat))]


def _images(args, comp, ex: Explainer) -> str:
    from whale.explain.sheet import draw_grid

    rows = [ex.panels(*_resolve(comp, a), Path(a).name) for a in args.images]
    draw_grid(rows, args.out, title=f"heatmaps of {Path(args.run).name}: red/blue = maps peaking here, "
                                     "green = spread over maps")
    return f"wrote {args.out} ({len(rows)} images)"


def _query(args, comp, ex: Explainer) -> str:
    from whale.data import ImageSet
    from whale.explain.match import new_whale_rank, rank_query, run_threshold
    from whale.explain.sheet import draw_grid

    path, box = _resolve(comp, args.query)
    known = ImageSet.known(comp)
    if not len(known):
        raise DataError(f"{comp.root}: no training image with a known id to match against")
    label = comp.open_label
    threshold, source = ((args.threshold, "--threshold") if args.threshold is not None
                         else run_threshold(args.run, label))
    f_known = ex.scorer.features(known.paths, known.boxes)
    matches, labels = rank_query(ex.scorer, known, f_known, path, box, args.top, threshold, label)
    query = ex.panels(path, box, f"query {path.name}")
    rows = [query]
    for m in matches:
        gallery = ex.panels(m.path, m.box, f"#{m.rank} {m.whale_id}\n{m.name} score {m.score:.3f}")
        rows.append([(f"#{m.rank} query heatmap", query[1][1]), gallery[0], gallery[1]])
    pos = new_whale_rank(labels, label)
    where = f"{label} at position {pos} of 5" if pos else f"{label} not in the five labels"
    draw_grid(rows, args.out, title=f"{path.name}: {where} (threshold {threshold:.3f}: {source})\n"
                                    f"submission labels: {' '.join(labels)}")
    lines = [f"wrote {args.out}", f"labels: {' '.join(labels)} ({where}; threshold {threshold:.3f}: {source})"]
    lines += [f"  #{m.rank} {m.whale_id} {m.score:.3f} via {m.name}" for m in matches]
    return "\n".join(lines)


PROG = "python -m whale.explain"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.explain`` and ``whale explain`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    p.add_argument("--run", required=True, help="trained run folder")
    p.add_argument("--data", required=True, help="competition folder (gallery, boxes)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--images", nargs="+", help="images to draw heatmaps over")
    what.add_argument("--query", help="image to draw a match sheet for")
    p.add_argument("--top", type=int, default=5, help="ranked ids on the match sheet")
    p.add_argument("--threshold", type=threshold_arg, default=None,
                   help="new_whale threshold: a number or a stored threshold file, e.g. an ensemble's "
                        "NAME.threshold.json (default: the run's, read from its scores/threshold.json)")
    p.add_argument("--checkpoint", default="best", help="best, last or a .keras file")
    p.add_argument("--out", required=True, help="PNG file")


def run(args: argparse.Namespace) -> int:
    """Draw what ``args`` ask for; raises :class:`whale.core.errors.WhaleError` on bad input."""
    if args.top < 1:
        raise DataError(f"--top {args.top}: expected at least 1")
    from whale.data import load_competition

    comp = load_competition(args.data)
    ex = Explainer(args.run, args.checkpoint)
    print(_images(args, comp, ex) if args.images else _query(args, comp, ex))
    return 0


def main(argv=None) -> int:
    """``python -m whale.explain``; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
