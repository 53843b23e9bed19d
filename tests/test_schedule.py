"""whale.training.schedule: the per-epoch plan against an explicit walk of the stages, and resume."""

import doctest

import numpy as np
import pytest

import whale.training.schedule as schedule_module
from whale.config import Stage, config_from_dict
from whale.training.schedule import Schedule, is_mining_epoch, schedule_epochs

# Two stages of 4 and 5 epochs.
MINIMAL = {"name": "t", "model": {"branch": "tiny"},
           "stages": [dict(epochs=4, k=1000.0, lr=1e-3, image_size=64),
                      dict(epochs=5, k=1.0, k_end=0.2, lr=5e-4, image_size=64)]}


def test_schedule_epochs_and_mining():
    cfg = config_from_dict(MINIMAL)  # stages of 4 and 5 epochs
    sched = schedule_epochs(cfg)
    assert sched[0] == (0, 0, 0) and sched[3] == (3, 0, 3) and sched[4] == (4, 1, 0) and sched[-1] == (8, 1, 4)
    assert [g for g, _, _ in sched] == list(range(9))
    # interval 3: a stage of 5 epochs mines at its epochs 0 and 3 (the last period is shorter)
    assert [e for e in range(5) if is_mining_epoch(e, 3)] == [0, 3]
    assert cfg.stages[1].n_minings(3) == 2


def _walk(stages, n):
    """The plan the slow way: a counter per stage, a new block whenever the in-stage count hits n."""
    out, g = [], 0
    for si, stage in enumerate(stages):
        minings = stage.n_minings(n)
        since_mining, mining_index, block_start = None, -1, None
        for e in range(stage.epochs):
            if since_mining is None or since_mining == n:
                since_mining, mining_index, block_start = 0, mining_index + 1, g
            left = stage.epochs - (block_start - (g - e))
            out.append(dict(epoch=g, stage_index=si, epoch_in_stage=e, k=stage.k_at(mining_index, minings),
                            block_start=block_start, block_epochs=min(n, left), mining_index=mining_index))
            since_mining += 1
            g += 1
    return out


def _random_stages(rng):
    stages = []
    for _ in range(int(rng.integers(1, 5))):
        k = float(rng.choice([1000.0, 1.0, 0.5]))
        k_end = None if rng.random() < 0.4 else float(rng.uniform(0.01, k))
        stages.append(Stage(epochs=int(rng.integers(1, 13)), k=k, k_end=k_end, lr=1e-4,
                            image_size=int(rng.choice([64, 96])), freeze_branch=bool(rng.random() < 0.3)))
    return stages


def test_plan_equals_an_explicit_walk_of_random_schedules():
    rng = np.random.default_rng(0)
    for _ in range(200):
        stages, n = _random_stages(rng), int(rng.integers(1, 7))
        plan = Schedule(stages, n)
        walk = _walk(stages, n)
        assert len(plan) == len(walk) == sum(s.epochs for s in stages)
        for ep, ref in zip(plan, walk):
            got = dict(epoch=ep.epoch, stage_index=ep.stage_index, epoch_in_stage=ep.epoch_in_stage, k=ep.k,
                       block_start=ep.block_start, block_epochs=ep.block_epochs, mining_index=ep.mining_index)
            assert got == ref
            assert ep.stage is stages[ep.stage_index]
            assert ep.mines == (ep.epoch == ref["block_start"])
            assert ep.index_in_block == ep.epoch - ref["block_start"]
        # Every block is mined once and ends once; its epochs are consecutive and as many as it says.
        starts = [ep.epoch for ep in plan if ep.mines]
        ends = [ep.epoch for ep in plan if ep.ends_block]
        assert len(starts) == len(ends) == plan.minings()
        for s, e in zip(starts, ends):
            assert e - s + 1 == plan[s].block_epochs and all(plan[i].block_start == s for i in range(s, e + 1))


def test_resume_points():
    cfg = config_from_dict(MINIMAL)
    plan = Schedule.from_config(cfg)
    assert plan.remaining(0) == tuple(plan)
    assert plan.remaining(6) == tuple(plan)[6:] and plan.remaining(6)[0].epoch == 6
    assert plan.remaining(len(plan)) == ()
    with pytest.raises(ValueError, match="epochs_done"):
        plan.remaining(len(plan) + 1)
    # The paper's last stage: K decays 0.25 -> 0.05 over 20 minings of 5 epochs.
    last = Schedule([Stage(epochs=100, k=0.25, k_end=0.05, lr=8e-6, image_size=512)], 5)
    ks = sorted({ep.k for ep in last}, reverse=True)
    assert len(ks) == 20 and ks[0] == pytest.approx(0.25) and ks[-1] == pytest.approx(0.05)


def test_bad_arguments():
    with pytest.raises(ValueError, match="mining_interval"):
        Schedule([Stage(epochs=2, k=1.0, lr=1e-3, image_size=64)], 0)
    with pytest.raises(ValueError, match="stages"):
        Schedule([], 5)


def test_docstring_example():
    result = doctest.testmod(schedule_module)
    assert result.attempted >= 1 and result.failed == 0
