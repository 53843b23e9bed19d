"""PlayGround pre-training once per model: a schedule's leading stages as their own run, and runs that start from it.

The paper pre-trains every model on the PlayGround data (Table 3: 420 of DenseNet121's 810
epochs) before the main data. That part is the same for every fold, so it is trained once:

    python run_fold.py --config configs/densenet121.yaml --pretrain --playground PG --out runs/densenet121/pretrain
    python run_fold.py --config configs/densenet121.yaml --fold 0 --data DIR \\
        --init-from runs/densenet121/pretrain --out runs/densenet121/fold0

``--pretrain`` trains the schedule's leading ``dataset: playground`` stages (:func:`pretrain_config`:
the same config cut after them; nothing validates, the final model is its ``best`` and ``last``).
``init_from: RUN_DIR[:checkpoint]`` (config key, or ``--init-from``; checkpoint ``last`` by
default) starts a run from that run's model at the end of the stages it trained: the run it
starts from must have trained exactly this schedule's first stages, with the same model,
seed, batching, mining and precision (:func:`resolve_init` names the first key that differs).
The new run then walks the rest of the plan with the same epoch numbers, random streams and
optimizer state as one run of the whole schedule would, so its result is that run's result;
its ``run.json`` and score files record the ``run_id`` it started from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from whale.config import RunConfig, load_config
from whale.core.errors import ConfigError

PRETRAIN_FOLD = "pretrain"
"""What a pre-training run records as its ``fold`` in ``run.json`` (no fold of the main data)."""
MODEL_KEYS = ("branch", "channels", "head_mid", "head_hidden")
"""Model fields a run must share with the run it starts from (the architecture)."""
RUN_KEYS = ("seed", "batch_size", "mining_interval", "mining", "candidates", "box_margin", "crop", "augment", "precision",
            "objective", "batch")
"""Run fields it must share too: they decide what the shared stages trained (the objective: the model's top)."""


def pretrain_stage_count(cfg: RunConfig) -> int:
    """How many stages the schedule opens with on ``dataset: playground`` (0: none)."""
    n = 0
    while n < len(cfg.stages) and cfg.stages[n].dataset == "playground":
        n += 1
    return n


def pretrain_config(cfg: RunConfig, source: str = "<config>") -> RunConfig:
    """``cfg`` cut after its leading PlayGround stages: what ``run_fold.py --pretrain`` trains.

    Raises:
        ConfigError: the schedule opens with a main-data stage, or ``init_from`` is set.
    """
    n = pretrain_stage_count(cfg)
    if n == 0:
        raise ConfigError(f"{source}: stages[0].dataset: --pretrain trains the schedule's leading "
                          f"'dataset: playground' stages; this schedule opens with {cfg.stages[0].dataset!r}")
    if cfg.init_from is not None:
        raise ConfigError(f"{source}: init_from: a --pretrain run starts from the config's weights; "
                          f"received init_from {cfg.init_from!r} (drop it or --init-from)")
    return dataclasses.replace(cfg, stages=cfg.stages[:n])


@dataclass(frozen=True)
class InitSource:
    """The run (and checkpoint) a run starts from, after its first ``stages_done`` stages."""

    run_dir: Path
    checkpoint: str
    epochs_done: int
    stages_done: int
    run_id: str | None
    config_hash: str | None

    def record(self) -> dict:
        """What ``run.json`` keeps under ``init_from``."""
        return {"run": str(self.run_dir), "checkpoint": self.checkpoint, "run_id": self.run_id,
                "config_hash": self.config_hash, "epochs_done": self.epochs_done}


def split_init_from(spec: str) -> tuple[Path, str]:
    """``"RUN_DIR[:checkpoint]"`` -> ``(RUN_DIR, checkpoint)``; the checkpoint defaults to ``last``."""
    head, sep, tail = str(spec).rpartition(":")
    if sep and head and tail and "/" not in tail and "\\" not in tail:
        return Path(head), tail
    return Path(spec), "last"


def resolve_init(cfg: RunConfig, source: str = "init_from") -> InitSource | None:
    """The checked run ``cfg.init_from`` names (None when it names none).

    Raises:
        ConfigError: the run, its config or its checkpoint is missing; the checkpoint is not at
            the end of a stage; or the run differs from ``cfg`` (the message names the key).
    """
    from whale.models.checkpoint import read_state
    from whale.training.runlog import read_run_json

    if cfg.init_from is None:
        return None
    run_dir, tag = split_init_from(cfg.init_from)
    where = f"{source} {cfg.init_from!r}"
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{where}: {run_dir / 'config.yaml'} not found; train that run first: python run_fold.py "
                          f"--config CONFIG --pretrain --playground DIR --out {run_dir}")
    src = load_config(run_dir / "config.yaml")
    state = read_state(run_dir / "checkpoints", tag)
    if state is None:
        raise ConfigError(f"{where}: no checkpoint {tag!r} in {run_dir / 'checkpoints'} (expected {tag}.json)")
    done, ends = int(state.get("epochs_done", 0)), []
    for s in src.stages:
        ends.append((ends[-1] if ends else 0) + s.epochs)
    if done not in ends:
        raise ConfigError(f"{where}: checkpoint {tag!r} is after epoch {done}, inside a stage (stages end after "
                          f"epochs {', '.join(map(str, ends))}); a run starts from another only at the end of a "
                          "stage: finish that run first (run_fold.py ... --resume)")
    stages_done = ends.index(done) + 1
    check_same_start(cfg, src, stages_done, where)
    meta = read_run_json(run_dir) or {}
    return InitSource(run_dir, tag, done, stages_done, meta.get("run_id"), meta.get("config_hash"))


def check_same_start(cfg: RunConfig, src: RunConfig, stages: int, where: str) -> None:
    """Refuse to start ``cfg`` from a run of ``src`` after ``stages`` stages unless they agree.

    Raises:
        ConfigError: naming the first key that differs and both values.
    """
    pairs = [(f"model.{k}", getattr(cfg.model, k), getattr(src.model, k)) for k in MODEL_KEYS]
    pairs += [(k, getattr(cfg, k), getattr(src, k)) for k in RUN_KEYS]
    for i, (mine, theirs) in enumerate(zip(cfg.stages[:stages], src.stages[:stages])):
        pairs += [(f"stages[{i}].{f.name}", getattr(mine, f.name), getattr(theirs, f.name))
                  for f in dataclasses.fields(mine)]
    for key, mine, theirs in pairs:
        if mine != theirs:
            raise ConfigError(f"{where}: {key}: this config has {mine!r}, the run it starts from trained with "
                              f"{theirs!r}; starting from it would mix two schedules")
    if len(cfg.stages) <= stages:
        raise ConfigError(f"{where}: that run already trained all {len(cfg.stages)} stages of this schedule; "
                          "nothing is left to train")
