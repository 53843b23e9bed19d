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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from whale.config import RunConfig, Stage

__all__ = ["EpochPlan", "Schedule", "is_mining_epoch", "schedule_epochs"]


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

