"""Paper Table 4: a shipped config per model row, each loading and training one tiny epoch.

The configs are loaded as shipped and shrunk through the config override mechanism only
(one 1-epoch stage of the config's own first stage at 64 px, small batches, no weights files),
so the branch, channels, head and mining settings are the shipped ones.
"""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"

# Table 4 row -> (config, branch, image size reached in its schedule, channels, weights)
TABLE4 = {
    "DenseNet121 512": ("densenet121", "densenet121", 512, 3, "imagenet"),
    "SE-ResNext50 384": ("seresnext50", "seresnext50", 384, 3, "weights/seresnext50_32x4d.weights.h5"),
    "Customized ConvNet v2 1024": ("convnet_v2", "convnet_v2", 1024, 3, None),
    "Customized ConvNet 1024": ("convnet_v1", "convnet_v1", 1024, 3, None),
    "Customized ConvNet 768": ("convnet_v1", "convnet_v1", 768, 3, None),
    "Customized ConvNet v2 768": ("convnet_v2", "convnet_v2", 768, 3, None),
    "Customized ConvNet 512": ("convnet_512", "convnet_v1", 512, 3, None),
    "Customized ConvNet Gray Image 512": ("convnet_gray_512", "convnet_v1", 512, 1, None),
    "Customized ConvNet 384": ("convnet_v1", "convnet_v1", 384, 3, None),
}


def tiny_overrides(name: str, **extra) -> dict:
    """Overrides that shrink shipped config ``name`` to one epoch of its first stage at 64 px."""
    from whale.config import load_config

    first = load_config(CONFIGS / f"{name}.yaml").stages[0]
    stage = {**dataclasses.asdict(first), "epochs": 1, "image_size": 64, "dataset": "main"}
    return {"stages": [stage], "batch_size": 8, "workers": 1, "crop_cache": "memory",
            "model.weights": None, **extra}


@pytest.fixture(scope="module")
def competition(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("t4") / "data", n_ids=10, seed=4, size=80, progress=False)


@pytest.mark.parametrize("row", sorted(TABLE4))
def test_every_table4_row_has_a_config_of_its_size_channels_and_weights(row):
    from whale.config import load_config

    name, branch, size, channels, weights = TABLE4[row]
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert (cfg.model.branch, cfg.model.channels, cfg.model.weights) == (branch, channels, weights)
    sizes = [s.image_size for s in cfg.stages]
    assert size in sizes and sizes == sorted(sizes)  # reached, never going back
    for prev, cur in zip(cfg.stages, cfg.stages[1:]):
        if cur.image_size > prev.image_size:
            assert cur.freeze_branch, f"{name}: a size increase opens with a head-only stage"


def test_the_table4_sizes_end_where_the_rows_say():
    from whale.config import load_config

    last = {n: load_config(CONFIGS / f"{n}.yaml").stages[-1].image_size
            for n in {v[0] for v in TABLE4.values()}}
    assert last == {"densenet121": 512, "seresnext50": 384, "convnet_v1": 1024, "convnet_v2": 1024,
                    "convnet_512": 512, "convnet_gray_512": 512}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({v[0] for v in TABLE4.values()}))
def test_every_table4_config_trains_one_tiny_epoch(name, competition, tmp_path):
    from whale.config import load_config
    from whale.models import branch_spec, load_checkpoint
    from whale.training.trainer import train_fold

    cfg = load_config(CONFIGS / f"{name}.yaml", overrides=tiny_overrides(name))
    shipped = load_config(CONFIGS / f"{name}.yaml")
    assert cfg.model == dataclasses.replace(shipped.model, weights=None)
    result = train_fold(cfg, competition, 0, tmp_path / "run", score=False, verbose=0, log=lambda *_: None)
    assert result.finished and result.epochs_done == 1
    with open(tmp_path / "run" / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]["loss"]) > 0
    model, state = load_checkpoint(tmp_path / "run" / "checkpoints", "last")
    assert branch_spec(model.get_layer("branch")) == (shipped.model.branch, shipped.model.channels)


def test_a_kaggle_kernel_finds_the_converted_weights_in_an_attached_dataset(tmp_path):
    from whale.config import load_config
    from whale.kaggle.entry import with_attached_weights

    cfg = load_config(CONFIGS / "seresnext50.yaml")
    inp = tmp_path / "input"
    attached = inp / "datasets" / "me" / "se-weights" / "seresnext50_32x4d.weights.h5"
    lines = []
    assert with_attached_weights(cfg, inp, log=lines.append) == cfg  # nothing attached yet
    assert "attach the converted weights as a dataset" in lines[-1]
    attached.parent.mkdir(parents=True)
    attached.write_bytes(b"h5")
    found = with_attached_weights(cfg, inp, log=lines.append)
    assert found.model.weights == str(attached)
    assert dataclasses.replace(found, model=cfg.model) == cfg  # nothing else changed
    densenet = load_config(CONFIGS / "densenet121.yaml")
    assert with_attached_weights(densenet, inp, log=lines.append) is densenet  # imagenet: untouched


@pytest.mark.slow
def test_the_shipped_seresnext50_config_runs_once_its_converted_weights_file_exists(
        competition, tmp_path, monkeypatch):
    from whale.config import load_config
    from whale.core.errors import MissingFileError
    from whale.models import build_branch, load_checkpoint
    from whale.models.convert import save_converted
    from whale.models.registry import branch_options
    from whale.training.trainer import train_fold

    monkeypatch.chdir(tmp_path)  # the shipped path is relative to the working directory
    overrides = tiny_overrides("seresnext50")
    del overrides["model.weights"]
    cfg = load_config(CONFIGS / "seresnext50.yaml", overrides=overrides)
    with pytest.raises(MissingFileError) as err:  # stops before the first epoch
        train_fold(cfg, competition, 0, tmp_path / "before", score=False, verbose=0, log=lambda *_: None)
    assert "weights file not found: weights/seresnext50_32x4d.weights.h5" in str(err.value)
    assert ("python -m whale.models.convert --branch seresnext50 --from CHECKPOINT(.pth|.safetensors|.npz) "
            "--out weights/seresnext50_32x4d.weights.h5") in str(err.value)
    assert not (tmp_path / "before" / "checkpoints").exists()

    converted = build_branch("seresnext50", (64, 64, 3), options={"stem": "timm"})
    save_converted(converted, "seresnext50", {"stem": "timm"}, "weights/seresnext50_32x4d.weights.h5")
    result = train_fold(cfg, competition, 0, tmp_path / "after", score=False, verbose=0, log=lambda *_: None)
    assert result.finished and result.epochs_done == 1
    model, _ = load_checkpoint(tmp_path / "after" / "checkpoints", "last")
    assert branch_options(model.get_layer("branch")) == {"stem": "timm"}  # as the file says
