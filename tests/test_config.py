"""Tests for whale.config: schema checks, error messages, the paper's Table 3, K decay."""
import dataclasses
from pathlib import Path

import pytest
import yaml

from whale.config import config_from_dict, load_config, RunConfig, Stage
from whale.core.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

MINIMAL = {
    "name": "t",
    "model": {"branch": "tiny"},
    "stages": [
        {"epochs": 4, "k": 1000.0, "lr": 1e-3, "image_size": 64},
        {"epochs": 5, "k": 1.0, "k_end": 0.2, "lr": 5e-4, "image_size": 64, "dataset": "main"},
    ],
}

# Paper Table 3 (DenseNet121): (epochs, K, K_end, lr, image size, dataset, freeze branch).
# Rows "1-20", "21-40", ... -> epochs = last - first + 1; "0.25-0.05" -> K decays to 0.05.
TABLE3 = [
    (20, 1.0, None, 8e-5, 224, "playground", False),    # 1–20
    (20, 0.5, None, 2e-5, 224, "playground", False),    # 21–40
    (60, 0.25, None, 1e-5, 224, "playground", False),   # 41–100
    (100, 0.25, None, 8e-6, 224, "playground", False),  # 101–200
    (20, 1000.0, None, 2e-5, 384, "playground", True),  # 1–20
    (20, 1.0, None, 2e-5, 384, "playground", False),    # 21–40
    (20, 0.5, None, 1e-5, 384, "playground", False),    # 41–60
    (60, 0.25, None, 1e-5, 384, "playground", False),   # 61–120
    (100, 0.25, None, 8e-6, 384, "playground", False),  # 121–220
    (15, 1.0, None, 8e-5, 384, "main", True),           # 1–15
    (20, 0.5, None, 8e-5, 384, "main", False),          # 16–35
    (20, 0.25, None, 4e-5, 384, "main", False),         # 36–55
    (20, 0.25, None, 2e-5, 384, "main", False),         # 56–75
    (20, 0.25, None, 1e-5, 384, "main", False),         # 76–95
    (100, 0.25, 0.05, 8e-6, 384, "main", False),        # 96–195
    (15, 1.0, None, 8e-5, 512, "main", True),           # 1–15
    (20, 0.5, None, 8e-5, 512, "main", False),          # 16–35
    (20, 0.25, None, 4e-5, 512, "main", False),         # 36–55
    (20, 0.25, None, 2e-5, 512, "main", False),         # 56–75
    (20, 0.25, None, 1e-5, 512, "main", False),         # 76–95
    (100, 0.25, 0.05, 8e-6, 512, "main", False),        # 96–195
]


def write(tmp_path, data, name="cfg.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_minimal_gets_defaults(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert isinstance(cfg, RunConfig)
    assert cfg.seed == 0 and cfg.mining == "exact" and cfg.val_new_whale is True
    assert cfg.threshold is None and cfg.model.channels == 3
    assert cfg.stages[0] == Stage(epochs=4, k=1000.0, lr=1e-3, image_size=64)
    assert cfg.total_epochs == 9


def test_round_trip(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    out = tmp_path / "resolved.yaml"
    text = cfg.to_yaml(out)
    assert out.read_text() == text
    assert load_config(out) == cfg
    assert config_from_dict(cfg.to_dict()) == cfg


NOT_TRAINING = {"boxes", "keypoints", "keypoints_checked", "keypoints_xfeat", "keypoints_xfeat_checked", "joint",
                "joint_sift", "keypoints_demo", "keypoints_xfeat_demo", "joint_demo", "outline"}
"""whale.boxes's, whale.keypoints's, whale.identify's and whale.outline's own configs, tested there (the *_demo ones: by
tests/test_recipe_command.py, through recipes/demo.yaml)."""


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem not in NOT_TRAINING))
def test_shipped_configs_load_and_round_trip(name, tmp_path):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert cfg.name == name
    assert load_config(write(tmp_path, cfg.to_dict())) == cfg


def test_densenet121_is_table3():
    cfg = load_config(CONFIGS / "densenet121.yaml")
    got = [(s.epochs, s.k, s.k_end, s.lr, s.image_size, s.dataset, s.freeze_branch) for s in cfg.stages]
    assert got == TABLE3
    assert cfg.model.branch == "densenet121" and cfg.model.weights == "imagenet"
    assert cfg.mining_interval == 5  # the paper's n


