"""whale.mining.mixing: a share of an epoch's mined negatives swapped for random different-id partners."""
import numpy as np
import pytest

from whale.mining import mix_random_negatives


IDS = np.array(["a", "a", "b", "b", "b", "c", "d", "d"])
NEG = np.array([[0, 2], [1, 5], [2, 6], [3, 0], [4, 7], [5, 1], [6, 3], [7, 4]])


def test_share_zero_and_one():
    rng = np.random.default_rng(0)
    assert np.array_equal(mix_random_negatives(NEG, IDS, 0.0, rng), NEG)
    for seed in range(50):
        out = mix_random_negatives(NEG, IDS, 1.0, np.random.default_rng(seed))
        assert np.array_equal(out[:, 0], NEG[:, 0])
        assert np.all(IDS[out[:, 0]] != IDS[out[:, 1]])


def test_only_the_share_changes_and_partners_are_uniform():
    counts = np.zeros((len(IDS), len(IDS)))
    for seed in range(4000):
        out = mix_random_negatives(NEG, IDS, 0.25, np.random.default_rng(seed))
        assert np.sum(np.any(out != NEG, axis=1)) <= 2  # round(0.25 * 8) rows drawn
        assert np.all(IDS[out[:, 0]] != IDS[out[:, 1]])
        counts[np.arange(len(IDS)), out[:, 1]] += 1
    # image 0 (id a): partners of ids b, c, d, uniformly when its row is drawn (a quarter of the
    # time): each of its 6 candidates 4000 * 0.25 / 6 ~ 167 times, plus the kept partner 2 otherwise
    row = counts[0].copy()
    row[2] -= 4000 * 0.75
    assert row[[0, 1]].sum() == 0
    expected = 4000 * 0.25 / 6
    assert np.all(np.abs(row[2:] - expected) < 5 * np.sqrt(expected))


def test_same_generator_same_output_and_bad_input():
    a = mix_random_negatives(NEG, IDS, 0.5, np.random.default_rng(3))
    b = mix_random_negatives(NEG, IDS, 0.5, np.random.default_rng(3))
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="share"):
        mix_random_negatives(NEG, IDS, 1.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="shape"):
        mix_random_negatives(NEG[:, 0], IDS, 0.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="two distinct ids"):
        mix_random_negatives(NEG, np.array(["a"] * 8), 0.5, np.random.default_rng(0))


def test_config_key():
    from whale.config import config_from_dict
    from whale.core.errors import ConfigError

    base = {"name": "x", "stages": [{"epochs": 1, "k": 1.0, "lr": 1e-3, "image_size": 32}]}
    assert config_from_dict(base).negatives_mix == 0.0
    assert "negatives_mix" not in config_from_dict(base).to_dict()  # old configs keep their hash
    cfg = config_from_dict({**base, "negatives_mix": 0.5})
    assert cfg.negatives_mix == 0.5 and config_from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="negatives_mix"):
        config_from_dict({**base, "negatives_mix": 2})
