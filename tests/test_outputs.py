"""Nothing lost at the output side: every command writes exactly the file named, or refuses in one line.

For each command that writes (``python -m whale.inference``, ``ensemble.py``, ``run_fold.py``,
``python -m whale.data.synth``): ``--out`` without an extension, ``--out`` naming a folder, a
read-only folder and a full disk. The last two run the command on a real small tmpfs (mounted
read-only, or filled up) in a user and mount namespace (``unshare -rm``) where the machine allows;
the in-process cases with a patched writer run everywhere. Each refusal is one line on stderr,
exit status 2, and leaves no file, hidden or not.
"""

from __future__ import annotations

import errno
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TINY = """
name: tiny-outputs
seed: 3
model: {branch: tiny, weights: null, channels: 3, head_mid: 8, head_hidden: 0}
batch_size: 16
mining_interval: 2
augment: false
workers: 1
stages:
  - {epochs: 2, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main}
"""


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs -o size=16k tmpfs \"$(mktemp -d)\""], capture_output=True, timeout=30)
    return probe.returncode == 0


CAN_MOUNT = _can_mount()
needs_tmpfs = pytest.mark.skipif(not CAN_MOUNT, reason="no user+mount namespaces here (unshare -rm): "
                                                      "the patched-writer cases cover the full disk")


