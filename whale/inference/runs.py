"""A trained run turned into score files: load its model, compute features, score, write.

:func:`score_run` writes a run's ``scores/val.npz`` and ``scores/test.npz`` (format:
:mod:`whale.inference.scorefile`); :func:`score_folder` scores any Kaggle-format folder with a
run (``python -m whale.inference``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from whale.data import ImageSet, ImageStore, crop_size_for
from whale.core.errors import DataError
from whale.inference.features import ChainedBatches, ImageBatches, compute_features
from whale.inference.scorefile import score_identity, write_scores
from whale.models.checkpoint import load_checkpoint, snapshot_name
from whale.objectives import make_scorer  # importing whale.objectives registers its layers for loading


class RunScorer:
    """A trained siamese model turned into feature extraction + head scoring.

    ``views``: test-time views besides the plain one (:data:`whale.config.TTA_VIEWS`);
    ``tta_mode``: ``features`` averages the views' features before one head pass,
    ``scores`` averages one head pass per view. ``mirror``: the mirrored query is also scored
    against the mirrored gallery (the flipped identities a ``flip_ids`` run trained on, whose
    ids are folded back onto the originals), and the two scores are averaged. With neither,
    scoring is the plain resize and one head pass. ``crop``: the run's ``crop`` rule for photos
    without a box (``content``: their white padding cut off, as training cut it).
    """

    def __init__(self, model, channels: int, margin: float, batch_size: int = 64, verbose=True,
                 views: tuple[str, ...] = (), tta_mode: str = "features", mirror: bool = False,
                 crop: str = "box", trunk=None, gallery_views: bool = False):
        from whale.models import model_input_size

        self.model, self.channels, self.margin, self.crop = model, channels, margin, crop
        self.image_size = model_input_size(model)  # (height, width)
        self.trunk = trunk  # a trunk run's TrunkMaps: its branch reads their maps, not photos
        self.gallery_views = bool(gallery_views) and trunk is not None
        self.batch_size, self.verbose = batch_size, verbose
        self.views, self.tta_mode, self.mirror = ("plain", *views), tta_mode, bool(mirror)
        self.scorer = make_scorer(model, constants=True)  # one model, many pairs

    @classmethod
    def for_config(cls, model, cfg, verbose=True, trunk_cache=None) -> "RunScorer":
        """The scorer a run's config asks for: its channels, box margin, ``crop``, ``tta`` and ``flip_ids``; a
        trunk run's maps (:mod:`whale.inference.trunk`, kept in ``trunk_cache`` when given)."""
        trunk = None
        if cfg.trunk.layer is not None:
            from whale.inference.trunk import TrunkMaps

            trunk, _ = TrunkMaps.for_config(cfg, cache=trunk_cache, progress=verbose)
        return cls(model, cfg.model.channels, cfg.box_margin, verbose=verbose, views=cfg.tta,
                   tta_mode=cfg.tta_mode, mirror=cfg.flip_ids, crop=cfg.crop, trunk=trunk,
                   gallery_views=cfg.trunk.gallery_views)

    def features(self, paths, boxes) -> np.ndarray:
        """``[G, V, n, d] float32`` branch features of the box crops of ``paths``.

        ``G`` = 2 with ``mirror`` (plain, mirrored crops) else 1; ``V`` = 1 + number of views,
        the plain view first.
        """
        if self.trunk is not None:
            from whale.inference.trunk import first_view

            store = self.trunk.store(paths, boxes)
            batches = ImageBatches(store, None, store.map_size, self.batch_size, plain=first_view)
            return compute_features(self.model.get_layer("branch"), batches, n=len(store),
                                    progress=self.verbose)[None, None]
        out = []
        for flip in (False, True) if self.mirror else (False,):
            # The same crops as training sees them (stored at crop_size_for, resized to the input).
            store = ImageStore(list(paths), list(boxes), crop_size_for(self.image_size),
                               channels=self.channels, margin=self.margin, cache=len(self.views) > 1,
                               flips=np.full(len(paths), flip), crop=self.crop)
            out.append([compute_features(self.model.get_layer("branch"),
                                         ImageBatches(store, None, self.image_size, self.batch_size, view=v),
                                         n=len(store), progress=self.verbose) for v in self.views])
        return np.asarray(out, dtype=np.float32)

    def gallery_features(self, paths, boxes) -> np.ndarray:
        """:meth:`features` of gallery photos: with ``gallery_views`` (a trunk run's ``trunk.gallery_views``), each
        photo's branch features averaged over its plain and its ``trunk.views`` augmented crops' maps (those the run
        trained on, computed once and kept by content), ``[1, 1, n, d]``; else :meth:`features`."""
        if not self.gallery_views:
            return self.features(paths, boxes)
        store, n_views = self.trunk.store(paths, boxes, views=True), 1 + self.trunk.views
        views = ChainedBatches([ImageBatches(store, None, store.map_size, self.batch_size,
                                             plain=lambda maps, v=v: np.asarray(maps[v], np.float32))
                                for v in range(n_views)])  # one pass, one progress bar
        f = compute_features(self.model.get_layer("branch"), views, n=n_views * len(store), progress=self.verbose)
        f = f.reshape(n_views, len(store), -1)
        total = f[0]
        for v in range(1, n_views):  # summed view by view, in order
            total = total + f[v]
        return (total / n_views)[None, None]

    def matrix(self, fq: np.ndarray, fg: np.ndarray) -> np.ndarray:
        """``[n_q, n_g] float16`` head scores of features from :meth:`features` (``[G, V, n, d]``;
        plain ``[n, d]`` arrays are one view), averaged over mirrors and views."""
        fq, fg = (f[None, None] if f.ndim == 2 else f for f in (fq, fg))
        if fq.shape[:2] != fg.shape[:2]:
            raise ValueError(f"query and gallery features of different views: {fq.shape} vs {fg.shape}")
        if self.tta_mode == "features":
            fq, fg = fq.mean(axis=1, keepdims=True), fg.mean(axis=1, keepdims=True)
        total = None
        for g in range(fq.shape[0]):
            for v in range(fq.shape[1]):
                s = self.scorer.matrix(fq[g, v], fg[g, v], dtype=np.float32, progress=self.verbose)
                total = s if total is None else total + s
        return (total / (fq.shape[0] * fq.shape[1])).astype(np.float16)


