"""One fold prepared once: :class:`FoldJob` and :func:`prepare_fold` (:func:`prepare_pretrain` for ``--pretrain``).

A fold's run needs the competition, the fold's :class:`whale.data.FoldData`, the PlayGround's and the
homography views' (``dataset: playground`` / ``dataset: homography`` stages), the config sized to those
training sets (:func:`whale.training.schedule.sized_config`), the run it starts from (``init_from``,
:func:`whale.training.pretrain.resolve_init`) and the claimed run folder
(:func:`whale.training.runlog.claim_run_dir`). :func:`prepare_fold` works each out once, in the order
``run_fold.py`` needs: a used run folder refused first, then the data read and checked, the config sized, a
``--resume`` compared with the paused run, and only then the folder claimed (``--overwrite`` clears it only
once everything else passed). ``run_fold.py``'s preflight, ``--plan``, :func:`whale.training.trainer.train_fold`
and :class:`whale.training.trainer.Trainer` all take the same :class:`FoldJob`; nothing reads the data or
sizes the config again.

Example:
    job = prepare_fold(load_config("configs/demo.yaml"), "data/synthetic", 0, "runs/demo")
    train_fold(job)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from whale.config import RunConfig
from whale.data import Competition, FoldData, fold_data, load_competition, playground_data
from whale.data.unlabelled import homography_views
from whale.training.preflight import check_fold, check_resume, check_training_ids
from whale.training.pretrain import PRETRAIN_FOLD, InitSource, pretrain_config, resolve_init
from whale.training.runlog import claim_run_dir
from whale.training.schedule import pair_images, sized_config


@dataclass(frozen=True)
class FoldJob:
    """Everything one training run of a fold needs, worked out once.

    ``cfg``: the config as given (a ``--pretrain`` job: cut after its PlayGround stages); ``sized``: the
    same with every stage in epochs, what the trainer walks and ``config.yaml`` records (None only for a
    job :func:`load_fold` read for ``--plan``); ``data``: what the main stages train and validate on (a
    ``--pretrain`` job: the PlayGround); ``playground``, ``views``: the data of ``dataset: playground`` and
    ``dataset: homography`` stages (None: none); ``comp``: the competition ``data`` came from (None for a
    job built from parts, :meth:`of`); ``init``: the run it starts from; ``run_dir``: the claimed run
    folder; ``resume``: continue the run in it.
    """

    cfg: RunConfig
    sized: RunConfig | None
    data: FoldData
    playground: FoldData | None = None
    views: FoldData | None = None
    comp: Competition | None = None
    fold: int | str | None = None
    data_dir: Path | None = None
    playground_dir: Path | None = None
    init: InitSource | None = None
    run_dir: Path | None = None
    resume: bool = False

    @classmethod
    def of(cls, cfg: RunConfig, data: FoldData, out_dir, playground: FoldData | None = None,
           homography: FoldData | None = None, init: InitSource | None = None) -> "FoldJob":
        """A job from data already in memory (the old ``Trainer(cfg, data, out_dir, ...)`` form): sized here."""
        sized = sized_config(cfg, pair_images(data, playground, homography))
        return cls(cfg, sized, data, playground, homography, init=init, run_dir=Path(out_dir))

    @property
    def pretrain(self) -> bool:
        """A ``--pretrain`` job (its ``fold`` is :data:`whale.training.pretrain.PRETRAIN_FOLD`)."""
        return self.fold == PRETRAIN_FOLD

    def pair_images(self) -> dict[str, int | None]:
        """``{dataset: training images with a partner}``, what sizing and ``--plan`` read."""
        return pair_images(self.data, self.playground, self.views)

    def sizing_lines(self) -> list[str]:
        """What sizing changed, one line (empty when the config was already in epochs)."""
        if self.sized is None or self.sized is self.cfg:
            return []
        return ["schedule sized to the training set: " + ", ".join(
            f"stage {i + 1} {s.steps or s.pairs} {'steps' if s.steps else 'pairs'} -> {z.epochs} epochs"
            for i, (s, z) in enumerate(zip(self.cfg.stages, self.sized.stages)) if not s.sized)]


def load_fold(cfg: RunConfig, data_dir, fold: int, playground=None, log=print, check: bool = False) -> FoldJob:
    """The data of fold ``fold`` (-1: all) of the competition in ``data_dir``: no sizing, no run folder.

    ``check``: refuse training ids a submission cannot carry (:func:`whale.training.preflight.check_training_ids`).
    ``log`` gets the homography views' summary line.
    """
    comp = load_competition(data_dir)
    data = fold_data(comp, fold, cfg.seed, val_new_whale=cfg.val_new_whale)
    if check:
        check_training_ids(comp, data.pairs, f"fold {fold}")
    pg = playground_data(load_competition(playground)) if playground else None
    views = homography_views(cfg, comp, data.val.names, log)
    return FoldJob(cfg, None, data, pg, views, comp, fold, Path(data_dir), Path(playground) if playground else None)


def prepare_fold(cfg: RunConfig, data_dir, fold: int, out_dir=None, *, playground=None, resume: bool = False,
                 overwrite: bool = False, allow_changes: bool = False, check: bool = False,
                 log=print) -> FoldJob:
    """Fold ``fold`` of ``data_dir`` ready to train into ``out_dir`` (None: no run folder is claimed).

    ``check`` (``run_fold.py``'s preflight): also refuse a fold out of range, training ids a submission
    cannot carry, and a ``--resume`` onto other data or under another config unless ``allow_changes``
    (:mod:`whale.training.preflight`). Lines for the log (the run folder cleared, a missing test set,
    the fold's summary, the sizing) go through ``log`` once the folder is claimed.

    Raises:
        ConfigError, DataError: a used run folder (without ``resume`` or ``overwrite``), bad data, a
            stage that cannot be sized, an ``init_from`` run that does not fit, or a refused resume.
    """
    out_dir = None if out_dir is None else Path(out_dir)
    if out_dir is not None and not (resume or overwrite):
        claim_run_dir(out_dir, fold, cfg.seed)  # a used folder is refused before the data is read
    if check:
        check_fold(fold)
    view_lines: list[str] = []
    job = load_fold(cfg, data_dir, fold, playground, log=view_lines.append, check=check)
    notes = [] if job.comp.test_images else [
        f"warning: {Path(data_dir) / 'test'} holds no images (and there is no sample_submission.csv): "
        "no scores/test.npz will be written, so ensemble.py cannot use this run"]
    notes += [job.data.summary, *view_lines]
    job = dataclasses.replace(job, sized=sized_config(cfg, job.pair_images()), run_dir=out_dir, resume=resume)
    if check and resume:
        check_resume(out_dir, job.sized, Path(data_dir), allow_changes, log=log)
    init = resolve_init(cfg)
    if out_dir is not None and (resume or overwrite):
        claim_run_dir(out_dir, fold, cfg.seed, resume=resume, overwrite=overwrite, log=log,
                      init_from=None if init is None else init.run_id)
    for line in notes + job.sizing_lines():
        log(line)
    return dataclasses.replace(job, init=init)


def prepare_pretrain(cfg: RunConfig, playground, out_dir, *, source: str = "<config>", resume: bool = False,
                     overwrite: bool = False, allow_changes: bool = False, check: bool = False,
                     log=print) -> FoldJob:
    """The schedule's leading PlayGround stages ready to train into ``out_dir`` (``run_fold.py --pretrain``).

    The job's ``cfg`` is :func:`whale.training.pretrain.pretrain_config`'s cut; its ``data`` and ``playground``
    are the PlayGround's; it validates nothing and starts from nothing. ``check``: as :func:`prepare_fold`.
    """
    out_dir, playground = Path(out_dir), Path(playground)
    if not (resume or overwrite):
        claim_run_dir(out_dir, PRETRAIN_FOLD, cfg.seed)
    pg_comp = load_competition(playground)
    pg = playground_data(pg_comp)
    if check:
        check_training_ids(pg_comp, pg.pairs, "the PlayGround folder")
    cut = pretrain_config(cfg, source)
    sized = sized_config(cut, {"playground": len(pg.pairs)})
    if check and resume:
        check_resume(out_dir, sized, playground, allow_changes, log=log)
    if resume or overwrite:
        claim_run_dir(out_dir, PRETRAIN_FOLD, cfg.seed, resume=resume, overwrite=overwrite, log=log)
    log(f"PlayGround pre-training: stages 1-{len(sized.stages)}, {sized.total_epochs} epochs, "
        f"{len(pg.pairs)} images of {playground}")
    return FoldJob(cut, sized, pg, pg, None, pg_comp, PRETRAIN_FOLD, playground, playground,
                   run_dir=out_dir, resume=resume)
