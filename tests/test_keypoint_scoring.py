"""``whale score --matcher keypoints`` under a user's odd inputs: score folders that hold one run's files and never
another kind of record, a stale validation file the ensemble refuses, ``train.csv`` without a known id, flags out of
range, a read-only cache, and progress for every long step (issue 57)."""
import errno
import json
import shutil

import numpy as np
import pytest

pytest.importorskip("cv2")

from whale.core.errors import ConfigError, OutputError  # noqa: E402
from whale.inference.__main__ import main as score_main  # noqa: E402
from whale.inference.scorefile import write_scores  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("kp") / "data", n_ids=12, seed=3, size=96, progress=False)


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    """One feature store for the module's runs (extracted once), outside every ``--out``."""
    root = tmp_path_factory.getbasetemp() / "kp-cache"
    monkeypatch.setenv("WHALE_CACHE", str(root))
    return root


def score(data, out, *flags):
    return score_main(["--matcher", "keypoints", "--data", str(data), "--out", str(out), "--quiet", "--workers", "1",
                       *flags])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_score_folder_never_replaces_a_trained_runs_record(data, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    record = {"run_id": "20260101-fold0-abc", "fold": 0, "argv": ["run_fold.py"], "history": []}
    (run / "run.json").write_text(json.dumps(record))
    (run / "config.yaml").write_text("name: demo\n")
    assert score(data, run) == 2
    err = one_line(capsys)
    assert f"{run / 'run.json'} is a trained run's record (run_id 20260101-fold0-abc)" in err
    assert json.loads((run / "run.json").read_text()) == record
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml", "run.json"]
    (run / "run.json").unlink()  # a trained run's folder before its run.json: its config and checkpoints
    assert score(data, run) == 2
    assert "holds config.yaml, a trained run's folder" in one_line(capsys)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.json").write_text("[1, 2]")
    assert score(data, other) == 2 and "not a keypoint score run's record" in one_line(capsys)
    scores = tmp_path / "run2" / "scores"  # a trained run's score files: never replaced
    scores.mkdir(parents=True)
    write_scores(scores / "val.npz", np.zeros((1, 1), np.float32), ["q.jpg"], ["g.jpg"], ["w1"], query_ids=["w1"],
                 identity={"run_id": "20260101-fold0-abc", "fold": 0, "split": "val"}, trained_on=[])
    before = (scores / "val.npz").read_bytes()
    assert score(data, scores) == 2
    assert f"{scores / 'val.npz'} holds another run's scores (run_id 20260101-fold0-abc)" in one_line(capsys)
    assert (scores / "val.npz").read_bytes() == before and sorted(p.name for p in scores.iterdir()) == ["val.npz"]
    kp = tmp_path / "kp"
    assert score(data, kp) == 0 and score(data, kp) == 0  # a score folder is scored again


def test_a_new_score_run_removes_the_stale_validation_file_and_the_ensemble_refuses_a_mixed_pair(
        data, tmp_path, capsys):
    from whale.ensemble.cli import main as ensemble_main
    from whale.inference.scorefile import load_score_file

    x = tmp_path / "x"
    assert score(data, x, "--fold", "0", "--set", "verify.scale=100") == 0
    stale = tmp_path / "stale-val.npz"
    shutil.copy(x / "val.npz", stale)
    capsys.readouterr()
    assert score(data, x) == 0
    assert f"removed {x / 'val.npz'}: an earlier score run's" in capsys.readouterr().out
    assert sorted(p.name for p in x.iterdir()) == ["data_images.json", "keypoints.yaml", "run.json", "test.npz"]
    sub = tmp_path / "sub.csv"
    assert ensemble_main([str(x), "--tune", "--out", str(sub)], log=lambda m: None) == 2
    assert "missing" in one_line(capsys) and not sub.exists()
    # a folder an earlier version left with a stale val.npz: the ensemble names both writers and stops
    shutil.copy(stale, x / "val.npz")
    lines = []
    assert ensemble_main([str(x), "--tune", "--out", str(sub)], log=lines.append) == 2
    err = one_line(capsys)
    test_id, val_id = (load_score_file(x / f"{s}.npz").identity["run_id"] for s in ("test", "val"))
    assert test_id != val_id and f"written by run {val_id} (fold 0)" in err and f"by run {test_id} (fold None)" in err
    assert not sub.exists() and not list(tmp_path.glob("sub.threshold.*"))
    # a score run with a fold replaces both files: the pair is one run's again
    assert score(data, x, "--fold", "0") == 0
    assert ensemble_main([str(x), "--tune", "--out", str(sub)], log=lambda m: None) == 0


def test_a_train_csv_without_a_known_id_and_a_fold_out_of_range_are_one_line(data, tmp_path, capsys):
    import pandas as pd

    from whale.keypoints import KeypointMatcher, load_keypoint_config
    from whale.keypoints.extract import Features

    new = tmp_path / "new"
    shutil.copytree(data, new)
    train = pd.read_csv(new / "train.csv")
    train["Id"] = "new_whale"
    train.to_csv(new / "train.csv", index=False)
    for flags in ([], ["--fold", "0"]):
        assert score(new, tmp_path / "out", *flags) == 2
        err = one_line(capsys)
        assert f"{new / 'train.csv'}: no training image has a known id" in err and "all new_whale" in err
    for fold in ("7", "-1", "4"):
        assert score(data, tmp_path / "out", "--fold", fold) == 2
        assert f"--fold {fold}: expected 0..3" in one_line(capsys)
    assert not (tmp_path / "out").exists()
    # a gallery whose photos have no keypoint (blank photos): no votes, scores 0, no IndexError
    cfg = load_keypoint_config()
    rng = np.random.default_rng(0)
    query = Features(rng.random((10, 2)).astype(np.float32), np.zeros((10, 2), np.float32),
                     rng.integers(0, 255, (10, 128), dtype=np.uint8), (50, 50))
    result = KeypointMatcher.build(cfg, [Features.empty((50, 50))] * 2, ["w1", "w2"]).match([query], progress=False)
    assert result.scores.tolist() == [[0.0, 0.0]]


def test_flags_and_settings_out_of_range_say_what_was_expected(data, tmp_path, capsys, monkeypatch):
    for workers in ("0", "-2"):
        with pytest.raises(SystemExit) as exit_:
            score_main(["--matcher", "keypoints", "--data", str(data), "--out", str(tmp_path / "w"), "--workers",
                        workers])
        assert exit_.value.code == 2
        assert f"--workers: expected an integer >= 1 (extraction processes), received {workers}" in \
            capsys.readouterr().err
    from whale.keypoints import FeatureStore, load_keypoint_config

    with pytest.raises(ConfigError, match="workers: expected an integer >= 1"):
        FeatureStore(load_keypoint_config(), tmp_path / "s").features(sorted((data / "train").iterdir())[:2],
                                                                      workers=0, progress=False)
    assert score(data, tmp_path / "k", "--set", "select.keep=0") == 2
    assert "select.keep: expected a number in (0, 1], received" in one_line(capsys)
    # a read-only cache: refused before any work, naming --cache; a write refused later says --cache too
    import whale.core.files as files

    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(files, "_writable", lambda folder: folder != ro)
    assert score(data, tmp_path / "c", "--cache", str(ro)) == 2
    err = one_line(capsys)
    assert f"--cache {ro}: {ro} is read-only" in err and "--out" not in err
    monkeypatch.undo()

    def refused(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("whale.core.sealed._write_file", refused)  # where a feature file is written
    with pytest.raises(OutputError, match="read-only: choose another --cache$"):
        FeatureStore(load_keypoint_config(), tmp_path / "s2").features(sorted((data / "train").iterdir())[:1],
                                                                       workers=1, progress=False)


def test_a_fold_with_an_empty_test_folder_says_it_writes_only_the_validation_file(data, tmp_path, capsys):
    bare = tmp_path / "bare"
    shutil.copytree(data, bare)
    for path in (bare / "test").iterdir():
        path.unlink()
    (bare / "sample_submission.csv").unlink(missing_ok=True)
    assert score(bare, tmp_path / "out", "--fold", "0") == 0
    assert f"{bare / 'test'} holds no test images: writing val.npz only, no test.npz" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["data_images.json", "keypoints.yaml", "run.json",
                                                                     "val.npz"]
