"""``run_fold.py``'s checks before the backend loads, ``--resume`` onto other data or config, Ctrl-C.

The refusals here come before Keras is imported (the subprocesses check ``sys.modules``) and
leave the run folder as they found it; the one real training run (marked slow) pauses a run,
refuses to resume it on another competition, and interrupts the resumed run with SIGINT.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = """
name: tiny-resume
seed: 3
model: {branch: tiny, weights: null, channels: 3, head_mid: 8, head_hidden: 0}
batch_size: 16
mining_interval: 2
augment: false
workers: 1
stages:
  - {epochs: 6, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main}
"""
NO_BACKEND = ("import sys; from whale.training.cli import main; status = main(sys.argv[1:]); "
              "print('BACKEND LOADED' if 'keras' in sys.modules or 'tensorflow' in sys.modules else 'no backend'); "
              "sys.exit(status)")


def _run_fold(*args, timeout=300):
    """``run_fold.py ARGS`` in a fresh interpreter that reports whether the backend was imported."""
    return subprocess.run([sys.executable, "-c", NO_BACKEND, *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def _refused_before_backend(proc, *words):
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("run_fold.py: error: "), proc.stderr
    assert "no backend" in proc.stdout
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def comps(tmp_path_factory):
    """Two synthetic competitions, A and B."""
    from whale.data.synth import generate

    root = tmp_path_factory.mktemp("comps")
    return (generate(root / "A", n_ids=10, seed=2, size=64, progress=False),
            generate(root / "B", n_ids=10, seed=7, size=64, progress=False))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny.yaml"
    path.write_text(TINY)
    return path


def _paused_run(out: Path, config: Path, data: Path, fold: int = 0):
    """What a paused run's folder records (``config.yaml``, ``run.json``), as the trainer writes them."""
    from whale.config import load_config
    from whale.data import fold_data, load_competition
    from whale.training.runlog import write_run_metadata
    from whale.training.schedule import sized_config

    cfg = load_config(config)
    pairs = len(fold_data(load_competition(data), fold, cfg.seed).pairs)
    write_run_metadata(out, sized_config(cfg, {"main": pairs, "playground": None}), fold, data, None)
    return cfg


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- before the backend loads
def test_a_fold_out_of_range_is_refused_before_the_backend_loads(comps, config, tmp_path):
    proc = _run_fold("--config", config, "--fold", 7, "--data", comps[0], "--out", tmp_path / "run")
    _refused_before_backend(proc, "--fold 7", "0..3")
    assert not (tmp_path / "run").exists()


def _with_train_csv(src: Path, dst: Path, edit) -> Path:
    import shutil

    shutil.copytree(src, dst)
    train = pd.read_csv(dst / "train.csv")
    edit(train)
    train.to_csv(dst / "train.csv", index=False)
    return dst


def test_a_train_csv_of_new_whale_only_is_refused_before_the_backend_and_leaves_no_folder(comps, config, tmp_path):
    data = _with_train_csv(comps[0], tmp_path / "nw", lambda t: t.__setitem__("Id", "new_whale"))
    proc = _run_fold("--config", config, "--fold", 0, "--data", data, "--out", tmp_path / "run")
    _refused_before_backend(proc, str(data / "train.csv"), "no id has two training images")
    assert not (tmp_path / "run").exists()  # the next try needs no --overwrite


def test_an_id_a_submission_cannot_carry_is_refused_before_training(comps, config, tmp_path):
    def spaced(train):
        known = train.index[train["Id"] != "new_whale"][0]
        train.loc[train["Id"] == train.loc[known, "Id"], "Id"] = "w 2295af3"

    data = _with_train_csv(comps[0], tmp_path / "spaced", spaced)
    proc = _run_fold("--config", config, "--fold", 0, "--data", data, "--out", tmp_path / "run")
    line = _refused_before_backend(proc, "train.csv: line", "'w 2295af3'", "space")
    assert "line 1:" not in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("label", ["w'2295af3", 'w"2295af3', "w,2295af3", "w\t2295af3"])
def test_every_character_the_id_message_forbids_is_refused(comps, label):
    from whale.data import fold_data, load_competition
    from whale.core.errors import DataError
    from whale.training.preflight import check_training_ids

    comp = load_competition(comps[0])
    comp.train.loc[comp.train["Id"] == comp.train["Id"][comp.train["Id"] != "new_whale"].iloc[0], "Id"] = label
    with pytest.raises(DataError, match="without spaces, commas or quotes") as err:
        check_training_ids(comp, fold_data(comp, 0, 3).pairs, "fold 0")
    assert repr(label) in str(err.value)


