"""Training one fold: a smoke run of run_fold.py, resume equivalence, score files."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import types

import pytest

ROOT = Path(__file__).resolve().parent.parent

TINY_CONFIG = """
name: tiny-test
seed: 3
model: {branch: tiny, weights: null, channels: 3, head_mid: 8, head_hidden: 0}
batch_size: 32
mining_interval: 2
mining: exact
box_margin: 0.05
augment: true
workers: 1
stages:
  - {epochs: 2, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main}
  - {epochs: 1, k: 1.0, lr: 5.0e-4, image_size: 32, dataset: main, freeze_branch: true}
  - {epochs: 1, k: 0.5, k_end: 0.1, lr: 5.0e-4, image_size: 40, dataset: main}
"""


@pytest.fixture(scope="module")
def competition(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("comp") / "data", n_ids=24, seed=5, size=96)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny.yaml"
    path.write_text(TINY_CONFIG)
    return path


def _cfg(config_file):
    from whale.config import load_config

    return load_config(config_file)


def _weights(run_dir, tag="last"):
    from whale.models.checkpoint import load_checkpoint

    model, state = load_checkpoint(Path(run_dir) / "checkpoints", tag)
    return [w.copy() for w in model.get_weights()], state


@pytest.mark.backend
@pytest.mark.parametrize("precision,batching", [("float32", "pairs"), ("mixed_bfloat16", "pairs"),
                                                ("float32", "images")])
def test_resume_draws_the_same_pairs_and_reaches_the_same_weights(backend, competition, config_file, tmp_path,
                                                                   precision, batching):
    from whale.config import load_config
    from whale.training.trainer import train_fold

    # Under the shipped settings: no op-determinism switch (README, "Killed runs resume exactly").
    cfg = load_config(config_file, overrides={"precision": precision, "batching": batching})
    full = train_fold(cfg, competition, 0, tmp_path / "full", score=False, verbose=0, log=lambda *_: None)
    assert full.finished and full.epochs_done == 4

    part = train_fold(cfg, competition, 0, tmp_path / "part", max_epochs=1, score=False, verbose=0,
                      log=lambda *_: None)
    assert not part.finished and part.epochs_done == 1
    rest = train_fold(cfg, competition, 0, tmp_path / "part", resume=True, score=False, verbose=0,
                      log=lambda *_: None)
    assert rest.finished and rest.epochs_done == 4

    w_full, s_full = _weights(tmp_path / "full")
    w_part, s_part = _weights(tmp_path / "part")
    assert len(w_full) == len(w_part)
    for a, b in zip(w_full, w_part):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert s_full["epochs_done"] == s_part["epochs_done"] == 4
    # The last mining block's negatives are the same pairs.
    with np.load(tmp_path / "full" / "checkpoints" / "mined-e0003.npz") as a, \
            np.load(tmp_path / "part" / "checkpoints" / "mined-e0003.npz") as b:
        assert a["count"] == b["count"]
        for i in range(int(a["count"])):
            np.testing.assert_array_equal(a[f"epoch{i}"], b[f"epoch{i}"])
    log_lines = (tmp_path / "part" / "log.csv").read_text().strip().splitlines()
    assert len(log_lines) == 5  # header + one row per epoch, none duplicated by the resume
    # The checkpoint keeps its precision; the head's output (and so the loss) is float32.
    from whale.models.checkpoint import load_checkpoint

    model, _ = load_checkpoint(tmp_path / "part" / "checkpoints", "last")
    compute = "bfloat16" if precision == "mixed_bfloat16" else "float32"
    assert model.get_layer("branch").layers[-1].compute_dtype == compute
    assert model.get_layer("head").get_layer("per_feature").compute_dtype == compute
    assert model.get_layer("head").get_layer("weighted_average").compute_dtype == "float32"
    assert model.output.dtype == "float32"
    assert [i.name for i in model.inputs] == (["images", "pair_index"] if batching == "images" else ["img_a", "img_b"])


def test_run_fold_script_writes_scores_and_a_valid_submission_input(competition, config_file, tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "run_fold.py"), "--config", str(config_file), "--fold", "0",
           "--data", str(competition), "--out", str(run), "--verbose", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "run_fold: finished after 4 epochs" in out.stdout
    for name in ("config.yaml", "run.json", "log.csv", "training.png", "checkpoints/best.json",
                 "checkpoints/last.json", "checkpoints/last-e0004.keras",
                 "scores/val.npz", "scores/test.npz", "done.json"):
        assert (run / name).exists(), name
    from whale.inference.scorefile import load_score_file

    val = load_score_file(run / "scores" / "val.npz")
    test = load_score_file(run / "scores" / "test.npz")
    assert val.scores.shape == (len(val.query), len(val.gallery))
    assert "new_whale" in set(val.query_ids)
    run_id = json.loads((run / "run.json").read_text())["run_id"]
    for sf, split in ((val, "val"), (test, "test")):  # each file records the run that wrote it
        assert {k: sf.identity[k] for k in ("run_id", "fold", "seed", "checkpoint", "split", "backend")} == \
            {"run_id": run_id, "fold": 0, "seed": 3, "checkpoint": "best", "split": split, "backend": "tensorflow"}
        assert len(sf.identity["config_hash"]) == 12 and sf.identity["epoch"] in (2, 3, 4)
    assert set(val.trained_on) == set(val.gallery)
    assert "new_whale" not in set(test.gallery_ids)
    assert test.scores.shape[0] == len((competition / "sample_submission.csv").read_text().splitlines()) - 1
    assert np.isfinite(test.scores.astype(np.float32)).all()
    # Validation images never sit in the fold's gallery.
    assert not set(val.query) & set(val.gallery)
    # `python -m whale.inference` on the same folder reproduces the run's test scores.
    out = subprocess.run([sys.executable, "-m", "whale.inference", "--run", str(run), "--data", str(competition),
                          "--out", str(tmp_path / "again.npz")], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    again = load_score_file(tmp_path / "again.npz")
    np.testing.assert_array_equal(again.query, test.query)
    np.testing.assert_allclose(again.scores.astype(np.float32), test.scores.astype(np.float32), atol=1e-3)


@pytest.mark.backend
def test_end_to_end_run_fold_then_ensemble(competition, config_file, tmp_path):
    """run_fold.py on generated data, then ensemble.py --tune on its score files."""
    run = tmp_path / "run"
    base = [sys.executable, str(ROOT / "run_fold.py"), "--config", str(config_file), "--fold", "1",
            "--data", str(competition), "--out", str(run), "--verbose", "0"]
    out = subprocess.run(base + ["--max-epochs", "3"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-3000:]  # paused, resumable
    out = subprocess.run(base + ["--resume"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    sub = tmp_path / "sub.csv"
    cmd = [sys.executable, str(ROOT / "ensemble.py"), str(run), "--tune", "--out", str(sub),
           "--sample", str(competition / "sample_submission.csv")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    from whale.submission import check_submission

    assert check_submission(sub, competition / "sample_submission.csv") == []


def test_fold_minus_one_trains_on_every_known_image_and_validates_nothing(competition):
    from whale.data import load_competition
    from whale.data import fold_data

    comp = load_competition(competition)
    data = fold_data(comp, -1, seed=0)
    known = comp.train[comp.train["Id"] != "new_whale"]
    assert len(data.val) == 0
    assert sorted(data.gallery.names) == sorted(known["Image"])
    counts = known["Id"].value_counts()
    assert sorted(data.pairs.names) == sorted(known[known["Id"].map(counts) >= 2]["Image"])
    with pytest.raises(ValueError, match="fold"):
        fold_data(comp, 4, seed=0)


def test_training_plot_is_written_from_a_log(tmp_path):
    from whale.training.plots import plot_training
    from whale.training.runlog import LOG_FIELDS, write_log as _write_log

    rows = [{"epoch": e, "stage": 1 + e // 3, "epoch_in_stage": 1, "image_size": 32, "k": 1000.0 / e,
             "lr": 1e-3, "freeze_branch": False, "dataset": "main", "loss": 0.7 - 0.05 * e,
             "accuracy": 0.5 + 0.04 * e, "val_map5": 0.1 * e if e % 2 == 0 else "",
             "val_threshold": "", "mining_s": 0.1, "epoch_s": 1.0} for e in range(1, 7)]
    assert set(rows[0]) == set(LOG_FIELDS)
    _write_log(tmp_path / "log.csv", rows)
    png = plot_training(tmp_path / "log.csv", tmp_path / "training.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


PLAYGROUND_CONFIG = """
name: playground-then-main
seed: 1
model: {branch: tiny, weights: null, channels: 1, head_mid: 8, head_hidden: 0}
batch_size: 16
mining_interval: 2
mining: pruned
candidates: 8
augment: false
workers: 1
stages:
  - {epochs: 2, k: 1.0, lr: 1.0e-3, image_size: 32, dataset: playground}
  - {epochs: 1, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main, freeze_branch: true}
  - {epochs: 1, k: 0.25, lr: 5.0e-4, image_size: 32, dataset: main, l2: 1.0e-4}
