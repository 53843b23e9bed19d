"""Score files of a trained run: test-vs-train (and validation-vs-train) matrices.

``RUN_DIR/scores/val.npz``: the fold's validation queries (``new_whale`` included, truth in
``query_ids``) against the fold's training images with known ids.
``RUN_DIR/scores/test.npz``: the competition's test images against *every* training image
with a known id, so all folds of all models share one gallery and ``ensemble.py`` can
average them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def save_scores(path, scores: np.ndarray, query, gallery, gallery_ids, query_ids=None) -> Path:
    """Write a score file (float16 scores, string arrays loadable with ``allow_pickle=False``).

    ``scores``: ``[n_query, n_gallery]``; ``query``/``gallery``/``gallery_ids``/``query_ids``:
    sequences of str. Written atomically.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scores = np.asarray(scores)
    if scores.shape != (len(query), len(gallery)):
        raise ValueError(f"{path}: scores have shape {scores.shape}, expected "
                         f"({len(query)}, {len(gallery)}) = (queries, gallery images)")
    arrays = {"scores": scores.astype(np.float16) if scores.dtype == np.float64 else scores,
              "query": np.asarray(list(query), dtype=str),
              "gallery": np.asarray(list(gallery), dtype=str),
              "gallery_ids": np.asarray(list(gallery_ids), dtype=str)}
    if query_ids is not None:
        arrays["query_ids"] = np.asarray(list(query_ids), dtype=str)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return path


def load_scores(path) -> dict:
    """Read a score file into a dict of arrays; a clear error names a missing array."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: score file not found")
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    missing = {"scores", "query", "gallery", "gallery_ids"} - set(out)
    if missing:
        raise ValueError(f"{path}: score file lacks arrays {sorted(missing)} (has {sorted(out)})")
    return out


class RunScorer:
    """A trained siamese model turned into feature extraction + head scoring."""

    def __init__(self, model, channels: int, margin: float, batch_size: int = 64, verbose=True):
        from whale.models import model_image_size
        from whale.scoring import HeadScorer

        self.model, self.channels, self.margin = model, channels, margin
        self.image_size = model_image_size(model)
        self.batch_size, self.verbose = batch_size, verbose
        self.scorer = HeadScorer(model.get_layer("head"))

    def features(self, paths, boxes) -> np.ndarray:
        """``[n, d] float32`` branch features of the box crops of ``paths``."""
        from whale.pairs import ImageBatches, ImageStore, crop_size_for
        from whale.scoring import compute_features

        # The same crops as training sees them (stored at crop_size_for, resized to the input).
        store = ImageStore(list(paths), list(boxes), crop_size_for(self.image_size),
                           channels=self.channels, margin=self.margin, cache=False)
        batches = ImageBatches(store, np.arange(len(store)), self.image_size, batch_size=self.batch_size)
        return compute_features(self.model.get_layer("branch"), batches, n=len(store),
                                progress=self.verbose)

    def matrix(self, fq: np.ndarray, fg: np.ndarray) -> np.ndarray:
        """``[n_q, n_g] float16`` head scores."""
        return self.scorer.matrix(fq, fg, dtype=np.float16, progress=self.verbose)


def load_run_model(run_dir, checkpoint: str = "best"):
    """``(model, config)`` of a run: checkpoint ``best``, ``last`` or a path to a .keras file."""
    from whale.checkpoint import load_checkpoint
    from whale.config import load_config
    from whale.models import load_model

    run_dir = Path(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    if checkpoint in ("best", "last"):
        model, _ = load_checkpoint(run_dir / "checkpoints", checkpoint)
    else:
        model = load_model(checkpoint)
    return model, cfg


def write_test_scores(rs: RunScorer, comp, out, known=None, f_known=None) -> Path:
    """Score file ``out``: the competition's test images vs every known-id training image.

    ``known`` (:class:`whale.train.ImageSet`) and its features ``f_known`` may be passed when
    the caller already has them.
    """
    from whale.train import ImageSet

    known = ImageSet.known(comp) if known is None else known
    f_known = rs.features(known.paths, known.boxes) if f_known is None else f_known
    test = ImageSet.test(comp)
    f_test = rs.features(test.paths, test.boxes)
    return save_scores(out, rs.matrix(f_test, f_known), test.names, known.names, known.ids)


def score_run(run_dir, comp, data, checkpoint: str = "best", log=print,
              progress: bool = True) -> dict[str, Path]:
    """Write ``scores/val.npz`` (when the fold validates) and ``scores/test.npz`` for a run."""
    from whale.train import ImageSet

    run_dir = Path(run_dir)
    model, cfg = load_run_model(run_dir, checkpoint)
    rs = RunScorer(model, cfg.model.channels, cfg.box_margin, verbose=progress)
    written = {}
    known = ImageSet.known(comp)
    f_known = rs.features(known.paths, known.boxes)
    if len(data.val):
        f_gal = f_known[known.positions(data.gallery.names)]
        f_val = rs.features(data.val.paths, data.val.boxes)
        written["val"] = save_scores(run_dir / "scores" / "val.npz", rs.matrix(f_val, f_gal),
                                     data.val.names, data.gallery.names, data.gallery.ids,
                                     query_ids=data.val.ids)
    if comp.test_images:
        written["test"] = write_test_scores(rs, comp, run_dir / "scores" / "test.npz", known, f_known)
    for name, path in written.items():
        log(f"wrote {path}")
    return written
