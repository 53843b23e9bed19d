"""PlayGround once: a --pretrain run, folds started from it (init_from), and snapshot stages."""

import json
from pathlib import Path

import numpy as np
import pytest

from whale.core.errors import ConfigError

STAGES = [  # PlayGround 2 + 1 epochs (the part --pretrain trains), then 3 main epochs
    {"epochs": 2, "k": 1.0, "lr": 1.0e-3, "image_size": 32, "dataset": "playground"},
    {"epochs": 1, "k": 0.5, "lr": 5.0e-4, "image_size": 32, "dataset": "playground"},
    {"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main", "freeze_branch": True},
    {"epochs": 1, "k": 0.5, "lr": 5.0e-4, "image_size": 32, "dataset": "main", "snapshot": True},
    {"epochs": 1, "k": 0.25, "lr": 5.0e-4, "image_size": 40, "dataset": "main"}]
QUIET = dict(verbose=0, log=lambda *_: None)


@pytest.fixture(scope="module")
def data(tmp_path_factory, tiny_config):
    from whale.data.synth import generate

    root = tmp_path_factory.mktemp("pretrain")
    comp = generate(root / "comp", n_ids=16, seed=5, size=96, progress=False)
    pg = generate(root / "pg", n_ids=12, seed=11, size=96, progress=False)
    cfg_path = root / "cfg.yaml"
    cfg_path.write_text(tiny_config("pretrain-test", 2, STAGES))
    return comp, pg, cfg_path


@pytest.fixture(scope="module")
def pretrained(data, tmp_path_factory):
    from whale.config import load_config
    from whale.training.trainer import train_pretrain

    comp, pg, cfg_path = data
    out = tmp_path_factory.mktemp("runs") / "pretrain"
    result = train_pretrain(load_config(cfg_path), pg, out, **QUIET)
    assert result.finished and result.epochs_done == 3
    return out


def _weights(folder, tag="last"):
    from whale.models.checkpoint import load_checkpoint

    model, state = load_checkpoint(Path(folder) / "checkpoints", tag)
    return [w.copy() for w in model.get_weights()], state


def _rows(run):
    import csv

    with open(Path(run) / "log.csv") as f:
        return list(csv.DictReader(f))


def test_pretrain_run_trains_the_playground_stages_only(pretrained):
    from whale.config import load_config

    assert [r["dataset"] for r in _rows(pretrained)] == ["playground"] * 3
    assert json.loads((pretrained / "run.json").read_text())["fold"] == "pretrain"
    assert len(load_config(pretrained / "config.yaml").stages) == 2
    assert not (pretrained / "scores").exists()