def on_tmpfs(mnt: Path, cmd: list[str], state: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` with a 16 KiB tmpfs on ``mnt`` that is ``full`` or ``readonly`` (new namespaces)."""
    mnt.mkdir(parents=True, exist_ok=True)
    prepare = {"full": f"head -c 65536 /dev/zero > {mnt}/filler 2>/dev/null; ",
               "readonly": f"mount -o remount,ro {mnt} && "}[state]
    script = f"mount -t tmpfs -o size=16k tmpfs {mnt} && {prepare}" + " ".join(shlex.quote(c) for c in cmd) + \
        f"; rc=$?; echo LISTING; find {mnt} -mindepth 1 ! -name filler; exit $rc"
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def _left_on_mount(proc) -> list[str]:
    return [line for line in proc.stdout.split("LISTING", 1)[1].split("\n") if line.strip()]


def _one_line_error(proc, *words):
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert lines and ": error: " in lines[-1], proc.stderr[-2000:]
    # TensorFlow's own import-time lines may come first; the command's error is one line.
    assert sum(": error: " in line for line in lines) == 1
    for word in words:
        assert word in lines[-1], lines[-1]
    return lines[-1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("comp") / "data", n_ids=10, seed=2, size=64, progress=False)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs' score files (fold 0 and 1 of one model) for ensemble.py."""
    from whale.inference.scorefile import write_scores

    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(0)
    gallery = [f"g{i}.jpg" for i in range(12)]
    gids = [f"w{i % 4}" for i in range(12)]
    query = [f"q{i}.jpg" for i in range(8)]
    for fold in (0, 1):
        ident = {"run_id": f"r{fold}", "fold": fold, "seed": 0, "checkpoint": "best", "split": "test"}
        write_scores(root / f"run{fold}" / "scores" / "test.npz", rng.random((8, 12)), query, gallery, gids,
                     identity=ident)
    return [root / "run0", root / "run1"]


def _commands(data, config, runs, out):
    """The argv of each command with ``--out out``."""
    return {
        "inference": [PY, "-m", "whale.inference", "--run", str(runs[0]), "--data", str(data), "--out", str(out)],
        "ensemble": [PY, str(ROOT / "ensemble.py"), *map(str, runs), "--threshold", "0.5", "--out", str(out)],
        "run_fold": [PY, str(ROOT / "run_fold.py"), "--config", str(config), "--fold", "0", "--data", str(data),
                     "--out", str(out), "--verbose", "0"],
        "synth": [PY, "-m", "whale.data.synth", "--out", str(out), "--ids", "4", "--size", "64", "--quiet"],
    }


# ---------------------------------------------------------------- the file named, exactly
def test_atomic_write_refuses_a_writer_that_renames_its_file_and_leaves_nothing(tmp_path):
    from whale.core.errors import OutputError
    from whale.core.files import atomic_write

    with pytest.raises(OutputError, match="instead of the file named"):
        atomic_write(tmp_path / "noext", lambda tmp: np.savez(tmp, a=np.ones(3)))  # np.savez appends .npz
    assert list(tmp_path.iterdir()) == []


def test_partial_writes_finds_what_a_killed_atomic_write_leaves_for_the_names_asked(tmp_path):
    from whale.core.files import atomic_write, partial_writes

    names = []
    atomic_write(tmp_path / "faiss-hnsw-ab.index", lambda tmp: (names.append(tmp.name), tmp.write_bytes(b"x")))
    left = tmp_path / names[0]  # what a kill between the write and the rename leaves
    left.write_bytes(b"partial")
    assert partial_writes(tmp_path, "faiss-hnsw-*.index") == [left]
    assert partial_writes(tmp_path, "other-*.index") == []
    assert (tmp_path / "faiss-hnsw-ab.index").read_bytes() == b"x"


def test_a_score_file_named_without_extension_is_written_under_that_name(tmp_path, monkeypatch, capsys):
    """``python -m whale.inference --out OUT/noext``: the scores are in ``noext``, nothing else is there."""
    import types

    from whale.inference import __main__ as cli
    from whale.inference.scorefile import load_score_file, write_scores

    fake = types.ModuleType("whale.inference.runs")  # the model's part is another test's: only the writing here
    fake.score_folder = lambda run, data, out, checkpoint: write_scores(
        out, np.full((2, 3), 0.5, np.float32), ["a.jpg", "b.jpg"], ["x.jpg", "y.jpg", "z.jpg"], ["w1", "w1", "w2"])
    monkeypatch.setitem(sys.modules, "whale.inference.runs", fake)
    out = tmp_path / "noext"
    assert cli.main(["--run", "RUN", "--data", "DATA", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert [p.name for p in tmp_path.iterdir()] == ["noext"]
    assert load_score_file(out).scores.shape == (2, 3)


def test_a_score_file_named_like_a_new_folder_is_refused_before_any_work(tmp_path, capsys):
    """``--out newdir/`` names a folder that does not exist yet: refused, not written as a file ``newdir``."""
    from whale.inference import __main__ as cli

    assert cli.main(["--run", "RUN", "--data", "DATA", "--out", f"{tmp_path / 'newdir'}/"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected a file name, received a folder's" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["inference", "ensemble", "run_fold", "synth"])
def test_out_naming_a_folder_or_a_file_in_the_way_is_refused_before_any_work(command, data, config, runs, tmp_path):
    folder = tmp_path / "existing"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    # inference and ensemble write a file: a folder is refused; run_fold and synth write a folder: a file is.
    target = tmp_path / "a-file" if command in ("run_fold", "synth") else folder
    (tmp_path / "a-file").write_text("x")
    proc = subprocess.run(_commands(data, config, runs, target)[command], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    _one_line_error(proc, str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "existing"]
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]


@needs_tmpfs
@pytest.mark.parametrize("command", ["inference", "ensemble", "run_fold", "synth"])
def test_a_read_only_folder_is_refused_in_one_line_before_any_work(command, data, config, runs, tmp_path):
    mnt = tmp_path / "mnt"
    out = mnt / ("out" if command in ("run_fold", "synth") else "out.npz" if command == "inference" else "s.csv")
    proc = on_tmpfs(mnt, _commands(data, config, runs, out)[command], "readonly")
    _one_line_error(proc, "read-only", str(out))
    assert _left_on_mount(proc) == []


@needs_tmpfs
@pytest.mark.parametrize("command", ["ensemble", pytest.param("run_fold", marks=pytest.mark.slow), "synth"])
def test_a_full_disk_is_one_line_and_leaves_nothing(command, data, config, runs, tmp_path):
    mnt = tmp_path / "mnt"
    out = mnt / ("out" if command in ("run_fold", "synth") else "s.csv")
    proc = on_tmpfs(mnt, _commands(data, config, runs, out)[command], "full")
    _one_line_error(proc, "No space left on device")
    assert _left_on_mount(proc) == []


@needs_tmpfs
def test_a_full_disk_under_the_score_writer_is_one_line_and_leaves_nothing(tmp_path):
    """``python -m whale.inference`` with its model part replaced (the writing is real, on a full tmpfs)."""
    mnt = tmp_path / "mnt"
    script = ("import sys, types, numpy as np; from whale.inference.scorefile import write_scores; "
              "m = types.ModuleType('whale.inference.runs'); "
              "m.score_folder = lambda r, d, out, c: write_scores(out, np.zeros((300, 300), np.float32), "
              "[f'q{i}' for i in range(300)], [f'g{i}' for i in range(300)], ['w'] * 300); "
              "sys.modules['whale.inference.runs'] = m; from whale.inference.__main__ import main; "
              f"sys.exit(main(['--run', 'R', '--data', 'D', '--out', '{mnt / 'scores.npz'}']))")
    proc = on_tmpfs(mnt, [PY, "-c", script], "full")
    _one_line_error(proc, "No space left on device", str(mnt / "scores.npz"))
    assert _left_on_mount(proc) == []


def test_a_write_error_is_one_line_even_where_no_tmpfs_can_be_mounted(tmp_path, monkeypatch, capsys):
    """The patched writer: ``np.savez`` raising ENOSPC inside ``atomic_write``, through ``run_cli``."""
    from whale.core.errors import run_cli
    from whale.inference.scorefile import write_scores

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    status = run_cli(lambda argv: write_scores(tmp_path / "s.npz", np.zeros((1, 1)), ["q"], ["g"], ["w"]), [], "cmd")
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "s.npz: cannot write (No space left on device)" in err[0]
    assert list(tmp_path.iterdir()) == []
    # An OSError the user's environment explains, raised outside atomic_write, is one line too.
    assert run_cli(lambda argv: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system", "/x")), [],
                   "cmd") == 2
    assert "error: /x: Read-only file system" in capsys.readouterr().err


# ---------------------------------------------------------------- Ctrl-C and the smaller items
def test_ctrl_c_is_one_line_and_status_130(capsys):
    from whale.core.errors import INTERRUPTED_STATUS, run_cli

    def stopped(argv):
        raise KeyboardInterrupt("interrupted after epoch 3; `--resume` continues the run")

    assert run_cli(stopped, [], "run_fold.py") == INTERRUPTED_STATUS == 130
    assert capsys.readouterr().err.strip() == "run_fold.py: interrupted after epoch 3; `--resume` continues the run"
    with pytest.raises(KeyboardInterrupt):
        run_cli(stopped, ["--debug"], "run_fold.py")


def test_folds_cli_prints_no_runpy_warning(data):
    proc = subprocess.run([PY, "-m", "whale.data.folds", "--data", str(data)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "fold" in proc.stdout
    assert proc.stderr == ""


def test_weight_errors_print_plain_numbers(runs, capsys):
    from whale.ensemble.cli import main

    assert main([*map(str, runs), "--weights", "1", "--threshold", "0.5", "--out", "x.csv"], log=lambda *a: None) == 2
    err = capsys.readouterr().err
    assert "[1.0]" in err and "np.float64" not in err


def test_ensemble_on_a_data_folder_names_it_instead_of_a_config_that_does_not_exist(data, tmp_path, capsys):
    from whale.ensemble.cli import main

    assert main([str(data), "--threshold", "0.5", "--out", str(tmp_path / "s.csv")], log=lambda *a: None) == 2
    err = capsys.readouterr().err
    assert "is a competition folder, not a run folder" in err and "config.yaml" not in err
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_lists_the_folder_only_when_the_writer_left_its_file_empty(tmp_path, monkeypatch):
    """A write into a folder of many cache files does not list it (that made writing n files cost n^2)."""
    from pathlib import Path

    from whale.core.files import atomic_write

    listed = []
    glob = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: listed.append(pattern) or glob(self, pattern))
    atomic_write(tmp_path / "a.npz", lambda tmp: np.savez(tmp, a=np.ones(3)))
    assert listed == [] and np.load(tmp_path / "a.npz")["a"].sum() == 3
    atomic_write(tmp_path / "empty.txt", lambda tmp: tmp.write_bytes(b""))  # empty: checked, and kept
    assert len(listed) == 1 and (tmp_path / "empty.txt").read_bytes() == b""
