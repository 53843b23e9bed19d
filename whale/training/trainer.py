"""Training one fold under a schedule, with the paper's adversarial miner (Algorithm 1).

The loop walks the per-epoch plan of :mod:`whale.training.schedule`. At the start of every
mining block it scores train-vs-train with the current model and mines the negatives of the next epochs;
each epoch pairs every training image once with a positive (a derangement inside its id) and
once with a mined negative, so half of all pairs are positive. At the end of every mining
interval it measures validation MAP@5 (``new_whale`` inserted at the best threshold on that
validation set) and keeps the best checkpoint. After every epoch the last checkpoint (model,
optimizer, position in the schedule) is written atomically, so a killed run resumes from its
last finished epoch and draws the same pairs as an uninterrupted run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from whale.config import RunConfig, Stage
from whale.data import FoldData, ImageSet, crop_size_for, unlabelled
from whale.core.files import write_json_atomic
from whale.imagesize import input_size, size_label
from whale.core.errors import ConfigError
from whale.models.checkpoint import load_checkpoint, save_checkpoint, snapshot_tag
import whale.objectives  # noqa: F401 - registers every objective's layers and losses, so checkpoints load
from whale.training.clock import next_epoch_estimate
from whale.training.foldjob import FoldJob, prepare_fold, prepare_pretrain
from whale.training.plots import plot_training
from whale.training.runlog import TensorBoardLog, read_log, write_log, write_run_metadata
from whale.training.pretrain import InitSource
from whale.training.minedfiles import load_mined, save_mined, training_key
from whale.training.schedule import EpochPlan, Schedule
from whale.training.stores import CropStores, TrunkStores


def _rng(seed: int, *keys: int) -> np.random.Generator:
    """Generator for one purpose at one point of the schedule: same keys, same numbers."""
    return np.random.default_rng([seed, *keys])


# Purposes of the random streams, so that each draws its own numbers.
_MINING, _POSITIVES, _PAIRS, _MIX = 1, 2, 3, 4


@dataclass
class TrainResult:
    """How a call to :func:`train_fold` ended."""

    finished: bool  # the whole schedule ran
    epochs_done: int
    best_val_map5: float | None
    best_threshold: float | None
    run_dir: Path
    log: list[dict] = field(default_factory=list)
    epochs_total: int | None = None  # of the schedule, once sized to the training set


class Trainer:
    """Walks the schedule of one fold's :class:`whale.training.foldjob.FoldJob` (its sized config, data and
    run folder). Use :func:`train_fold` unless you need the pieces.

    The old form ``Trainer(cfg, data, out_dir, playground=..., init=..., homography=...)`` still works: it
    builds the job from those parts (:meth:`FoldJob.of`, which sizes the config).
    """

    def __init__(self, job: FoldJob | RunConfig, data: FoldData | None = None, out_dir: Path | None = None,
                 playground: FoldData | None = None, verbose: int | str = "auto", log=print,
                 init: InitSource | None = None, homography: FoldData | None = None, trunk_cache=None):
        from whale.mining import make_miner

        if not isinstance(job, FoldJob):
            job = FoldJob.of(job, data, out_dir, playground=playground, homography=homography, init=init)
        if job.sized is None or job.run_dir is None:
            raise ValueError("Trainer: expected a FoldJob from prepare_fold (sized, with a run folder); "
                             "received one read for --plan")
        cfg = job.sized  # stages given in steps or pairs hold their epochs for this fold's training set
        self.job, self.cfg, self.data, self.out_dir, self.playground = job, cfg, job.data, job.run_dir, job.playground
        self.homography = job.views  # the views of dataset: homography stages (whale.data.unlabelled)
        self.init = job.init  # the run this one starts from, after its first stages (init_from)
        self.verbose, self.log = verbose, log
        self.ckpt_dir = self.out_dir / "checkpoints"
        self.stores = CropStores(cfg.model.channels, cfg.box_margin, cfg.crop_cache, cfg.crop)
        self.schedule = Schedule.from_config(cfg)
        self.miner = make_miner(cfg.mining, cfg.candidates, progress=verbose != 0)
        self.objective = whale.objectives.build_objective(cfg.objective, cfg.model.head_mid, cfg.model.head_hidden)
        self.tensorboard = TensorBoardLog(self.out_dir / "tensorboard", log=log)
        self.model = None
        # A trunk run's branch is the top of its branch, on the maps of its frozen trunk (kept in trunk_cache).
        self.trunk = TrunkStores(cfg, trunk_cache, verbose != 0) if cfg.trunk.layer is not None else None
        self._traced_l2: float | None = None  # the weight decay the train function was traced with
        self._timing = {"compile_s": 0.0}  # this epoch's first-call costs (next_epoch_estimate)

    def _training(self, dataset: FoldData) -> FoldData:
        """What ``dataset`` trains and mines on: itself, or with ``flip_ids`` its mirrored copy
        (the gallery's first ``n`` images stay the originals, so validation reads the same store), made once and
        kept with ``dataset`` (:meth:`FoldData.mirrored`)."""
        if not self.cfg.flip_ids or dataset is self.homography:  # a photo's mirror is no other photo
            return dataset
        return dataset.mirrored()

    # ----------------------------------------------------------------- model
    def _prepare_stage(self, stage: Stage, dataset: FoldData) -> bool:
        """Resize, freeze and compile for ``stage`` (trained on ``dataset``); True when its first training step
        will compile (trace) the train function again. The optimizer (and its state) and the traced train function
        are kept when only the learning rate changes (a variable of the step); a new weight decay is traced again;
        a new image size, freezing or model form (``batching``; ArcFace's classes on another dataset) compiles."""
        from whale.models import build_branch, model_input_size, set_branch_trainable, set_l2, transfer_branch
        from whale.training.identitybatches import class_counts

        shared = self.cfg.batching == "images" and not self.objective.identities
        # An identity objective's classes: images per training identity (ArcFace's classes and margins).
        classes = class_counts(self._training(dataset).pairs.ids) if self.objective.identities else None
        fresh = self.model is None or getattr(self.model, "optimizer", None) is None
        size = self._input(stage)
        if self.model is None:
            m = self.cfg.model
            branch = (self.trunk.top() if self.trunk else
                      build_branch(m.branch, (*size, m.channels), weights=m.weights, options=m.branch_options()))
            self.model = self.objective.build(branch, shared=shared, classes=classes)
        if not self.trunk and model_input_size(self.model) != size:
            branch = transfer_branch(self.model.get_layer("branch"), size)
            self.model = self.objective.rebuild(self.model, branch, shared, classes)
            fresh = True
        if self.objective.needs_rebuild(self.model, shared, classes):
            self.model = self.objective.rebuild(self.model, self.model.get_layer("branch"), shared, classes)
            fresh = True
        if self.model.get_layer("branch").trainable == stage.freeze_branch:
            set_branch_trainable(self.model, not stage.freeze_branch)
            fresh = True
        if fresh:
            self.objective.compile(self.model, stage.lr, l2=stage.l2, classes=classes)
        else:
            self.model.optimizer.learning_rate.assign(stage.lr)
        if fresh or self._traced_l2 == stage.l2:
            self._traced_l2 = stage.l2
            return fresh
        # Regularisers are read when the train step is traced (and are not saved with a checkpoint): trace it again.
        set_l2(self.model, stage.l2)
        self.model.make_train_function(force=True)
        self._traced_l2 = stage.l2
        return True

    def _input(self, stage: Stage) -> tuple[int, int]:
        """``(height, width)`` of ``stage``'s photos (its ``image_size`` under the run's ``aspect``): the model's
        input, or a trunk run's trunk's."""
        return input_size(stage.image_size, self.cfg.aspect)

    def _store(self, key: str, images: ImageSet, stage: Stage):
        """What the batches of dataset ``key`` (its ``images``) read: crops at ``stage``'s size, or a trunk run's
        maps."""
        return self.trunk.get(key, images) if self.trunk else self.stores.get(key, images,
                                                                              crop_size_for(self._input(stage)))

    # -------------------------------------------------------------- features
    def _features(self, key: str, images: ImageSet, stage: Stage,
                  indices: np.ndarray | None = None) -> np.ndarray:
        """Branch features ``[n, d] float32`` of un-augmented crops (``images[indices]``, default all)
        at ``stage``'s input size."""
        from whale.inference.features import ImageBatches, compute_features

        from whale.inference.trunk import first_view

        store = self._store(key, images, stage)
        indices = np.arange(len(images)) if indices is None else indices
        batches = ImageBatches(store, indices, store.map_size if self.trunk else self._input(stage),
                               batch_size=max(self.cfg.batch_size, 32), plain=first_view if self.trunk else None)
        return compute_features(self.model.get_layer("branch"), batches, n=len(indices),
                                progress=self.verbose != 0, timing=self._timing)

    def _scorer(self):
        return self.objective.scorer(self.model)

    # ---------------------------------------------------------------- mining
    def _mine(self, dataset: FoldData, ep: EpochPlan) -> list[np.ndarray]:
        """Negatives for the epochs of ``ep``'s mining block: Algorithm 1 on the current model."""
        what = f"epochs {ep.block_start + 1}-{ep.block_start + ep.block_epochs}"
        if ep.stage.dataset == "homography":  # no identities to mine: random other photos (whale.data.unlabelled)
            self.log(f"random negatives of {what} (dataset: homography, {len(dataset.pairs) // 2} photos)")
            rngs = [_rng(self.cfg.seed, _MINING, ep.block_start, e) for e in range(ep.block_epochs)]
            return [unlabelled.random_negatives(len(dataset.pairs), rng) for rng in rngs]
        self.log(f"mining the negatives of {what} (K={ep.k:g})")
        dataset = self._training(dataset)
        feats = self._features(ep.stage.dataset, dataset.gallery, ep.stage, dataset.pairs_in_gallery)
        mined = self.miner.mine(self._scorer(), feats, dataset.pairs.ids, ep.k, ep.block_epochs,
                                _rng(self.cfg.seed, _MINING, ep.block_start))
        self.log(self.miner.last_stats.line())
        return mined

    # ------------------------------------------------------------ evaluation
    def validate(self, stage: Stage) -> tuple[float, float]:
        """Validation MAP@5 at ``stage``'s input size: ``(map5, threshold)``.

        The threshold is the config's, or (``threshold: null``) the best one on this validation set.
        """
        from whale.ranking import tune_threshold

        grid, d = None if self.cfg.threshold is None else np.array([self.cfg.threshold]), self.data
        t, best, _ = tune_threshold(self.val_scores(stage), d.gallery.ids, d.val.ids, grid=grid, open_label=d.open_label)
        return float(best), float(t)

    def val_scores(self, stage: Stage) -> np.ndarray:
        """``[n_val, n_gallery] float32``: validation queries against the fold's gallery at ``stage``'s size."""
        fq = self._features("val", self.data.val, stage)
        fg = self._features("main", self._training(self.data).gallery, stage,
                            np.arange(len(self.data.gallery)))
        return self._scorer().matrix(fq, fg, progress=self.verbose != 0)

    # ------------------------------------------------------------------ loop
    def run(self, resume: bool = False, deadline: float | None = None,
            max_epochs: int | None = None) -> TrainResult:
        """Train until the schedule ends, ``deadline`` (time.time()) nears, or ``max_epochs`` ran.

        Models are built, resized and loaded under the config's ``precision`` policy.
        """
        from whale.models.precision import precision_scope

        with precision_scope(self.cfg.precision):
            return self._run(resume, deadline, max_epochs)

    def _run(self, resume: bool, deadline: float | None, max_epochs: int | None) -> TrainResult:
        import keras

        cfg = self.cfg
        keras.utils.set_random_seed(cfg.seed)
        state = {"epochs_done": 0, "best_val_map5": None, "best_threshold": None, "stage": None}
        if resume and any((self.ckpt_dir / f"last{s}.json").is_file() for s in ("", ".prev")):
            self.model, state = load_checkpoint(self.ckpt_dir, "last", fallback=True, log=self.log)
            self.log(f"resuming after epoch {state['epochs_done']} from {self.ckpt_dir / state['model_file']}")
        else:
            if resume:
                self.log(f"--resume: no checkpoint in {self.ckpt_dir}, starting from "
                         + ("scratch" if self.init is None else "init_from"))
            if self.init is not None:
                init = self.init
                self.model, _ = load_checkpoint(init.run_dir / "checkpoints", init.checkpoint, log=self.log)
                state.update(epochs_done=init.epochs_done, stage=init.stages_done - 1)
                self.log(f"init_from: starting after epoch {init.epochs_done} (stages 1-{init.stages_done}, trained "
                         f"by run {init.run_id}) from {init.run_dir} checkpoint '{init.checkpoint}'")
        # Rows up to the checkpoint's epoch (a run started from another has none before it).
        log_rows = [r for r in read_log(self.out_dir / "log.csv") if int(r["epoch"]) <= state["epochs_done"]]
        write_log(self.out_dir / "log.csv", log_rows)
        mined, mined_block = None, None

        epochs_this_call, epoch_times, prepared_stage = 0, [], None
        for ep in self.schedule.remaining(state["epochs_done"]):
            if max_epochs is not None and epochs_this_call >= max_epochs:
                return self._result(False, state, log_rows)
            stage = ep.stage
            dataset = self._dataset(stage.dataset)
            compiles = not epoch_times  # a call's first epoch traces every function it runs
            if prepared_stage != ep.stage_index:
                compiles = self._prepare_stage(stage, dataset) or compiles
                prepared_stage = ep.stage_index
            # The next epoch (mining and validation included) must still fit.
            if deadline is not None and time.time() + 1.5 * next_epoch_estimate(epoch_times, compiles) > deadline:
                self.log(f"time budget reached before epoch {ep.epoch + 1}; checkpoint kept, resume to go on")
                return self._result(False, state, log_rows)
            t0 = time.time()
            self._timing["compile_s"] = 0.0
            mining_s = 0.0
            if mined_block != ep.block_start:
                # Inside a block, its negatives come back from disk (mined from the model at the
                # block's start); at a block's first epoch they are mined from the current model.
                key = training_key(self._training(dataset).pairs)  # other images (--allow-changes): mined again
                mined = None if ep.mines else load_mined(self.ckpt_dir, ep.block_start, key)
                if mined is None:
                    if not ep.mines:
                        self.log(f"warning: no saved negatives of the block starting at epoch {ep.block_start + 1} "
                                 "for these training images; mining them again from the current model")
                    mined = self._mine(dataset, ep)
                    mining_s = time.time() - t0
                    save_mined(self.ckpt_dir, ep.block_start, mined, key)
                mined_block = ep.block_start
            hist = self._fit_epoch(dataset, ep, mined[ep.index_in_block])
            row = {"epoch": ep.epoch + 1, "stage": ep.stage_index + 1, "epoch_in_stage": ep.epoch_in_stage + 1,
                   "image_size": stage.image_size, "k": ep.k, "lr": stage.lr,
                   "freeze_branch": stage.freeze_branch, "dataset": stage.dataset,
                   "loss": hist.history["loss"][-1],
                   "accuracy": hist.history.get(self.objective.metric or "", [float("nan")])[-1],
                   "val_map5": "", "val_threshold": "", "mining_s": round(mining_s, 2)}
            done = ep.epoch + 1
            epochs_this_call += 1
            if ep.ends_block and len(self.data.val):
                vmap, vt = self.validate(stage)
                row.update(val_map5=round(vmap, 5), val_threshold=vt)
                self.log(f"epoch {done}: validation MAP@5 {vmap:.4f} at threshold {vt:g}")
                if state["best_val_map5"] is None or vmap > state["best_val_map5"]:
                    state.update(best_val_map5=vmap, best_threshold=vt, best_epoch=done)
                    save_checkpoint(self.model, self.ckpt_dir, "best",
                                    {**state, "epochs_done": done, "stage": ep.stage_index})
            state.update(epochs_done=done, stage=ep.stage_index)
            if stage.snapshot and ep.epoch_in_stage == stage.epochs - 1:
                # This stage's final model, kept for scoring as a model of its own (scores/<size>/).
                save_checkpoint(self.model, self.ckpt_dir, snapshot_tag(stage.snapshot_name), state)
            epoch_s = time.time() - t0
            epoch_times.append((compiles, epoch_s, min(epoch_s, self._timing["compile_s"])))
            row["epoch_s"] = round(epoch_s, 2)
            log_rows.append(row)
            # The log first: a kill before the checkpoint leaves one row too many, which the
            # resume cuts off; the other order would lose a row.
            write_log(self.out_dir / "log.csv", log_rows)
            save_checkpoint(self.model, self.ckpt_dir, "last", state)
            self.tensorboard.write(row)
            if ep.ends_block:
                plot_training(self.out_dir / "log.csv", self.out_dir / "training.png")
        total = self.schedule.total_epochs
        if not len(self.data.val) or state["best_val_map5"] is None:
            # No validation (fold -1): the final model is the best one.
            save_checkpoint(self.model, self.ckpt_dir, "best", {**state, "epochs_done": total})
        write_json_atomic(self.out_dir / "done.json", {"epochs_done": total, **_summary(state)})
        return self._result(True, state, log_rows)

    def _fit_epoch(self, dataset: FoldData, ep: EpochPlan, negatives: np.ndarray):
        """One epoch of ``fit``: every pair image once with a positive and once with ``negatives``
        (an identity objective: P x K batches seeded by ``negatives``, :mod:`whale.training.identitybatches`)."""
        from whale.data.augment import build_augmenter
        from whale.mining import mix_random_negatives, positive_pairs
        from whale.inference.trunk import trunk_reader
        from whale.training.clock import FirstStepClock
        from whale.training import identitybatches
        from whale.training.imagebatches import ImageBatchDataset, describe
        from whale.training.pairs import PairDataset, make_epoch_pairs

        cfg, stage, dataset = self.cfg, ep.stage, self._training(dataset)
        gallery = unlabelled.first_views(dataset) if stage.dataset == "homography" else dataset.gallery
        size = self._input(stage)
        store = self._store(stage.dataset, gallery, stage)
        # With flip_ids a mirror image is another whale: no random flips inside an id.
        augmenter = (build_augmenter(size, channels=cfg.model.channels, style=cfg.augment_style,
                                     flip_p=0.0 if cfg.flip_ids else 0.02) if cfg.augment else None)
        if self.trunk:  # maps, not photos: one of each photo's augmented views, or its plain one
            size, augmenter = store.map_size, trunk_reader(cfg.augment)
        if stage.dataset == "homography":  # two views of each photo, each slot warped by its own homography first
            store, augmenter = unlabelled.view_inputs(store, augmenter, cfg.homography, size)
        if self.objective.identities:
            data, what = identitybatches.epoch_data(store, dataset, cfg, size, ep.epoch, negatives, augmenter,
                                                    _rng(cfg.seed, _PAIRS, ep.epoch))
            what += f", objective {self.objective.name}"
        else:
            positives = positive_pairs(dataset.pairs.ids, _rng(cfg.seed, _POSITIVES, ep.epoch))
            if cfg.negatives_mix > 0 and stage.dataset != "homography":
                negatives = mix_random_negatives(negatives, dataset.pairs.ids, cfg.negatives_mix,
                                                 _rng(cfg.seed, _MIX, ep.epoch))
            pairs, labels = make_epoch_pairs(positives, negatives, _rng(cfg.seed, _PAIRS, ep.epoch))
            kind = ImageBatchDataset if cfg.batching == "images" else PairDataset
            data = kind(store, dataset.pairs_in_gallery[pairs], labels, size, augmenter,
                        batch_size=cfg.batch_size, seed=cfg.seed, epoch=ep.epoch, workers=cfg.workers)
            what = describe(data.packed) if kind is ImageBatchDataset else f"{len(pairs)} pairs"
        self.log(f"epoch {ep.epoch + 1} (stage {ep.stage_index + 1}/{len(cfg.stages)}, "
                 f"{size_label(self._input(stage)) if cfg.aspect != 1 else stage.image_size}px"
                 f"{' through the trunk' if self.trunk else ''}, K={ep.k:g}, lr={stage.lr:g}"
                 f"{', branch frozen' if stage.freeze_branch else ''}): {what}")
        return self.model.fit(data, epochs=1, verbose=self.verbose, shuffle=False,
                              callbacks=[FirstStepClock(self._timing)])

    def _dataset(self, name: str) -> FoldData:
        """What a stage of ``dataset: name`` trains on."""
        data = {"main": self.data, "homography": self.homography, "playground": self.playground}[name]
        if data is None:
            raise ConfigError(f"the schedule has a 'dataset: {name}' stage but no " + (
                "unlabelled photos (homography.photos)" if name == "homography" else "--playground folder was given"))
        return data

    def _result(self, finished: bool, state: dict, log_rows: list[dict]) -> TrainResult:
        return TrainResult(finished, state["epochs_done"], state["best_val_map5"],
                           state["best_threshold"], self.out_dir, log_rows, self.schedule.total_epochs)


def _summary(state: dict) -> dict:
    return {k: state.get(k) for k in ("best_val_map5", "best_threshold", "best_epoch")}


def train_fold(job: FoldJob | RunConfig, data_dir=None, fold: int | None = None, out_dir=None,
               resume: bool = False, playground=None, deadline: float | None = None, max_epochs: int | None = None,
               score: bool = True, verbose: int | str = "auto", log=print, overwrite: bool = False,
               trunk_cache=None) -> TrainResult:
    """Train a prepared :class:`whale.training.foldjob.FoldJob` (:func:`~whale.training.foldjob.prepare_fold`).

    The old form ``train_fold(cfg, data_dir, fold, out_dir, resume=..., playground=..., overwrite=...)``
    prepares the job first: fold ``fold`` (-1: all data) of the competition in ``data_dir`` into
    ``out_dir``. A non-empty ``out_dir`` needs ``resume`` (same fold, seed and ``init_from`` run) or
    ``overwrite`` (clears it): :func:`whale.training.runlog.claim_run_dir`. With ``cfg.init_from``
    the run starts from that run's model after the stages it trained (:mod:`whale.training.pretrain`).
    A ``--pretrain`` job (:func:`~whale.training.foldjob.prepare_pretrain`) validates and scores nothing.

    Writes ``config.yaml`` (the sized config), ``run.json``, ``log.csv``, ``training.png``, ``tensorboard/``,
    ``checkpoints/`` and, when the schedule is done and ``score`` is true, ``scores/val.npz`` and
    ``scores/test.npz`` (and ``scores/<size>/`` of every ``snapshot: true`` stage), scored under the job's
    config in memory. ``trunk_cache``: where a trunk run keeps its maps (:mod:`whale.inference.trunk`; None:
    in memory).
    """
    from whale.inference.runs import score_run

    if not isinstance(job, FoldJob):
        job = prepare_fold(job, data_dir, fold, out_dir, playground=playground, resume=resume,
                           overwrite=overwrite, log=log)
    out_dir = job.run_dir
    # config.yaml holds the sized schedule: the run folder says what it trained.
    write_run_metadata(out_dir, job.sized, job.fold, job.data_dir, job.playground_dir,
                       init_from=None if job.init is None else job.init.record())

    def scores(result):
        if not (result.finished and score) or job.pretrain:
            return
        log(f"scoring validation and test images with checkpoint 'best' into {out_dir / 'scores'}")
        score_run(out_dir, job.comp, job.data, checkpoint="best", log=log, progress=verbose != 0, cfg=job.sized,
                  trunk_cache=trunk_cache)
        for stage in job.sized.stages:
            tag = snapshot_tag(stage.snapshot_name) if stage.snapshot else None
            if tag and (out_dir / "checkpoints" / f"{tag}.json").is_file():  # not in the init_from run's part
                log(f"scoring the {stage.image_size} px snapshot into {out_dir / 'scores' / stage.snapshot_name}")
                score_run(out_dir, job.comp, job.data, checkpoint=tag, log=log, progress=verbose != 0,
                          cfg=job.sized, trunk_cache=trunk_cache)

    return _train(job, deadline, max_epochs, verbose, log, scores, trunk_cache)


def train_pretrain(cfg: RunConfig, playground, out_dir, resume: bool = False, deadline: float | None = None,
                   max_epochs: int | None = None, verbose: int | str = "auto", log=print,
                   overwrite: bool = False, source: str = "<config>") -> TrainResult:
    """Train ``cfg``'s leading PlayGround stages once (``run_fold.py --pretrain``) into ``out_dir``.

    The run records ``fold: "pretrain"`` and the cut config (:func:`whale.training.pretrain.pretrain_config`);
    nothing validates and nothing is scored. Folds start from it with ``init_from: out_dir``. The same as
    ``train_fold(prepare_pretrain(cfg, playground, out_dir, ...))``.
    """
    job = prepare_pretrain(cfg, playground, out_dir, source=source, resume=resume, overwrite=overwrite, log=log)
    return train_fold(job, deadline=deadline, max_epochs=max_epochs, verbose=verbose, log=log)


def _train(job: FoldJob, deadline, max_epochs, verbose, log, then, trunk_cache=None) -> TrainResult:
    """Train under the config's device strategy, then call ``then(result)`` inside it."""
    from whale.training.distribute import describe, strategy_scope

    cfg = job.sized
    # batching: images indexes the whole batch's images: "auto" means one device then.
    with strategy_scope("default" if cfg.batching == "images" and cfg.strategy == "auto" else cfg.strategy) as strategy:
        log(f"distribution: {describe(strategy)}")
        if cfg.batching == "images" and strategy.num_replicas_in_sync > 1:
            raise ConfigError(f"{cfg.name}: batching: images needs one device (its pairs index the whole "
                              f"batch's images), but strategy {cfg.strategy!r} gives "
                              f"{strategy.num_replicas_in_sync} replicas: set strategy: default")
        trainer = Trainer(job, verbose=verbose, log=log, trunk_cache=trunk_cache)
        result = trainer.run(resume=job.resume, deadline=deadline, max_epochs=max_epochs)
        then(result)
    return result
