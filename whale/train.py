"""Training one fold under a schedule, with the paper's adversarial miner (Algorithm 1).

The loop walks the stages of the config. Inside a stage, every ``mining_interval`` epochs it
scores train-vs-train with the current model and mines the negatives of the next epochs;
each epoch pairs every training image once with a positive (a derangement inside its id) and
once with a mined negative, so half of all pairs are positive. At the end of every mining
interval it measures validation MAP@5 (``new_whale`` inserted at the best threshold on that
validation set) and keeps the best checkpoint. After every epoch the last checkpoint (model,
optimizer, position in the schedule) is written atomically, so a killed run resumes from its
last finished epoch and draws the same pairs as an uninterrupted run.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from whale import NEW_WHALE
from whale.checkpoint import load_checkpoint, read_state, save_checkpoint, write_json_atomic
from whale.config import RunConfig, Stage
from whale.data import Competition, load_competition
from whale.folds import assign_folds, fold_summary, split
from whale.pairs import ImageStore, crop_size_for
from whale.plots import plot_training

LOG_FIELDS = [
    "epoch", "stage", "epoch_in_stage", "image_size", "k", "lr", "freeze_branch", "dataset",
    "loss", "accuracy", "val_map5", "val_threshold", "mining_s", "epoch_s",
]


def _rng(seed: int, *keys: int) -> np.random.Generator:
    """Generator for one purpose at one point of the schedule: same keys, same numbers."""
    return np.random.default_rng([seed, *keys])


# Purposes of the random streams, so that each draws its own numbers.
_MINING, _POSITIVES, _PAIRS = 1, 2, 3


@dataclass
class ImageSet:
    """Images of one dataset for one fold: names, labels, file paths and boxes."""

    names: list[str]
    ids: np.ndarray  # [n] str
    paths: list[Path]
    boxes: list[tuple | None]

    @classmethod
    def from_frame(cls, comp: Competition, frame: pd.DataFrame, folder: str = "train") -> "ImageSet":
        names = list(frame["Image"])
        path_of = comp.train_path if folder == "train" else comp.test_path
        ids = np.asarray(list(frame["Id"]), dtype=str) if "Id" in frame else np.full(len(names), "", dtype=str)
        return cls(names, ids, [path_of(n) for n in names], [comp.box(n) for n in names])

    @classmethod
    def known(cls, comp: Competition, frame: pd.DataFrame | None = None) -> "ImageSet":
        """Rows of ``frame`` (default: all of ``comp.train``) with a known id, in order."""
        frame = comp.train if frame is None else frame
        return cls.from_frame(comp, frame[frame["Id"] != NEW_WHALE])

    @classmethod
    def test(cls, comp: Competition) -> "ImageSet":
        """The competition's test images (ids empty), in submission order."""
        return cls.from_frame(comp, pd.DataFrame({"Image": list(comp.test_images)}), folder="test")

    def with_partners(self) -> "ImageSet":
        """The images whose id has another image here: those that give positive pairs."""
        _, inverse, counts = np.unique(self.ids, return_inverse=True, return_counts=True)
        return self.subset(np.flatnonzero(counts[inverse] >= 2))

    def positions(self, names) -> np.ndarray:
        """``[len(names)] int64``: where each of ``names`` sits in this set."""
        pos = {n: i for i, n in enumerate(self.names)}
        return np.array([pos[n] for n in names], dtype=np.int64)

    def subset(self, index: np.ndarray) -> "ImageSet":
        index = np.asarray(index, dtype=np.int64)
        return ImageSet([self.names[i] for i in index], self.ids[index],
                        [self.paths[i] for i in index], [self.boxes[i] for i in index])

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class FoldData:
    """What one fold trains and validates on.

    ``pairs``: training images of ids with at least two images (they give positive pairs);
    ``gallery``: every training image with a known id; ``val``: validation queries,
    ``new_whale`` included (empty for fold -1); ``pairs_in_gallery``: ``[len(pairs)] int64``,
    where each pair image sits in ``gallery`` (training reads its crops from the gallery's
    store, so no image is decoded and cached twice).
    """

    pairs: ImageSet
    gallery: ImageSet
    val: ImageSet
    pairs_in_gallery: np.ndarray
    summary: str = ""


def _fold(gallery: ImageSet, val: ImageSet, summary: str = "") -> FoldData:
    pairs = gallery.with_partners()
    return FoldData(pairs, gallery, val, gallery.positions(pairs.names), summary)