def test_convnet_v1_rgb_and_head_only_at_size_increase():
    cfg = load_config(CONFIGS / "convnet_v1.yaml")
    assert cfg.model.channels == 3 and cfg.model.weights is None  # Table 4: 384/768/1024 x 3
    sizes = [s.image_size for s in cfg.stages]
    assert sorted(set(sizes)) == [384, 768, 1024]
    for prev, cur in zip(cfg.stages, cfg.stages[1:]):
        if cur.image_size > prev.image_size:
            assert cur.freeze_branch


def test_unknown_top_level_key(tmp_path):
    p = write(tmp_path, {**MINIMAL, "learning_rate": 1})
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and "learning_rate" in msg and "expected one of" in msg


def test_unknown_stage_key(tmp_path):
    stages = [dict(s) for s in MINIMAL["stages"]]
    stages[1]["lrate"] = 0.1
    p = write(tmp_path, {**MINIMAL, "stages": stages})
    with pytest.raises(ConfigError, match=r"stages\[1\]\.lrate") as e:
        load_config(p)
    assert str(p) in str(e.value)


def test_unknown_model_key(tmp_path):
    p = write(tmp_path, {**MINIMAL, "model": {"branch": "tiny", "dropout": 0.5}})
    with pytest.raises(ConfigError, match=r"model\.dropout"):
        load_config(p)


@pytest.mark.parametrize(
    "key,value,path",
    [
        ("lr", -1e-4, "stages[1].lr"),
        ("lr", 0, "stages[1].lr"),
        ("image_size", 5000, "stages[1].image_size"),
        ("image_size", 16, "stages[1].image_size"),
        ("dataset", "foo", "stages[1].dataset"),
        ("k_end", -0.1, "stages[1].k_end"),
        ("k", -1, "stages[1].k"),
        ("epochs", 0, "stages[1].epochs"),
        ("epochs", 2.5, "stages[1].epochs"),
        ("freeze_branch", 3, "stages[1].freeze_branch"),
        ("lr", "fast", "stages[1].lr"),
    ],
)
def test_bad_stage_values(tmp_path, key, value, path):
    stages = [dict(s) for s in MINIMAL["stages"]]
    stages[1][key] = value
    p = write(tmp_path, {**MINIMAL, "stages": stages})
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and path in msg and "expected" in msg and repr(value) in msg


@pytest.mark.parametrize(
    "patch,path",
    [
        ({"model": {"branch": "vgg99"}}, "model.branch"),
        ({"model": {"branch": "tiny", "channels": 2}}, "model.channels"),
        ({"mining": "greedy"}, "mining"),
        ({"crop_cache": "disk"}, "crop_cache"),
        ({"batch_size": 0}, "batch_size"),
        ({"batching": "triplets"}, "batching"),
        ({"batching": "images", "batch_size": 1}, "batch_size"),
        ({"threshold": 1.5}, "threshold"),
        ({"stages": []}, "stages"),
    ],
)
def test_bad_run_values(tmp_path, patch, path):
    p = write(tmp_path, {**MINIMAL, **patch})
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        load_config(p)


def test_missing_required(tmp_path):
    stages = [{"epochs": 4, "k": 1.0, "image_size": 64}]
    with pytest.raises(ConfigError, match=r"stages\[0\]\.lr: required"):
        load_config(write(tmp_path, {**MINIMAL, "stages": stages}))