# ---------------------------------------------------------------- --resume: same data, same config
def test_resume_onto_another_competition_is_refused_naming_the_data(comps, config, tmp_path):
    run = tmp_path / "run"
    _paused_run(run, config, comps[0])
    before = _snapshot(run)
    proc = _run_fold("--config", config, "--fold", 0, "--data", comps[1], "--out", run, "--resume")
    _refused_before_backend(proc, "--resume would not continue the paused run", "data:", str(comps[1]),
                            "--allow-changes")
    assert _snapshot(run) == before


def test_resume_under_a_changed_config_names_each_key_path(comps, config, tmp_path):
    run = tmp_path / "run"
    _paused_run(run, config, comps[0])
    changed = tmp_path / "changed.yaml"
    changed.write_text(TINY.replace("lr: 1.0e-3", "lr: 5.0e-4").replace("head_mid: 8", "head_mid: 16"))
    proc = _run_fold("--config", changed, "--fold", 0, "--data", comps[0], "--out", run, "--resume")
    _refused_before_backend(proc, "config stages[0].lr: 0.001 -> 0.0005", "config model.head_mid: 8 -> 16")
    # --precision on the command line is a config change like any other.
    proc = _run_fold("--config", config, "--fold", 0, "--data", comps[0], "--out", run, "--resume",
                     "--precision", "mixed_bfloat16")
    _refused_before_backend(proc, "config precision: 'float32' -> 'mixed_bfloat16'")


def test_resume_changes_compare_every_key_the_config_has(comps, config, tmp_path):
    """Whatever keys the config has (new ones included) are compared, from the recorded config.yaml."""
    import dataclasses

    from whale.training.runlog import config_differences, resume_changes

    run = tmp_path / "run"
    cfg = _paused_run(run, config, comps[0])
    assert resume_changes(run, cfg, comps[0]) == []
    assert resume_changes(run, cfg, comps[0].parent / "A") == []  # the same folder by another path
    for key, value in (("tta_mode", "scores"), ("negatives_mix", 0.25), ("box_margin", 0.2)):
        other = dataclasses.replace(cfg, **{key: value})
        assert [c.split(":")[0] for c in resume_changes(run, other, comps[0])] == [f"config {key}"]
    assert config_differences({"a": 1, "s": [{"lr": 1}]}, {"a": 1, "s": [{"lr": 2}], "new": 3}) == \
        ["s[0].lr: 1 -> 2", "new: (absent) -> 3"]


def test_allow_changes_prints_and_records_each_change(comps, config, tmp_path):
    from whale.config import load_config
    from whale.training.preflight import check_resume

    run = tmp_path / "run"
    _paused_run(run, config, comps[0])
    printed = []
    changes = check_resume(run, load_config(config), comps[1], allow_changes=True, log=printed.append)
    assert len(changes) == 1 and changes[0].startswith("data: ")
    assert printed == [f"--allow-changes: {changes[0]}"]
    history = json.loads((run / "run.json").read_text())["history"]
    assert history[-1]["resumed_with_changes"] == changes
    # A run written before fingerprints existed: the data cannot be checked, and that is said.
    meta = json.loads((run / "run.json").read_text())
    del meta["data_fingerprint"], meta["images_fingerprint"]
    (run / "run.json").write_text(json.dumps(meta))
    printed.clear()
    assert check_resume(run, load_config(config), comps[1], allow_changes=False, log=printed.append) == []
    assert len(printed) == 1 and "records no data fingerprint" in printed[0]


def test_resume_onto_the_same_names_with_other_pixels_is_refused_naming_the_image(comps, config, tmp_path):
    import shutil

    import cv2

    from whale.data.fingerprint import image_hashes
    from whale.training.runlog import resume_changes

    data = tmp_path / "A"
    shutil.copytree(comps[0], data)
    run = tmp_path / "run"
    cfg = _paused_run(run, config, data)
    assert resume_changes(run, cfg, data) == []
    name = sorted((data / "train").iterdir())[3].name
    img = cv2.imread(str(data / "train" / name))
    cv2.imwrite(str(data / "train" / name), 255 - img)  # other pixels, same name
    changes = resume_changes(run, cfg, data)
    assert len(changes) == 1 and f"1 images: train/{name}" in changes[0], changes
    before = _snapshot(run)
    proc = _run_fold("--config", config, "--fold", 0, "--data", data, "--out", run, "--resume")
    _refused_before_backend(proc, "same files with other bytes", f"train/{name}", "--allow-changes")
    assert _snapshot(run) == before
    # cheaply: a file whose size and time are as recorded is not read again
    recorded = json.loads((run / "data_images.json").read_text())
    other = sorted(recorded)[0]
    recorded[other] = recorded[other][:2] + ["f" * 32]
    assert image_hashes(data, recorded)[other][2] == "f" * 32