"""


def test_playground_stages_and_pruned_mining(competition, tmp_path):
    """PlayGround pre-training (its own ids) then the main data, with pruned mining."""
    from whale.config import load_config
    from whale.data.synth import generate
    from whale.training.trainer import train_fold

    playground = generate(tmp_path / "playground", n_ids=20, seed=11, size=96, progress=False)
    path = tmp_path / "pg.yaml"
    path.write_text(PLAYGROUND_CONFIG)
    cfg = load_config(path)
    lines = []
    with pytest.raises(ValueError, match="playground"):
        train_fold(cfg, competition, 0, tmp_path / "no-pg", score=False, verbose=0, log=lines.append)
    result = train_fold(cfg, competition, 0, tmp_path / "run", playground=playground, score=False,
                        verbose=0, log=lines.append)
    assert result.finished and result.epochs_done == 4
    import csv

    with open(tmp_path / "run" / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["dataset"] for r in rows] == ["playground", "playground", "main", "main"]
    # Playground pairs come from its own images: more pairs than the main fold has.
    pairs = [int(line.split(": ")[-1].split()[0]) for line in lines if " pairs" in line and "epoch" in line]
    assert len(pairs) == 4 and pairs[0] != pairs[2]
    assert any("negatives (pruned)" in line for line in lines)


def test_deadline_counts_a_compile_only_where_an_epoch_compiles(competition, config_file, tmp_path, monkeypatch):
    """Epochs of 10 s steady work, 90 s more where the train step is compiled (the call's first epoch, and the
    unfreezing of stage 2): with the deadline at 250 s all 4 epochs run (epoch 2 compiles: 100 + 1.5 x 100 fit;
    after it, t = 200 and 1.5 x 10 s fit), where counting the longest epoch (100 s) would have stopped after
    epoch 2."""
    import whale.training.trainer as trainer_mod
    from whale.config import load_config
    from whale.training.trainer import Trainer, train_fold

    cfg = load_config(config_file, overrides={"stages": [
        {"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "freeze_branch": True},
        {"epochs": 3, "k": 1000.0, "lr": 1.0e-3, "image_size": 32}]})
    clock = {"now": 0.0}
    monkeypatch.setattr(trainer_mod, "time", types.SimpleNamespace(time=lambda: clock["now"]))
    real_fit = Trainer._fit_epoch

    def timed_fit(self, dataset, ep, negatives):
        compiles = ep.epoch_in_stage == 0
        clock["now"] += 10.0 + (90.0 if compiles else 0.0)
        self._timing["compile_s"] += 90.0 if compiles else 0.0  # as the first-step clock measures it
        return real_fit(self, dataset, ep, negatives)

    monkeypatch.setattr(Trainer, "_fit_epoch", timed_fit)
    res = train_fold(cfg, competition, 0, tmp_path / "run", deadline=250.0, score=False, verbose=0, log=lambda *_: None)
    assert res.epochs_done == 4
    clock.update(now=0.0)  # a deadline the second compile rules out: 100 + 1.5 x 100 > 249
    res = train_fold(cfg, competition, 0, tmp_path / "run2", deadline=249.0, score=False, verbose=0,
                     log=lambda *_: None)
    assert res.epochs_done == 1


def test_next_epoch_estimate_is_steady_work_plus_a_compile_where_one_comes():
    from whale.training.clock import next_epoch_estimate

    assert next_epoch_estimate([], True) == 0.0  # a call's first epoch always runs
    history = [(True, 187.0, 170.0), (True, 153.0, 140.0), (False, 6.5, 0.0), (False, 9.0, 0.5)]
    assert next_epoch_estimate(history, False) == pytest.approx(17.0)  # the first epoch's 17 s of steady work
    assert next_epoch_estimate(history, True) == pytest.approx(17.0 + 170.0)
    assert next_epoch_estimate([(False, 12.0, 0.0)], True) == 12.0  # no compile seen: none counted


def test_a_stage_that_changes_only_the_learning_rate_keeps_the_traced_train_step(competition, config_file, tmp_path,
                                                                                monkeypatch):
    """The learning rate is a variable of the step: a new stage at another rate neither recompiles nor traces
    again (a fresh trace costs minutes for a large network on a GPU); a new weight decay traces again."""
    import keras

    from whale.config import load_config
    from whale.training.trainer import train_fold

    traced = []
    real = keras.Model.make_train_function

    def spy(self, force=False):
        traced.append(force)
        return real(self, force=force)

    monkeypatch.setattr(keras.Model, "make_train_function", spy)
    lr_only = load_config(config_file, overrides={"stages": [
        {"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32}, {"epochs": 1, "k": 1000.0, "lr": 2.0e-4,
                                                                     "image_size": 32}]})
    train_fold(lr_only, competition, 0, tmp_path / "lr", score=False, verbose=0, log=lambda *_: None)
    assert True not in traced
    from whale.models.checkpoint import load_checkpoint

    model, _ = load_checkpoint(tmp_path / "lr" / "checkpoints", "last")
    assert float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) == pytest.approx(2.0e-4)
    traced.clear()
    decay = load_config(config_file, overrides={"stages": [
        {"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32}, {"epochs": 1, "k": 1000.0, "lr": 1.0e-3,
                                                                     "image_size": 32, "l2": 1.0e-4}]})
    train_fold(decay, competition, 0, tmp_path / "l2", score=False, verbose=0, log=lambda *_: None)
    assert traced.count(True) == 1


def test_a_schedule_in_steps_trains_at_least_that_many_batches(competition, tmp_path):
    """A stage of 7 steps on this fold's few images runs whole epochs until 7 batches were seen;
    the run folder's config.yaml holds the epochs it was sized to."""
    import math
    import re

    from whale.config import config_from_dict, load_config
    from whale.training.trainer import train_fold

    raw = {"name": "steps", "seed": 1, "model": {"branch": "tiny", "head_mid": 8}, "batch_size": 32,
           "mining_interval": 2, "augment": False, "workers": 1,
           "stages": [{"steps": 7, "k": 1000.0, "lr": 1e-3, "image_size": 32}]}
    lines = []
    res = train_fold(config_from_dict(raw), competition, 0, tmp_path / "run", score=False, verbose=0,
                     log=lines.append)
    pairs = [int(m.group(1)) for line in lines if (m := re.search(r"^epoch \d+ .*: (\d+) pairs$", line))]
    batches = [math.ceil(p / 32) for p in pairs]
    assert res.finished and len(pairs) == res.epochs_total == res.epochs_done
    assert len(pairs) >= 2 and sum(batches) >= 7 and sum(batches) - batches[-1] < 7
    written = load_config(tmp_path / "run" / "config.yaml")
    assert [s.epochs for s in written.stages] == [len(pairs)] and written.stages[0].steps is None
    assert any("stage 1 7 steps -> " in line for line in lines)
