"""A fold is prepared once (whale.training.foldjob): read, sized and claimed once per training run."""

import sys
from pathlib import Path

import pytest

CONFIG = """
name: foldjob-test
seed: 2
model: {branch: tiny, weights: null, channels: 3, head_mid: 8, head_hidden: 0}
batch_size: 16
mining_interval: 1
workers: 1
stages:
  - {steps: 3, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main}
"""


@pytest.fixture(scope="module")
def competition(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("comp") / "data", n_ids=8, seed=3, size=64, progress=False)


@pytest.fixture()
def config_file(tmp_path):
    path = tmp_path / "foldjob.yaml"
    path.write_text(CONFIG)
    return path


def _count(monkeypatch, name: str, module: str, calls: list):
    """Count calls of ``module.name`` through every ``whale`` module that bound it (``from ... import name``)."""
    import importlib

    original = getattr(importlib.import_module(module), name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("whale") and getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, counted)


def test_prepare_fold_holds_the_fold_sized_once(competition, config_file, tmp_path):
    from whale.config import load_config
    from whale.training.foldjob import FoldJob, prepare_fold

    cfg, lines = load_config(config_file), []
    job = prepare_fold(cfg, competition, 0, tmp_path / "run", log=lines.append)
    assert isinstance(job, FoldJob) and job.run_dir == tmp_path / "run" and job.fold == 0
    assert job.cfg is cfg and job.sized.stages[0].epochs >= 1 and job.sized.stages[0].steps is None
    assert job.pair_images() == {"main": len(job.data.pairs), "playground": None, "homography": None}
    assert job.data.summary in lines and any(line.startswith("schedule sized") for line in lines)
    assert job.init is None and job.comp is not None and not job.pretrain


def test_a_used_folder_is_refused_before_the_data_is_read_and_overwrite_clears_only_after_the_checks(
        competition, config_file, tmp_path):
    from whale.config import load_config
    from whale.core.errors import ConfigError, DataError
    from whale.training.foldjob import prepare_fold

    cfg = load_config(config_file)
    used = tmp_path / "used"
    used.mkdir()
    (used / "run.json").write_text('{"fold": 0, "seed": 2}')
    with pytest.raises(ConfigError, match="not empty"):
        prepare_fold(cfg, tmp_path / "no-such-data", 0, used)  # the folder, not the missing data
    with pytest.raises(DataError):
        prepare_fold(cfg, tmp_path / "no-such-data", 0, used, overwrite=True, check=True)
    assert (used / "run.json").is_file()  # bad data: nothing cleared
    job = prepare_fold(cfg, competition, 0, used, overwrite=True, log=lambda _: None)
    assert not any(used.iterdir()) and job.run_dir == used


@pytest.mark.slow
def test_run_fold_reads_the_competition_sizes_the_config_and_claims_the_folder_once(
        competition, config_file, tmp_path, monkeypatch):
    import whale.training.trainer  # noqa: F401 - bind every name before counting
    import whale.inference.runs  # noqa: F401
    from whale.training.cli import main

    loads, sizings, claims, configs = [], [], [], []
    _count(monkeypatch, "load_competition", "whale.data", loads)
    _count(monkeypatch, "sized_config", "whale.training.schedule", sizings)
    _count(monkeypatch, "claim_run_dir", "whale.training.runlog", claims)
    _count(monkeypatch, "load_config", "whale.config", configs)
    run = tmp_path / "run"
    status = main(["--config", str(config_file), "--fold", "0", "--data", str(competition), "--out", str(run),
                   "--verbose", "0"])
    assert status == 0 and (run / "scores" / "val.npz").is_file()
    assert len(loads) == 1, loads
    assert len(sizings) == 1, sizings
    assert len(claims) == 1, claims
    # Scoring takes the config in memory: the run's config.yaml is written, never read back.
    assert not [a for a in configs if a and Path(str(a[0])).parent == run], configs