def test_numbers_from_strings(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(
        "name: s\nmodel: {branch: tiny}\n"
        "stages:\n  - {epochs: 3, k: 1e3, lr: 8e-5, image_size: 64, l2: 2e-4}\n"
    )
    assert yaml.safe_load(p.read_text())["stages"][0]["lr"] == "8e-5"  # the PyYAML quirk
    s = load_config(p).stages[0]
    assert s.lr == pytest.approx(8e-5) and isinstance(s.lr, float)
    assert s.k == 1000.0 and s.l2 == pytest.approx(2e-4)


def test_overrides(tmp_path):
    p = write(tmp_path, MINIMAL)
    cfg = load_config(p, {"seed": 7, "model.channels": 1, "stages[0].epochs": 2, "model": {"head_mid": 8}})
    assert cfg.seed == 7 and cfg.model.channels == 1 and cfg.model.head_mid == 8
    assert cfg.model.branch == "tiny" and cfg.stages[0].epochs == 2
    with pytest.raises(ConfigError, match=r"stages\[0\]\.lr"):
        load_config(p, {"stages[0].lr": -1})
    with pytest.raises(ConfigError, match="out of range"):
        load_config(p, {"stages[5].lr": 1})


def test_frozen():
    cfg = config_from_dict(MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]


def test_k_at_linear():
    s = Stage(epochs=100, k=0.25, k_end=0.05, lr=8e-6, image_size=512)
    n = s.n_minings(5)
    assert n == 20
    ks = [s.k_at(i, n) for i in range(n)]
    assert ks[0] == pytest.approx(0.25) and ks[-1] == pytest.approx(0.05)
    steps = [b - a for a, b in zip(ks, ks[1:])]
    assert all(d == pytest.approx(-0.2 / 19) for d in steps)
    assert s.k_for_epoch(0, 5) == ks[0] and s.k_for_epoch(7, 5) == ks[1] and s.k_for_epoch(99, 5) == ks[-1]
    const = Stage(epochs=10, k=1.0, lr=1e-4, image_size=224)
    assert [const.k_at(i, 3) for i in range(3)] == [1.0, 1.0, 1.0]
    assert Stage(epochs=3, k=1.0, k_end=0.1, lr=1e-4, image_size=64).k_at(0, 1) == 1.0
    with pytest.raises(ValueError):
        s.k_at(20, 20)


def test_starter_is_sized_in_steps_and_gives_a_small_catalogue_many_epochs():
    from whale.training.schedule import sized_config

    cfg = load_config(CONFIGS / "starter.yaml")
    assert all(s.steps and s.epochs is None for s in cfg.stages)
    small, big = sized_config(cfg, {"main": 200}), sized_config(cfg, {"main": 20000})
    steps = lambda c, n: sum(s.epochs for s in c.stages) * -(-2 * n // c.batch_size)  # noqa: E731
    assert steps(small, 200) >= 2000 and steps(big, 20000) >= 2000
    assert small.total_epochs > 20 * big.total_epochs


def test_model_stem_is_for_seresnext50_only_and_absent_from_configs_without_one(tmp_path):
    base = {**MINIMAL, "model": {"branch": "seresnext50", "stem": "timm"}}
    cfg = load_config(write(tmp_path, base))
    assert cfg.model.stem == "timm" and cfg.model.branch_options() == {"stem": "timm"}
    assert load_config(write(tmp_path, cfg.to_dict())) == cfg
    with pytest.raises(ConfigError, match=r"model\.stem: expected one of cadene, timm"):
        load_config(write(tmp_path, {**MINIMAL, "model": {"branch": "seresnext50", "stem": "torch"}}))
    with pytest.raises(ConfigError, match=r"model\.stem: expected no stem for branch tiny"):
        load_config(write(tmp_path, {**MINIMAL, "model": {"branch": "tiny", "stem": "timm"}}))
    plain = load_config(write(tmp_path, MINIMAL))
    assert plain.model.branch_options() == {} and "stem" not in plain.to_yaml()
    small = load_config(write(tmp_path, {**MINIMAL, "model": {"branch": "small", "stem": "pool"}}))
    assert small.model.branch_options() == {"stem": "pool"}
    with pytest.raises(ConfigError, match=r"model\.stem: expected one of conv, pool"):
        load_config(write(tmp_path, {**MINIMAL, "model": {"branch": "small", "stem": "timm"}}))


def test_a_keypoint_config_given_to_training_says_what_it_is():
    with pytest.raises(ConfigError, match="keypoint matcher's settings.*whale score --matcher keypoints"):
        load_config(CONFIGS / "keypoints.yaml")
    with pytest.raises(ConfigError, match="joint identification's settings.*whale score --matcher joint"):
        load_config(CONFIGS / "joint.yaml")


def test_crop_key_default_box_validated_and_absent_from_configs_without_it(tmp_path):
    plain = load_config(write(tmp_path, MINIMAL))
    assert plain.crop == "box" and "crop:" not in plain.to_yaml()  # configs without it keep their hash
    cfg = load_config(write(tmp_path, {**MINIMAL, "crop": "content"}))
    assert cfg.crop == "content" and load_config(write(tmp_path, cfg.to_dict())) == cfg
    p = write(tmp_path, {**MINIMAL, "crop": "white"})
    with pytest.raises(ConfigError, match=rf"{p}: crop: expected one of box, content, received 'white'"):
        load_config(p)