@pytest.mark.backend
def test_folds_start_from_the_pretrained_weights_and_equal_one_whole_run(backend, data, pretrained, tmp_path):
    from whale.config import load_config
    from whale.data import fold_data, load_competition
    from whale.inference.scorefile import load_score_file
    from whale.training.pretrain import resolve_init
    from whale.training.trainer import Trainer, train_fold

    comp, pg, cfg_path = data
    cfg = load_config(cfg_path, overrides={"init_from": str(pretrained)})
    # Before any epoch, the fold's model is the pretraining run's final model, array for array.
    trainer = Trainer(cfg, fold_data(load_competition(comp), 0, cfg.seed), tmp_path / "probe", init=resolve_init(cfg),
                      **QUIET)
    first = trainer.run(max_epochs=0)
    assert first.epochs_done == 3 and not first.finished
    w_pre, _ = _weights(pretrained)
    for a, b in zip(trainer.model.get_weights(), w_pre, strict=True):
        np.testing.assert_array_equal(a, b)

    # Two folds from the same pre-training: no --playground needed, no PlayGround epoch trained.
    pre_id = json.loads((pretrained / "run.json").read_text())["run_id"]
    for fold in (0, 1):
        run = tmp_path / f"fold{fold}"
        result = train_fold(cfg, comp, fold, run, score=fold == 0, **QUIET)
        assert result.finished and result.epochs_done == 6
        assert [(r["epoch"], r["dataset"]) for r in _rows(run)] == [("4", "main"), ("5", "main"), ("6", "main")]
        meta = json.loads((run / "run.json").read_text())
        assert meta["init_from"]["run_id"] == pre_id and meta["init_from"]["epochs_done"] == 3
    assert load_score_file(tmp_path / "fold0" / "scores" / "val.npz").identity["init_from"] == pre_id

    # Fold 0 equals one run of the whole schedule (PlayGround stages included).
    whole = train_fold(load_config(cfg_path), comp, 0, tmp_path / "whole", playground=pg, score=False, **QUIET)
    assert whole.finished
    w_whole, _ = _weights(tmp_path / "whole")
    w_fold, _ = _weights(tmp_path / "fold0")
    for a, b in zip(w_whole, w_fold, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_init_from_refuses_a_run_of_another_schedule(data, pretrained, tmp_path):
    import shutil

    from whale.config import load_config
    from whale.training.pretrain import resolve_init
    from whale.training.trainer import train_fold

    comp, pg, cfg_path = data
    with pytest.raises(ConfigError, match=r"stages\[1\]\.lr: this config has 0.0002"):
        resolve_init(load_config(cfg_path, overrides={"init_from": str(pretrained), "stages[1].lr": 2e-4}))
    with pytest.raises(ConfigError, match=r"model\.head_mid"):
        resolve_init(load_config(cfg_path, overrides={"init_from": str(pretrained), "model.head_mid": 4}))
    with pytest.raises(ConfigError, match=r"seed"):
        resolve_init(load_config(cfg_path, overrides={"init_from": str(pretrained), "seed": 9}))
    with pytest.raises(ConfigError, match=r"nowhere/config.yaml not found.*--pretrain"):
        resolve_init(load_config(cfg_path, overrides={"init_from": str(tmp_path / "nowhere")}))
    with pytest.raises(ConfigError, match=r"no checkpoint 'best2'"):
        resolve_init(load_config(cfg_path, overrides={"init_from": f"{pretrained}:best2"}))
    # A checkpoint inside a stage (here: state edited to epoch 1 of the 2-epoch first stage).
    copy = tmp_path / "copy"
    shutil.copytree(pretrained, copy)
    state = json.loads((copy / "checkpoints" / "last.json").read_text())
    (copy / "checkpoints" / "last.json").write_text(json.dumps({**state, "epochs_done": 1}))
    with pytest.raises(ConfigError, match=r"inside a stage \(stages end after epochs 2, 3\)"):
        resolve_init(load_config(cfg_path, overrides={"init_from": str(copy)}))
    # A run started from one pre-training is not resumed from another.
    cfg = load_config(cfg_path, overrides={"init_from": str(pretrained)})
    train_fold(cfg, comp, 0, tmp_path / "run", max_epochs=1, score=False, **QUIET)
    (copy / "checkpoints" / "last.json").write_text(json.dumps(state))
    meta = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**meta, "run_id": "another"}))
    with pytest.raises(ConfigError, match="started from run .* resuming it would mix two runs"):
        train_fold(load_config(cfg_path, overrides={"init_from": str(copy)}), comp, 0, tmp_path / "run",
                   resume=True, score=False, **QUIET)
    # --pretrain needs leading PlayGround stages and no init_from.
    from whale.training.pretrain import pretrain_config

    with pytest.raises(ConfigError, match=r"stages\[0\]\.dataset"):
        pretrain_config(load_config(cfg_path, overrides={"stages[0].dataset": "main"}))
    with pytest.raises(ConfigError, match="init_from"):
        pretrain_config(cfg)


def test_run_fold_pretrain_flags(capsys):
    from whale.cli import command_parser

    parse_args = command_parser("train").parse_args
    args = parse_args(["--config", "c.yaml", "--pretrain", "--playground", "pg", "--out", "o"])
    assert args.pretrain and args.fold is None and args.data is None
    for bad in (["--pretrain", "--out", "o"],                                          # no --playground
                ["--pretrain", "--playground", "pg", "--out", "o", "--fold", "0"],
                ["--pretrain", "--playground", "pg", "--out", "o", "--init-from", "r"]):
        with pytest.raises(SystemExit):
            parse_args(["--config", "c.yaml", *bad])
    assert "--pretrain" in capsys.readouterr().err
    assert parse_args(["--config", "c.yaml", "--fold", "0", "--data", "d", "--out", "o",
                       "--init-from", "runs/pre:best"]).init_from == "runs/pre:best"


def test_init_from_spec_names_a_folder_and_a_checkpoint():
    from whale.training.pretrain import split_init_from

    assert split_init_from("runs/pre") == (Path("runs/pre"), "last")
    assert split_init_from("runs/pre:best") == (Path("runs/pre"), "best")
    assert split_init_from("/kaggle/input/x/run") == (Path("/kaggle/input/x/run"), "last")
    assert split_init_from("C:/runs/pre") == (Path("C:/runs/pre"), "last")  # a drive letter is no checkpoint
