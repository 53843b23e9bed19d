"""``run_fold.py --score-only``: an existing run folder's score files, written again from one of its checkpoints."""

from __future__ import annotations

from pathlib import Path

from whale.config import RunConfig
from whale.data import fold_data, load_competition
from whale.core.errors import ConfigError
from whale.training.runlog import read_run_json


def score_fold(out_dir, data_dir, fold: int, cfg: RunConfig, checkpoint: str = "best",
               log=print, trunk_cache=None) -> dict:
    """Write the score files of an existing run folder from one of its checkpoints.

    Raises:
        ConfigError: ``out_dir`` holds no run, or ``fold``/the seed differ from its ``run.json``
            (scoring another fold would validate on the model's own training images).
    """
    from whale.inference.runs import score_run
    from whale.training.distribute import strategy_scope

    meta = read_run_json(out_dir)
    if meta is None:
        raise ConfigError(f"{Path(out_dir) / 'run.json'}: not found; --score-only needs a run folder "
                          "written by run_fold.py")
    if meta.get("fold") != fold or meta.get("seed") != cfg.seed:
        raise ConfigError(f"{Path(out_dir) / 'run.json'}: the run trained fold {meta.get('fold')} with seed "
                          f"{meta.get('seed')}, but --score-only asked for fold {fold}, seed {cfg.seed}; "
                          "another fold's validation images are this model's training images: "
                          f"use --fold {meta.get('fold')}")

    comp = load_competition(data_dir)
    data = fold_data(comp, fold, cfg.seed, val_new_whale=cfg.val_new_whale)
    scoring = scoring_config(out_dir, cfg, log)
    with strategy_scope(cfg.strategy):
        return score_run(out_dir, comp, data, checkpoint=checkpoint, log=log, trunk_cache=trunk_cache, cfg=scoring)


def scoring_config(out_dir, cfg: RunConfig, log=print) -> RunConfig:
    """The run's own config (its ``config.yaml``) with the scoring-only keys of ``cfg`` (``trunk.gallery_views``):
    what ``--score-only`` scores with; every other key is the run's, whatever ``cfg`` says."""
    import dataclasses

    from whale.config import load_config

    run = load_config(Path(out_dir) / "config.yaml")
    if cfg.trunk.gallery_views == run.trunk.gallery_views:
        return run
    if cfg.trunk.gallery_views and (run.trunk.layer is None or not run.trunk.views):
        raise ConfigError(f"{Path(out_dir) / 'config.yaml'}: trunk.gallery_views needs a trunk run with views "
                          f"(trunk.layer {run.trunk.layer}, trunk.views {run.trunk.views})")
    log(f"--score-only: trunk.gallery_views: {str(cfg.trunk.gallery_views).lower()} (the run trained with "
        f"{str(run.trunk.gallery_views).lower()})")
    return dataclasses.replace(run, trunk=dataclasses.replace(run.trunk, gallery_views=cfg.trunk.gallery_views))