def load_run_model(run_dir, checkpoint: str = "best", with_state: bool = False, cfg=None):
    """``(model, config)`` of a run: checkpoint ``best``, ``last``, ``snapshot-<size>`` or a path to a .keras file.

    ``with_state=True`` returns ``(model, config, state)``, ``state`` being the checkpoint's
    JSON state (``{}`` for a bare .keras file). ``cfg``: the run's config when the caller holds it
    (the trainer, which wrote it), else read from the run's ``config.yaml``.
    """
    from whale.config import load_config
    from whale.models import load_model

    run_dir = Path(run_dir)
    cfg = load_config(run_dir / "config.yaml") if cfg is None else cfg
    if checkpoint in ("best", "last") or snapshot_name(checkpoint):
        model, state = load_checkpoint(run_dir / "checkpoints", checkpoint)
    else:
        model, state = load_model(checkpoint), {}
    return (model, cfg, state) if with_state else (model, cfg)


def run_identity(run_dir, cfg, checkpoint: str, state: dict, split: str) -> dict:
    """What a score file records about the run that wrote it (:func:`whale.inference.scorefile.score_identity`)."""
    import json

    import keras

    from whale.config import config_hash

    try:
        meta = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        meta = {}
    return score_identity(split, run_id=meta.get("run_id"), run=Path(run_dir).name, config_hash=config_hash(cfg),
                          fold=meta.get("fold"), seed=cfg.seed, backend=keras.backend.backend(),
                          checkpoint=str(checkpoint), snapshot=snapshot_name(checkpoint),
                          init_from=(meta.get("init_from") or {}).get("run_id"), epoch=state.get("epochs_done"))


def write_test_scores(rs: RunScorer, comp, out, known=None, f_known=None, identity: dict | None = None) -> Path:
    """Score file ``out``: the competition's test images vs every known-id training image.

    ``known`` (:class:`whale.data.ImageSet`) and its features ``f_known`` may be passed when
    the caller already has them.
    """
    known = ImageSet.known(comp) if known is None else known
    f_known = rs.gallery_features(known.paths, known.boxes) if f_known is None else f_known
    test = ImageSet.test(comp)
    f_test = rs.features(test.paths, test.boxes)
    return write_scores(out, rs.matrix(f_test, f_known), test.names, known.names, known.ids,
                        identity=identity)