def fold_data(comp: Competition, fold: int, seed: int, n_folds: int = 4,
              val_new_whale: bool = True) -> FoldData:
    """Split a competition by the paper's fold rules; fold -1 trains on everything.

    ``val_new_whale=False`` drops the ``new_whale`` images the rules add to validation.
    """
    if not -1 <= fold < n_folds:
        raise ValueError(f"fold must be -1 (train on everything) or 0..{n_folds - 1}, got {fold}")
    folds = assign_folds(comp.train, n_folds=n_folds, seed=seed)
    train_part, val_part = split(comp.train, folds, fold)
    if not val_new_whale:
        val_part = val_part[val_part["Id"] != NEW_WHALE]
    gallery = ImageSet.known(comp, train_part)
    val = ImageSet.from_frame(comp, val_part)
    return _fold(gallery, val, fold_summary(comp.train, folds))


def playground_data(comp: Competition) -> FoldData:
    """A pre-training dataset: every known image trains, nothing validates."""
    gallery = ImageSet.known(comp)
    return _fold(gallery, gallery.subset(np.arange(0)))


def git_revision() -> str:
    """The git commit of the toolkit, or 'unknown' outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass
class TrainResult:
    """How a call to :func:`train_fold` ended."""

    finished: bool  # the whole schedule ran
    epochs_done: int
    best_val_map5: float | None
    best_threshold: float | None
    run_dir: Path
    log: list[dict] = field(default_factory=list)


class _Stores:
    """Decoded box crops cached per (dataset, crop size), so each file is read once per size."""

    def __init__(self, channels: int, margin: float, mode: str = "memory"):
        self.channels, self.margin, self.mode, self._cache = channels, margin, mode, {}

    def get(self, key: str, images: ImageSet, crop_size: int):

        if (key, crop_size) not in self._cache:
            # Drop stores of other sizes: the schedule never goes back to a smaller size.
            self._cache = {k: v for k, v in self._cache.items() if k[1] == crop_size}
            self._cache[(key, crop_size)] = ImageStore(images.paths, images.boxes, crop_size,
                                                       channels=self.channels, margin=self.margin,
                                                       cache=self.mode)
        return self._cache[(key, crop_size)]


class Trainer:
    """Walks the schedule of one fold. Use :func:`train_fold` unless you need the pieces."""

    def __init__(self, cfg: RunConfig, data: FoldData, out_dir: Path,
                 playground: FoldData | None = None, verbose: int | str = "auto", log=print):
        self.cfg, self.data, self.out_dir, self.playground = cfg, data, Path(out_dir), playground
        self.verbose, self.log = verbose, log
        self.ckpt_dir = self.out_dir / "checkpoints"
        self.stores = _Stores(cfg.model.channels, cfg.box_margin, cfg.crop_cache)
        self.model = None

    # ----------------------------------------------------------------- model
    def _build_model(self, image_size: int):
        from whale.models import build_branch, build_head, build_siamese

        m = self.cfg.model
        branch = build_branch(m.branch, (image_size, image_size, m.channels), weights=m.weights)
        head = build_head(int(branch.output_shape[-1]), mid=m.head_mid, hidden=m.head_hidden)
        return build_siamese(branch, head)

    def _prepare_stage(self, stage: Stage) -> None:
        """Resize, freeze and compile for ``stage``.

        The optimizer (and its state) is kept when only the learning rate changes; a new
        image size or a change of freezing needs a fresh compile to take effect.
        """
        from whale.models import (compile_siamese, model_image_size, resize_siamese,
                                  set_branch_trainable, set_l2)

        fresh = self.model is None or getattr(self.model, "optimizer", None) is None
        if self.model is None:
            self.model = self._build_model(stage.image_size)
        if model_image_size(self.model) != stage.image_size:
            self.model = resize_siamese(self.model, stage.image_size)
            fresh = True
        if self.model.get_layer("branch").trainable == stage.freeze_branch:
            set_branch_trainable(self.model, not stage.freeze_branch)
            fresh = True
        if fresh:
            compile_siamese(self.model, stage.lr, l2=stage.l2)
        else:
            set_l2(self.model, stage.l2)
            self.model.optimizer.learning_rate.assign(stage.lr)
            # Regularisers are read when the train step is traced: trace it again.
            self.model.make_train_function(force=True)

    # -------------------------------------------------------------- features
    def _features(self, key: str, images: ImageSet, image_size: int,
                  indices: np.ndarray | None = None) -> np.ndarray:
        """Branch features ``[n, d] float32`` of un-augmented crops (``images[indices]``, default all)."""
        from whale.pairs import ImageBatches
        from whale.scoring import compute_features

        store = self.stores.get(key, images, crop_size_for(image_size))
        indices = np.arange(len(images)) if indices is None else indices
        batches = ImageBatches(store, indices, image_size, batch_size=max(self.cfg.batch_size, 32))
        return compute_features(self.model.get_layer("branch"), batches, n=len(indices),
                                progress=self.verbose != 0)

    def _scorer(self):
        from whale.scoring import HeadScorer

        return HeadScorer(self.model.get_layer("head"))

    # ---------------------------------------------------------------- mining
    def _mine(self, dataset: FoldData, stage: Stage, k: float, epochs: int,
              rng: np.random.Generator) -> list[np.ndarray]:
        """Negatives for the next ``epochs`` epochs: Algorithm 1 on the current model."""
        from whale.miner import mine_negatives
        from whale.scoring import mine_pruned

        feats = self._features(stage.dataset, dataset.gallery, stage.image_size, dataset.pairs_in_gallery)
        scorer = self._scorer()
        if self.cfg.mining == "pruned":
            return mine_pruned(scorer, feats, dataset.pairs.ids, k, epochs, rng, m=self.cfg.candidates)
        scores = scorer.matrix(feats, None, progress=self.verbose != 0)
        return mine_negatives(scores, dataset.pairs.ids, k, epochs, rng)

    # ------------------------------------------------------------ evaluation
    def validate(self, image_size: int) -> tuple[float, float]:
        """Validation MAP@5: ``(map5, threshold)``.

        The threshold is the config's, or (``threshold: null``) the best one on this validation set.
        """
        from whale.ranking import tune_threshold

        scores = self.val_scores(image_size)
        grid = None if self.cfg.threshold is None else np.array([self.cfg.threshold])
        t, best, _ = tune_threshold(scores, self.data.gallery.ids, self.data.val.ids, grid=grid)
        return float(best), float(t)

    def val_scores(self, image_size: int) -> np.ndarray:
        """``[n_val, n_gallery] float32``: validation queries against the fold's gallery."""
        fq = self._features("val", self.data.val, image_size)
        fg = self._features("main", self.data.gallery, image_size)
        return self._scorer().matrix(fq, fg, progress=self.verbose != 0)

    # ------------------------------------------------------------------ loop
    def run(self, resume: bool = False, deadline: float | None = None,
            max_epochs: int | None = None) -> TrainResult:
        """Train until the schedule ends, ``deadline`` (time.time()) nears, or ``max_epochs`` ran."""
        import keras

        from whale.augment import build_augmenter
        from whale.miner import positive_pairs
        from whale.pairs import PairDataset, make_epoch_pairs

        cfg = self.cfg
        keras.utils.set_random_seed(cfg.seed)
        state = {"epochs_done": 0, "best_val_map5": None, "best_threshold": None,
                 "mined_at": None, "stage": None}
        if resume and read_state(self.ckpt_dir, "last") is not None:
            self.model, state = load_checkpoint(self.ckpt_dir, "last")
            self.log(f"resuming after epoch {state['epochs_done']} from {self.ckpt_dir / 'last.keras'}")
        elif resume:
            self.log(f"--resume: no checkpoint in {self.ckpt_dir}, starting from scratch")
        log_rows = _read_log(self.out_dir / "log.csv")[: state["epochs_done"]]
        _write_log(self.out_dir / "log.csv", log_rows)

        mined: list[np.ndarray] | None = None
        if state.get("mined_at") is not None and (self.ckpt_dir / "mined.npz").exists():
            with np.load(self.ckpt_dir / "mined.npz", allow_pickle=False) as z:
                mined = [z[f"epoch{i}"] for i in range(int(z["count"]))]

        epochs_this_call, longest_epoch_s = 0, 0.0
        gepoch = 0
        for s_idx, stage in enumerate(cfg.stages):
            dataset = self.data if stage.dataset == "main" else self._playground()
            n = cfg.mining_interval
            n_minings = -(-stage.epochs // n)
            prepared = False
            for e in range(stage.epochs):
                if gepoch < state["epochs_done"]:
                    gepoch += 1
                    continue
                if max_epochs is not None and epochs_this_call >= max_epochs:
                    return self._result(False, state, log_rows)
                # The longest epoch so far (mining and validation included) must still fit.
                if deadline is not None and time.time() + 1.5 * longest_epoch_s > deadline:
                    self.log(f"time budget reached before epoch {gepoch + 1}; checkpoint kept, resume to go on")
                    return self._result(False, state, log_rows)
                if not prepared:
                    self._prepare_stage(stage)
                    prepared = True
                t0 = time.time()
                mining_s = 0.0
                block_start = gepoch - e + (e // n) * n  # first epoch of this mining block
                k = stage.k_at(e // n, n_minings)
                if e % n == 0 or mined is None or state.get("mined_at") != block_start:
                    epochs_in_block = min(n, stage.epochs - (e // n) * n)
                    mined = self._mine(dataset, stage, k, epochs_in_block,
                                       _rng(cfg.seed, _MINING, block_start))
                    mining_s = time.time() - t0
                    state["mined_at"] = block_start
                    _save_mined(self.ckpt_dir / "mined.npz", mined)
                    self.log(f"mined {len(mined)} epochs of negatives ({cfg.mining}) at K={k:g} "
                             f"in {mining_s:.1f} s")
                negatives = mined[gepoch - block_start]
                positives = positive_pairs(dataset.pairs.ids, _rng(cfg.seed, _POSITIVES, gepoch))
                pairs, labels = make_epoch_pairs(positives, negatives, _rng(cfg.seed, _PAIRS, gepoch))
                store = self.stores.get(stage.dataset, dataset.gallery, crop_size_for(stage.image_size))
                augmenter = (build_augmenter(stage.image_size, channels=cfg.model.channels)
                             if cfg.augment else None)
                data = PairDataset(store, dataset.pairs_in_gallery[pairs], labels, stage.image_size, augmenter,
                                   batch_size=cfg.batch_size, seed=cfg.seed, epoch=gepoch,
                                   workers=cfg.workers)
                self.log(f"epoch {gepoch + 1} (stage {s_idx + 1}/{len(cfg.stages)}, "
                         f"{stage.image_size}px, K={k:g}, lr={stage.lr:g}"
                         f"{', branch frozen' if stage.freeze_branch else ''}): {len(pairs)} pairs")
                hist = self.model.fit(data, epochs=1, verbose=self.verbose, shuffle=False)
                row = {"epoch": gepoch + 1, "stage": s_idx + 1, "epoch_in_stage": e + 1,
                       "image_size": stage.image_size, "k": k, "lr": stage.lr,
                       "freeze_branch": stage.freeze_branch, "dataset": stage.dataset,
                       "loss": hist.history["loss"][-1],
                       "accuracy": hist.history.get("acc", [float("nan")])[-1],
                       "val_map5": "", "val_threshold": "", "mining_s": round(mining_s, 2)}
                gepoch += 1
                epochs_this_call += 1
                end_of_block = (e + 1) % n == 0 or e + 1 == stage.epochs
                if end_of_block and len(self.data.val):
                    vmap, vt = self.validate(stage.image_size)
                    row.update(val_map5=round(vmap, 5), val_threshold=vt)
                    self.log(f"epoch {gepoch}: validation MAP@5 {vmap:.4f} at threshold {vt:g}")
                    if state["best_val_map5"] is None or vmap > state["best_val_map5"]:
                        state.update(best_val_map5=vmap, best_threshold=vt, best_epoch=gepoch)
                        save_checkpoint(self.model, self.ckpt_dir, "best", {**state, "epochs_done": gepoch,
                                                                            "stage": s_idx})
                state.update(epochs_done=gepoch, stage=s_idx)
                save_checkpoint(self.model, self.ckpt_dir, "last", state)
                epoch_s = time.time() - t0
                longest_epoch_s = max(longest_epoch_s, epoch_s)
                row["epoch_s"] = round(epoch_s, 2)
                log_rows.append(row)
                _write_log(self.out_dir / "log.csv", log_rows)
                self._tensorboard(row)
                if end_of_block:
                    plot_training(self.out_dir / "log.csv", self.out_dir / "training.png")
        if not len(self.data.val) or state["best_val_map5"] is None:
            # No validation (fold -1): the final model is the best one.
            save_checkpoint(self.model, self.ckpt_dir, "best", {**state, "epochs_done": gepoch})
        write_json_atomic(self.out_dir / "done.json", {"epochs_done": gepoch, **_summary(state)})
        return self._result(True, state, log_rows)

    def _playground(self) -> FoldData:
        if self.playground is None:
            raise ValueError("the schedule has a 'dataset: playground' stage but no --playground "
                             "folder was given")
        return self.playground

    def _tensorboard(self, row: dict) -> None:
        import tensorflow as tf

        if not hasattr(self, "_tb"):
            self._tb = tf.summary.create_file_writer(str(self.out_dir / "tensorboard"))
        with self._tb.as_default():
            for name in ("loss", "accuracy", "val_map5", "k", "lr"):
                if row.get(name) not in ("", None):
                    tf.summary.scalar(name, float(row[name]), step=int(row["epoch"]))
        self._tb.flush()

    def _result(self, finished: bool, state: dict, log_rows: list[dict]) -> TrainResult:
        return TrainResult(finished, state["epochs_done"], state["best_val_map5"],
                           state["best_threshold"], self.out_dir, log_rows)


def _save_mined(path: Path, mined: list[np.ndarray]) -> None:
    """The negatives of the current mining block, so a resumed run trains on the same pairs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, count=len(mined), **{f"epoch{i}": p for i, p in enumerate(mined)})
    tmp.replace(path)


def _summary(state: dict) -> dict:
    return {k: state.get(k) for k in ("best_val_map5", "best_threshold", "best_epoch")}


def _read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _write_log(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def write_run_metadata(out_dir: Path, cfg: RunConfig, fold: int, data_dir: Path,
                       playground: Path | None) -> None:
    """The resolved config, seed, fold and git revision, next to the run's outputs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(cfg.to_yaml())
    meta = {"fold": fold, "seed": cfg.seed, "git_revision": git_revision(), "data": str(data_dir),
            "playground": str(playground) if playground else None, "argv": sys.argv,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    runs_path = out_dir / "run.json"
    history = json.loads(runs_path.read_text()).get("history", []) if runs_path.exists() else []
    write_json_atomic(runs_path, {**meta, "history": history + [meta]})


def train_fold(cfg: RunConfig, data_dir, fold: int, out_dir, resume: bool = False,
               playground=None, deadline: float | None = None, max_epochs: int | None = None,
               score: bool = True, verbose: int | str = "auto", log=print) -> TrainResult:
    """Train fold ``fold`` (-1: all data) of the competition in ``data_dir`` into ``out_dir``.

    Writes ``config.yaml``, ``run.json``, ``log.csv``, ``training.png``, ``tensorboard/``,
    ``checkpoints/`` and,
    when the schedule is done and ``score`` is true, ``scores/val.npz`` and ``scores/test.npz``.
    """
    from whale.distribute import describe, strategy_scope
    from whale.inference import score_run

    out_dir, data_dir = Path(out_dir), Path(data_dir)
    comp = load_competition(data_dir)
    data = fold_data(comp, fold, cfg.seed, val_new_whale=cfg.val_new_whale)
    log(data.summary)
    pg = playground_data(load_competition(playground)) if playground else None
    write_run_metadata(out_dir, cfg, fold, data_dir, Path(playground) if playground else None)
    with strategy_scope(cfg.strategy) as strategy:
        log(f"distribution: {describe(strategy)}")
        trainer = Trainer(cfg, data, out_dir, playground=pg, verbose=verbose, log=log)
        result = trainer.run(resume=resume, deadline=deadline, max_epochs=max_epochs)
        if result.finished and score:
            score_run(out_dir, comp, data, checkpoint="best", log=log, progress=verbose != 0)
    return result


def score_fold(out_dir, data_dir, fold: int, cfg: RunConfig, checkpoint: str = "best",
               log=print) -> dict:
    """Write the score files of an existing run folder from one of its checkpoints."""
    from whale.distribute import strategy_scope
    from whale.inference import score_run

    comp = load_competition(data_dir)
    data = fold_data(comp, fold, cfg.seed, val_new_whale=cfg.val_new_whale)
    with strategy_scope(cfg.strategy):
        return score_run(out_dir, comp, data, checkpoint=checkpoint, log=log)
