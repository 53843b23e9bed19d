"""The schedule as a per-epoch plan: what every epoch of a run does, computed once, in one place.

A config's stages (paper Table 3: one row = one stage) and its ``mining_interval`` n unroll
into one :class:`EpochPlan` per epoch: its stage, image size, learning rate, frozen branch,
dataset, the K of the mining that covers it, and where its mining block starts. The trainer
iterates over the plan and never re-derives any of it; ``--plan``-style reports, the Kaggle
entry (epochs left) and resume use the same plan.

Counting: epochs are numbered from 0, globally over the whole schedule and within each
stage. A stage mines on its epochs ``0, n, 2n, ...``; the first epoch of every stage always
mines, and a stage whose length is not a multiple of ``n`` has a shorter last block. K moves
linearly from ``k`` to ``k_end`` over a stage's minings (:meth:`whale.config.Stage.k_at`).
Validation (and the best checkpoint) comes at the end of every block.

Resume: a run that finished ``done`` epochs goes on at ``plan[done]``. The negatives of a
block are mined at its first epoch, from the generator keyed by ``block_start``; a run resumed
inside a block reads them back from ``checkpoints/mined.npz`` (or, if that file belongs to
another block, mines the block again with the same generator).

Sizing: a stage may give its length as optimiser ``steps`` or training ``pairs`` seen instead
of ``epochs`` (:class:`whale.config.Stage`). :func:`sized_config` turns those into epochs from
the training set's size, before anything else reads the schedule: one epoch trains on
``2 * n`` pairs (each of the ``n`` images with a partner in one positive and one negative
pair, :func:`whale.training.pairs.make_epoch_pairs`) in ``ceil(2 * n / batch_size)`` steps, and
a stage gets the fewest whole epochs that reach its steps or pairs (at least one). A catalogue
of 200 photos and one of 20,000 then get the same number of optimiser updates, where a fixed
number of epochs gives the small one a hundred times fewer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from whale.config import RunConfig, Stage
from whale.core.errors import ConfigError

__all__ = ["EpochPlan", "Schedule", "epochs_for", "is_mining_epoch", "pair_images", "schedule_epochs", "sized_config"]


@dataclass(frozen=True)
class EpochPlan:
    """One epoch of the schedule.

    Attributes:
        epoch: global index, 0-based.
        stage_index: index of its stage in the config, 0-based.
        epoch_in_stage: index within the stage, 0-based.
        stage: the :class:`whale.config.Stage` (image size, lr, dataset, freezing, l2).
        k: the noise scale K of the mining that covers this epoch.
        block_start: global index of the first epoch of its mining block (where it was mined).
        block_epochs: how many epochs that block's mining serves.
        mining_index: index of that mining within the stage, 0-based.
    """

    epoch: int
    stage_index: int
    epoch_in_stage: int
    stage: Stage
    k: float
    block_start: int
    block_epochs: int
    mining_index: int

    @property
    def mines(self) -> bool:
        """True on the first epoch of a mining block: the negatives are mined before it."""
        return self.epoch == self.block_start

    @property
    def ends_block(self) -> bool:
        """True on the last epoch of a mining block: validation and the best checkpoint follow it."""
        return self.epoch == self.block_start + self.block_epochs - 1

    @property
    def index_in_block(self) -> int:
        """Position within the block: which of the block's mined epochs of negatives it uses."""
        return self.epoch - self.block_start