def scores_dir(run_dir, checkpoint: str = "best") -> Path:
    """Where a checkpoint's score files go: ``RUN/scores``, or ``RUN/scores/384`` for ``snapshot-384``."""
    name = snapshot_name(checkpoint)
    return Path(run_dir) / "scores" / (name or "")


def store_val_threshold(val_path, scores: np.ndarray, gallery_ids, query_ids, open_label: str) -> Path:
    """Tune the ``new_whale`` threshold on validation ``scores`` ``[n_val, n_gallery]`` (those written to
    ``val_path``) once and keep it beside them as ``threshold.json`` (:mod:`whale.ranking.stored`)."""
    from whale.core.files import file_hash
    from whale.ranking import tune_threshold
    from whale.ranking.stored import THRESHOLD_FILE, write_threshold

    t, best, _ = tune_threshold(scores.astype(np.float32), gallery_ids, query_ids, open_label=open_label)
    return write_threshold(Path(val_path).with_name(THRESHOLD_FILE), t, map5=best, open_label=open_label,
                           tuned_on=str(val_path), scores_hash=file_hash(val_path))


def score_run(run_dir, comp, data, checkpoint: str = "best", log=print,
              progress: bool = True, cfg=None, trunk_cache=None) -> dict[str, Path]:
    """Write ``val.npz`` (when the fold validates; with it ``threshold.json``, the ``new_whale`` threshold
    tuned on it: :func:`store_val_threshold`) and ``test.npz`` of a run into :func:`scores_dir`.

    ``cfg``: the run's resolved config in memory (what its ``config.yaml`` holds; the trainer passes
    it), else read back from ``config.yaml``. ``trunk_cache``: where a trunk run keeps its maps.
    """
    run_dir = Path(run_dir)
    out = scores_dir(run_dir, checkpoint)
    model, cfg, state = load_run_model(run_dir, checkpoint, with_state=True, cfg=cfg)
    rs = RunScorer.for_config(model, cfg, verbose=progress, trunk_cache=trunk_cache)
    written = {}
    known = ImageSet.known(comp)
    # The test's gallery is every known photo; without a test only the fold's gallery is scored as a gallery.
    f_known = rs.gallery_features(known.paths, known.boxes) if comp.test_images else None
    if len(data.val):
        f_gal = (rs.gallery_features(data.gallery.paths, data.gallery.boxes) if f_known is None
                 else f_known[:, :, known.positions(data.gallery.names)])
        f_val = rs.features(data.val.paths, data.val.boxes)
        val = rs.matrix(f_val, f_gal)
        written["val"] = write_scores(out / "val.npz", val,
                                     data.val.names, data.gallery.names, data.gallery.ids,
                                     query_ids=data.val.ids,
                                     identity=run_identity(run_dir, cfg, checkpoint, state, "val"),
                                     trained_on=data.gallery.names)
        log(f"wrote {store_val_threshold(written['val'], val, data.gallery.ids, data.val.ids, data.open_label)}")
    if comp.test_images:
        written["test"] = write_test_scores(rs, comp, out / "test.npz", known, f_known,
                                            identity=run_identity(run_dir, cfg, checkpoint, state, "test"))
    for name, path in written.items():
        log(f"wrote {path}")
    return written


def score_folder(run_dir, data_dir, out, checkpoint: str = "best", verbose: bool = True) -> Path:
    """Write ``out`` (.npz): test images of ``data_dir`` vs its known-id training images."""
    from whale.data import load_competition

    comp = load_competition(data_dir)
    if not comp.test_images:
        raise DataError(f"{Path(data_dir) / 'test'}: no test images to score (the folder is empty or missing)")
    model, cfg, state = load_run_model(run_dir, checkpoint, with_state=True)
    rs = RunScorer.for_config(model, cfg, verbose=verbose)
    return write_test_scores(rs, comp, out, identity=run_identity(run_dir, cfg, checkpoint, state, "test"))