def test_resume_with_allow_changes_onto_another_competition_mines_again_and_trains(comps, config, tmp_path):
    """Paused inside a mining block on A, resumed on B: the block's saved negatives index A's images."""
    from whale.config import load_config
    from whale.training.minedfiles import load_mined, save_mined
    from whale.training.preflight import check_resume
    from whale.training.trainer import train_fold

    run, cfg = tmp_path / "run", load_config(config)
    assert not train_fold(cfg, comps[0], 0, run, max_epochs=1, score=False, verbose=0, log=lambda m: None).finished
    changes = check_resume(run, cfg, comps[1], allow_changes=True, log=lambda m: None)
    assert changes and changes[0].startswith("data: ")
    logged = []
    result = train_fold(cfg, comps[1], 0, run, resume=True, max_epochs=1, score=False, verbose=0, log=logged.append)
    assert result.epochs_done == 2
    assert any("mining them again" in line for line in logged), logged
    # the key check itself: a file of other images is not handed back, one of older versions (no key) is
    save_mined(tmp_path, 0, [np.zeros((3, 2), int)], key="aaaa")
    assert load_mined(tmp_path, 0, "bbbb") is None and len(load_mined(tmp_path, 0, "aaaa")) == 1


def test_a_run_that_fails_before_its_first_epoch_leaves_the_folder_as_it_found_it(tmp_path):
    from whale.training.preflight import FolderGuard

    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError), FolderGuard(fresh):
        (fresh / "checkpoints").mkdir(parents=True)
        (fresh / "config.yaml").write_text("x")
        raise RuntimeError("first batch")
    assert not fresh.exists()

    paused = tmp_path / "paused"
    (paused / "checkpoints").mkdir(parents=True)
    (paused / "run.json").write_text('{"fold": 0}')
    (paused / "checkpoints" / "last.json").write_text('{"epochs_done": 2}')
    before = _snapshot(paused)
    with pytest.raises(KeyboardInterrupt), FolderGuard(paused):
        (paused / "run.json").write_text('{"fold": 0, "history": [1]}')
        (paused / "tensorboard").mkdir()
        raise KeyboardInterrupt
    assert _snapshot(paused) == before and not (paused / "tensorboard").exists()

    with pytest.raises(RuntimeError), FolderGuard(paused):  # an epoch was added: the run keeps it
        (paused / "checkpoints" / "last.json").write_text('{"epochs_done": 3}')
        raise RuntimeError("later")
    assert json.loads((paused / "checkpoints" / "last.json").read_text())["epochs_done"] == 3


# ---------------------------------------------------------------- a real run: pause, refuse, Ctrl-C
@pytest.mark.slow
def test_pause_refuse_another_competition_then_ctrl_c_is_one_line_and_130(comps, config, tmp_path):
    run = tmp_path / "run"
    base = [sys.executable, str(ROOT / "run_fold.py"), "--config", str(config), "--fold", "0", "--out", str(run),
            "--verbose", "0"]
    paused = subprocess.run(base + ["--data", str(comps[0]), "--max-epochs", "1"], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert paused.returncode == 3, paused.stderr[-3000:]
    before = _snapshot(run)
    other = _run_fold(*base[2:], "--data", comps[1], "--resume")
    _refused_before_backend(other, "data:")
    assert _snapshot(run) == before

    proc = subprocess.Popen(base + ["--data", str(comps[0]), "--resume"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,  # Ctrl-C heard, even under `make test &`
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:  # wait until epoch 2 is kept
        state = run / "checkpoints" / "last.json"
        if state.is_file() and json.loads(state.read_text()).get("epochs_done", 0) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    epochs = json.loads((run / "checkpoints" / "last.json").read_text())["epochs_done"]
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"run_fold.py: interrupted after epoch {epochs}; `--resume` continues the run"