class Schedule(Sequence):
    """The per-epoch plan of a list of stages mined every ``mining_interval`` epochs.

    Example:
        >>> from whale.config import Stage
        >>> plan = Schedule([Stage(epochs=5, k=1.0, k_end=0.5, lr=1e-3, image_size=64)], 2)
        >>> [(e.epoch, e.k, e.block_start, e.mines) for e in plan]
        [(0, 1.0, 0, True), (1, 1.0, 0, False), (2, 0.75, 2, True), (3, 0.75, 2, False), (4, 0.5, 4, True)]
    """

    def __init__(self, stages: Sequence[Stage], mining_interval: int):
        n = int(mining_interval)
        if n < 1:
            raise ValueError(f"mining_interval: expected an integer >= 1, received {mining_interval!r}")
        if not stages:
            raise ValueError("stages: expected at least one stage, received none")
        unsized = [i for i, s in enumerate(stages) if not s.sized]
        if unsized:
            raise ConfigError(f"stages[{unsized[0]}]: given in steps or pairs; size the config to its "
                              "training set first (sized_config)")
        self.stages, self.mining_interval = tuple(stages), n
        plan, g = [], 0
        for si, stage in enumerate(self.stages):
            minings = stage.n_minings(n)
            for e in range(stage.epochs):
                mi = e // n
                start_in_stage = mi * n
                plan.append(EpochPlan(
                    epoch=g, stage_index=si, epoch_in_stage=e, stage=stage, k=stage.k_at(mi, minings),
                    block_start=g - e + start_in_stage, block_epochs=min(n, stage.epochs - start_in_stage),
                    mining_index=mi))
                g += 1
        self._plan = tuple(plan)

    @classmethod
    def from_config(cls, cfg: RunConfig) -> "Schedule":
        """The plan of a run config's stages and ``mining_interval``."""
        return cls(cfg.stages, cfg.mining_interval)

    def __len__(self) -> int:
        return len(self._plan)

    def __getitem__(self, i):
        return self._plan[i]

    def __iter__(self) -> Iterator[EpochPlan]:
        return iter(self._plan)

    @property
    def total_epochs(self) -> int:
        return len(self._plan)

    def remaining(self, epochs_done: int) -> tuple[EpochPlan, ...]:
        """The epochs still to run after ``epochs_done`` finished ones (resume point)."""
        done = int(epochs_done)
        if not 0 <= done <= len(self._plan):
            raise ValueError(f"epochs_done: expected 0..{len(self._plan)}, received {epochs_done!r}")
        return self._plan[done:]

    def minings(self) -> int:
        """How many times the whole schedule mines."""
        return sum(1 for e in self._plan if e.mines)


def schedule_epochs(cfg: RunConfig) -> list[tuple[int, int, int]]:
    """Every epoch of the schedule as ``(global_epoch, stage_index, epoch_in_stage)``, 0-based."""
    return [(e.epoch, e.stage_index, e.epoch_in_stage) for e in Schedule.from_config(cfg)]


def is_mining_epoch(epoch_in_stage: int, mining_interval: int) -> bool:
    """True on a stage's epochs 0, n, 2n, ... (``n = mining_interval``)."""
    return epoch_in_stage % int(mining_interval) == 0



def epochs_for(stage: Stage, pair_images: int, batch_size: int, per_image: int = 2) -> int:
    """Whole epochs that give ``stage`` its ``steps`` or ``pairs`` (its ``epochs`` when given).

    Args:
        stage: one stage of a config.
        pair_images: training images with a partner of the same id (``FoldData.pairs``), > 0.
        batch_size: pairs (or images) per optimiser step, > 0.
        per_image: batch rows an epoch holds per training image: 2 for the pair objectives (a positive
            and a negative pair each), 1 for the identity objectives' P x K batches (``pairs:`` then
            counts images seen).

    Example:
        >>> from whale.config import Stage
        >>> epochs_for(Stage(epochs=None, steps=1000, k=1.0, lr=1e-3, image_size=64), 200, 32)
        77
    """
    if stage.sized:
        return int(stage.epochs)
    if pair_images < 1 or batch_size < 1:
        raise ValueError(f"expected pair_images >= 1 and batch_size >= 1, received {pair_images}, {batch_size}")
    pairs_per_epoch = int(per_image) * int(pair_images)
    if stage.steps is not None:
        return max(1, math.ceil(stage.steps / math.ceil(pairs_per_epoch / batch_size)))
    return max(1, math.ceil(stage.pairs / pairs_per_epoch))


def pair_images(main, playground=None, homography=None) -> dict[str, int | None]:
    """``{dataset: len(FoldData.pairs)}`` of the fold's data sets (None: absent), what :func:`sized_config` reads."""
    return {name: len(d.pairs) if d is not None else None
            for name, d in (("main", main), ("playground", playground), ("homography", homography))}


def sized_config(cfg: RunConfig, pair_images: Mapping[str, int | None]) -> RunConfig:
    """``cfg`` with every stage in epochs: stages given in steps or pairs converted by
    :func:`epochs_for` with the training images of their dataset (``{"main": n,
    "playground": m}``, the ``len(FoldData.pairs)`` of each). A config already in epochs comes
    back unchanged (the same object).

    Raises:
        ConfigError: a stage in steps or pairs whose dataset has no (or no pairable) images.
    """
    if all(s.sized for s in cfg.stages):
        return cfg
    stages = []
    for i, s in enumerate(cfg.stages):
        n = pair_images.get(s.dataset)
        if not s.sized and not n:
            raise ConfigError(f"{cfg.name}: stages[{i}] is given in {'steps' if s.steps else 'pairs'} but "
                              f"dataset {s.dataset!r} has no training images with a partner to size it by")
        per_image = 1 if cfg.objective.identities else 2
        stages.append(dataclasses.replace(s, epochs=epochs_for(s, n or 0, cfg.batch_size, per_image),
                                          steps=None, pairs=None))
    return dataclasses.replace(cfg, stages=tuple(stages))
