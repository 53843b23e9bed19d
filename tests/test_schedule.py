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


def _steps_of_one_epoch(ids, batch_size):
    """Optimiser steps of one epoch the slow way: the epoch's real pairs, batched as fit batches them."""
    from whale.mining import positive_pairs
    from whale.training.pairs import make_epoch_pairs

    rng = np.random.default_rng(0)
    positives = positive_pairs(np.asarray(ids), rng)
    negatives = np.stack([np.arange(len(ids)), rng.permutation(len(ids))], 1)  # one per image
    pairs, _ = make_epoch_pairs(positives, negatives, rng)
    return -(-len(pairs) // batch_size)


@pytest.mark.parametrize("n_ids,per_id,batch", [(3, 2, 4), (10, 3, 32), (50, 4, 16), (7, 5, 64)])
def test_a_stage_in_steps_gets_the_fewest_epochs_that_reach_them(n_ids, per_id, batch):
    from whale.training.schedule import epochs_for

    ids = np.repeat([f"w{i}" for i in range(n_ids)], per_id)
    per_epoch = _steps_of_one_epoch(ids, batch)
    for steps in (1, per_epoch - 1, per_epoch, per_epoch + 1, 7 * per_epoch + 3, 1000):
        if steps < 1:
            continue
        e = epochs_for(Stage(epochs=None, steps=steps, k=1.0, lr=1e-3, image_size=64), len(ids), batch)
        assert e * per_epoch >= steps and (e == 1 or (e - 1) * per_epoch < steps), (steps, per_epoch, e)
    pairs_per_epoch = 2 * len(ids)
    for pairs in (1, pairs_per_epoch, pairs_per_epoch + 1, 5000):
        e = epochs_for(Stage(epochs=None, pairs=pairs, k=1.0, lr=1e-3, image_size=64), len(ids), batch)
        assert e * pairs_per_epoch >= pairs and (e == 1 or (e - 1) * pairs_per_epoch < pairs)


def test_sized_config_converts_only_the_stages_in_steps_or_pairs():
    from whale.core.errors import ConfigError
    from whale.training.schedule import sized_config

    raw = {"name": "t", "batch_size": 10, "stages": [
        dict(steps=100, k=1000.0, lr=1e-3, image_size=64),                         # 100 / ceil(2*50/10) = 10
        dict(epochs=3, k=1.0, lr=5e-4, image_size=64),
        dict(pairs=250, k=0.5, lr=1e-4, image_size=64, dataset="playground")]}    # ceil(250 / (2*40)) = 4
    cfg = config_from_dict(raw)
    with pytest.raises(ConfigError, match="stages\\[0\\].*steps or pairs"):
        cfg.total_epochs
    with pytest.raises(ConfigError, match="stages\\[0\\]"):
        Schedule.from_config(cfg)
    sized = sized_config(cfg, {"main": 50, "playground": 40})
    assert [s.epochs for s in sized.stages] == [10, 3, 4] and sized.total_epochs == 17
    assert all(s.steps is None and s.pairs is None for s in sized.stages)
    assert [(s.k, s.lr, s.dataset) for s in sized.stages] == [(s.k, s.lr, s.dataset) for s in cfg.stages]
    assert sized_config(sized, {"main": 1}) is sized  # already in epochs: unchanged
    assert config_from_dict(cfg.to_dict()) == cfg   # steps and pairs survive a round trip
    with pytest.raises(ConfigError, match="stages\\[2\\].*'playground'"):
        sized_config(cfg, {"main": 50, "playground": None})


@pytest.mark.parametrize("lengths", [{}, {"epochs": 2, "steps": 10}, {"steps": 10, "pairs": 5}])
def test_a_stage_needs_exactly_one_length(lengths):
    from whale.core.errors import ConfigError

    raw = {"name": "t", "stages": [dict(k=1.0, lr=1e-3, image_size=64, **lengths)]}
    with pytest.raises(ConfigError, match="stages\\[0\\]: expected exactly one of epochs, steps, pairs"):
        config_from_dict(raw)
