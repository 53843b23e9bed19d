"""Issue 15: run folders never mixed, identities in score files, corrupt state named, threshold sanity, CLI errors."""

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from whale import NEW_WHALE
from whale.core.errors import CheckpointError, ConfigError, DataError, run_cli
from whale.inference.scorefile import ScoreFileError, load_score_file, write_scores

ROOT = Path(__file__).resolve().parents[1]


def _run_folder(path, fold=0, seed=3):
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"fold": fold, "seed": seed, "run_id": "abc"}))
    (path / "log.csv").write_text("epoch,loss\n1,0.5\n2,0.4\n")
    (path / "scores").mkdir()
    (path / "scores" / "val.npz").write_bytes(b"x")
    (path / "done.json").write_text("{}")
    return path


# ----------------------------------------------------------------------------- 1. run folders
def test_a_non_empty_run_folder_needs_resume_or_overwrite(tmp_path):
    from whale.training.runlog import claim_run_dir

    run = _run_folder(tmp_path / "run")
    with pytest.raises(ConfigError) as err:
        claim_run_dir(run, fold=0, seed=3)
    msg = str(err.value)
    assert str(run) in msg and "--resume" in msg and "--overwrite" in msg
    assert "log.csv (2 epochs)" in msg and "scores/val.npz" in msg and "done.json" in msg
    claim_run_dir(run, fold=0, seed=3, resume=True)  # same fold and seed: fine
    with pytest.raises(ConfigError, match="fold 0, seed 3.*fold 1, seed 3"):
        claim_run_dir(run, fold=1, seed=3, resume=True)
    claim_run_dir(run, fold=0, seed=3, overwrite=True, log=lambda *_: None)
    assert list(run.iterdir()) == []
    claim_run_dir(tmp_path / "new", fold=0, seed=3)  # missing folder: fine


def test_overwrite_refuses_a_folder_that_holds_no_run(tmp_path):
    from whale.training.runlog import claim_run_dir

    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="only clears run folders"):
        claim_run_dir(tmp_path, fold=0, seed=3, overwrite=True)
    assert (tmp_path / "precious.txt").exists()


def test_score_only_refuses_another_fold(tmp_path):
    from whale.config import config_from_dict
    from whale.training.rescore import score_fold

    run = _run_folder(tmp_path / "run", fold=0, seed=3)
    cfg = config_from_dict({"name": "t", "seed": 3, "model": {"branch": "tiny"},
                            "stages": [{"epochs": 1, "k": 1.0, "lr": 1e-3, "image_size": 32}]})
    with pytest.raises(ConfigError, match=r"trained fold 0 .* asked for fold 1.*--fold 0"):
        score_fold(run, tmp_path / "no-data", 1, cfg)


def test_score_files_record_their_identity_and_old_ones_still_load(tmp_path):
    ident = {"run_id": "r1", "config_hash": "abc", "fold": 0, "seed": 1, "checkpoint": "best", "epoch": 4,
             "git_revision": "deadbeef", "backend": "tensorflow", "split": "val"}
    new = write_scores(tmp_path / "new.npz", np.zeros((1, 2), np.float16), ["q"], ["a", "b"], ["w1", "w2"],
                       query_ids=["w1"], identity=ident, trained_on=["a", "b"])
    sf = load_score_file(new, need_query_ids=True)
    assert sf.identity == ident and sf.trained_on.tolist() == ["a", "b"]
    old = write_scores(tmp_path / "old.npz", np.zeros((1, 2), np.float16), ["q"], ["a", "b"], ["w1", "w2"])
    assert load_score_file(old).identity is None


def test_every_score_file_writer_builds_its_identity_with_one_helper(monkeypatch):
    """A trained run's and the keypoint matcher's identities hold the same fields (score_identity's); the ensemble's
    identity table shows only fields of them."""
    import whale.inference.scorefile as scorefile
    from whale.ensemble.identity import COLUMNS
    from whale.inference.keypoints import identity
    from whale.inference.scorefile import IDENTITY_FIELDS, score_identity
    from whale.keypoints.config import load_keypoint_config

    monkeypatch.setattr(scorefile, "git_revision", lambda: "feedface")
    ident = score_identity("val", run_id="r1", run="fold0", config_hash="abc", fold=0, seed=1, backend="jax")
    assert tuple(ident) == IDENTITY_FIELDS and ident["git_revision"] == "feedface" and ident["split"] == "val"
    assert ident["checkpoint"] is ident["snapshot"] is ident["init_from"] is ident["epoch"] is None
    kp = identity(load_keypoint_config(None), "test", None, 3)
    assert tuple(kp) == (*IDENTITY_FIELDS, "matcher") and kp["git_revision"] == "feedface"
    assert set(COLUMNS) <= set(IDENTITY_FIELDS)
    with pytest.raises(ValueError, match="fields of every score file"):
        score_identity("val", run_id="r", run="r", config_hash="c", fold=0, seed=0, backend="b", git_revision="x")
    with pytest.raises(ValueError, match="split must be one of"):
        score_identity("train", run_id="r", run="r", config_hash="c", fold=0, seed=0, backend="b")


def _save_run(root, name, split_files):
    """A run folder with score files: ``split_files`` maps split -> kwargs of write_scores."""
    for split, kw in split_files.items():
        write_scores(root / name / "scores" / f"{split}.npz", **kw)
    return root / name


def _scores(n_query, gallery, gids, prefix, rng, query_ids=None, identity=None, trained_on=None):
    return {"scores": rng.random((n_query, len(gallery))).astype(np.float32),
            "query": [f"{prefix}{i}.jpg" for i in range(n_query)], "gallery": gallery, "gallery_ids": gids,
            "query_ids": query_ids, "identity": identity, "trained_on": trained_on}


def _ident(run_id, fold, split):
    return {"run_id": run_id, "config_hash": "c0ffee", "fold": fold, "seed": 0, "checkpoint": "best",
            "epoch": 3, "git_revision": "0123456789abcdef", "backend": "tensorflow", "split": split}


def _ensemble(argv, log):
    """``whale.ensemble.cli.run`` on ``argv`` parsed by ensemble.py's parser (no one-line wrapper)."""
    from whale.cli import command_parser
    from whale.ensemble.cli import run

    return run(command_parser("ensemble").parse_args(argv), log=log)


def test_ensemble_prints_identities_and_refuses_the_same_run_twice(tmp_path):
    run = _ensemble  # ensemble.py's work on the parsed line, bad input raising

    rng = np.random.default_rng(0)
    gallery, gids = [f"g{i}.jpg" for i in range(8)], [f"w{i % 4}" for i in range(8)]
    a = _save_run(tmp_path, "a", {"test": _scores(10, gallery, gids, "t", rng, identity=_ident("A", 0, "test"))})
    b = _save_run(tmp_path, "b", {"test": _scores(10, gallery, gids, "t", rng, identity=_ident("A", 0, "test"))})
    lines = []
    with pytest.raises(DataError, match=r"same run \(run_id A\) and fold 0"):
        run([str(a), str(b), "--threshold", "0.5", "--out", str(tmp_path / "x.csv")], log=lines.append)
    text = "\n".join(lines)
    assert "config_hash" in text and "c0ffee" in text and "0123456789" in text and "tensorflow" in text


def test_copies_of_one_run_scored_on_other_data_are_refused_naming_what_differs(tmp_path):
    rng = np.random.default_rng(0)
    gallery, gids = [f"g{i}.jpg" for i in range(8)], [f"w{i % 4}" for i in range(8)]
    relabelled = gids[:5] + ["w9", "w9", "w9"]  # a cleaned train.csv: three images labelled otherwise
    cases = {"gallery labels: 3 images labelled otherwise": (gallery, relabelled, 0),
             "gallery: 8 vs 7 images, 1 in one only (e.g. g7.jpg)": (gallery[:7], gids[:7], 0),
             "split seed 0 vs 1": (gallery, gids, 1)}
    for i, (says, (g, ids, seed)) in enumerate(cases.items()):
        a = _save_run(tmp_path / str(i), "a", {"test": _scores(10, gallery, gids, "t", rng,
                                                                identity=_ident("A", 0, "test"))})
        ident = {**_ident("A", 0, "test"), "seed": seed}
        b = _save_run(tmp_path / str(i), "b", {"test": _scores(10, g, ids, "t", rng, identity=ident)})
        with pytest.raises(DataError, match=r"the run \(run_id A\) and fold 0 of .*, scored on other data") as err:
            _ensemble([str(a), str(b), "--threshold", "0.5", "--out", str(tmp_path / "x.csv")], log=lambda *_: None)
        assert says in str(err.value) and "\n" not in str(err.value)


def test_runs_trained_on_other_photos_under_the_same_names_are_refused(tmp_path):
    """Two split draws name their photos alike: the score files agree on names, the runs' records of bytes do not."""
    import json

    from whale.data.fingerprint import DATA_IMAGES

    rng = np.random.default_rng(0)
    gallery, gids = [f"g{i}.jpg" for i in range(8)], [f"w{i % 4}" for i in range(8)]
    record = {f"train/{g}": [10, 1, f"{i:032x}"] for i, g in enumerate(gallery)}
    runs = {}
    for name, run_id, digests in (("a", "A", record), ("same", "S", record),
                                  ("drawn", "D", {**record, "train/g3.jpg": [10, 1, "f" * 32]})):
        runs[name] = _save_run(tmp_path, name, {"test": _scores(10, gallery, gids, "t", rng,
                                                                  identity=_ident(run_id, 0, "test"))})
        (runs[name] / DATA_IMAGES).write_text(json.dumps(digests))
    out = tmp_path / "x.csv"
    _ensemble([str(runs["a"]), str(runs["same"]), "--threshold", "0.5", "--out", str(out)], log=lambda *_: None)
    assert out.is_file()  # one data folder: fused
    with pytest.raises(DataError, match=r"drawn.*test\.npz: its run used other photos than .*a.*test\.npz's "
                                        r"under the same names \(1 images differ in bytes, e.g. train/g3\.jpg\)"):
        _ensemble([str(runs["a"]), str(runs["drawn"]), "--threshold", "0.5", "--out", str(out)], log=lambda *_: None)


def test_ensemble_refuses_validation_queries_the_model_trained_on(tmp_path):
    run = _ensemble  # ensemble.py's work on the parsed line, bad input raising

    rng = np.random.default_rng(1)
    gallery, gids = [f"g{i}.jpg" for i in range(8)], [f"w{i % 4}" for i in range(8)]
    val = _scores(6, gallery, gids, "v", rng, query_ids=["w1"] * 6, identity=_ident("A", 1, "val"),
                  trained_on=gallery + ["v2.jpg"])  # v2.jpg: validated on, but trained on too
    test = _scores(10, gallery, gids, "t", rng, identity=_ident("A", 1, "test"))
    r = _save_run(tmp_path, "a", {"test": test, "val": val})
    with pytest.raises(DataError, match=r"val.npz: 1 validation queries are images the model trained on: v2.jpg"):
        run([str(r), "--tune", "--out", str(tmp_path / "x.csv")], log=lambda *_: None)


def test_missing_score_file_names_the_fix(tmp_path):
    from whale.ensemble.cli import main

    (tmp_path / "run").mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "ensemble.py"), str(tmp_path / "run"), "--threshold",
                           "0.5", "--out", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--score-only --checkpoint last" in proc.stderr and "test.npz" in proc.stderr
    assert main([str(tmp_path / "run"), "--threshold", "0.5", "--out", str(tmp_path / "x.csv")],
                log=lambda *_: None) == 2


# ----------------------------------------------------------------------------- 3. corrupt state
@pytest.fixture()
def tiny_model(tf):
    import keras

    from whale.models import build_branch, build_head, build_siamese, compile_siamese

    keras.utils.set_random_seed(0)
    model = build_siamese(build_branch("tiny", (32, 32, 3)), build_head(32, mid=8))
    compile_siamese(model, 1e-3)
    return model


def test_a_kill_between_model_and_state_never_pairs_new_weights_with_an_old_state(tiny_model, tmp_path, monkeypatch):
    import whale.models.checkpoint as ckpt

    ckpt.save_checkpoint(tiny_model, tmp_path, "last", {"epochs_done": 1})
    w1 = [w.copy() for w in tiny_model.get_weights()]
    tiny_model.set_weights([w + 1.0 for w in w1])

    def killed(*_a, **_k):
        raise KeyboardInterrupt("killed before the state was written")

    monkeypatch.setattr(ckpt, "write_json_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tiny_model, tmp_path, "last", {"epochs_done": 2})
    monkeypatch.undo()
    model, state = ckpt.load_checkpoint(tmp_path, "last")
    assert state["epochs_done"] == 1
    for a, b in zip(model.get_weights(), w1):
        np.testing.assert_array_equal(a, b)


def test_a_truncated_checkpoint_is_named_and_resume_falls_back(tiny_model, tmp_path):
    from whale.models.checkpoint import load_checkpoint, save_checkpoint

    save_checkpoint(tiny_model, tmp_path, "last", {"epochs_done": 1})
    path = save_checkpoint(tiny_model, tmp_path, "last", {"epochs_done": 2})
    assert sorted(p.name for p in tmp_path.glob("*.keras")) == ["last-e0001.keras", "last-e0002.keras"]
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"last-e0002.keras.*truncated or corrupt"):
        load_checkpoint(tmp_path, "last")
    lines = []
    _, state = load_checkpoint(tmp_path, "last", fallback=True, log=lines.append)
    assert state["epochs_done"] == 1 and "epoch 1" in lines[0] and "last-e0002.keras" in lines[0]
    save_checkpoint(tiny_model, tmp_path, "last", {"epochs_done": 3})  # old files are cleaned up
    assert sorted(p.name for p in tmp_path.glob("*.keras")) == ["last-e0002.keras", "last-e0003.keras"]


def test_corrupt_json_state_and_mined_pairs_and_score_files_are_named(tmp_path):
    from whale.models.checkpoint import load_checkpoint
    from whale.training.minedfiles import load_mined, save_mined

    (tmp_path / "last.json").write_text('{"epochs_done": 3, "model')
    with pytest.raises(CheckpointError, match=r"last.json: checkpoint state is not valid JSON"):
        load_checkpoint(tmp_path, "last")
    path = save_mined(tmp_path, 4, [np.arange(6), np.arange(6)])
    assert [a.tolist() for a in load_mined(tmp_path, 4)] == [list(range(6))] * 2
    assert load_mined(tmp_path, 6) is None
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CheckpointError, match=r"mined-e0004.npz: mined negatives are truncated or corrupt"):
        load_mined(tmp_path, 4)
    sf = write_scores(tmp_path / "s.npz", np.zeros((2, 2), np.float16), ["a", "b"], ["c", "d"], ["w", "w"])
    sf.write_bytes(sf.read_bytes()[:100])
    with pytest.raises(ScoreFileError, match=r"s.npz: not a readable .npz score file"):
        load_score_file(sf)


# ----------------------------------------------------------------------------- 4. thresholds
def test_fraction_is_exact_even_when_float16_scores_tie():
    from whale.ranking import TopIds
    from whale.ranking.newwhale import predict_for_fraction

    rng = np.random.default_rng(3)
    n = 250
    top1 = rng.choice(np.array([0.25, 0.5, 0.75], np.float16), size=n)  # three tied groups
    scores = np.stack([top1, top1 * 0.5, top1 * 0.25, top1 * 0.1, top1 * 0.05], axis=1).astype(np.float32)
    names = np.array([[f"w{j}" for j in range(5)]] * n)
    for fraction in (0.276, 0.1, 0.5, 0.0, 1.0):
        preds, _ = predict_for_fraction(TopIds(names, scores), fraction)
        first = np.array([p[0] == NEW_WHALE for p in preds])
        assert first.sum() == int(np.floor(fraction * n + 0.5))
        assert all(len(p) == 5 and len(set(p)) == 5 for p in preds)
        if 0 < first.sum() < n:  # lowest scores first, ties by query order
            assert top1[first].max() <= top1[~first].min()
            tied = np.flatnonzero(top1 == top1[first].max())
            chosen = first[tied]
            assert chosen.tolist() == sorted(chosen.tolist(), reverse=True)


def _ensemble_run(tmp_path, rng, n=80):
    gallery, gids = [f"g{i}.jpg" for i in range(12)], [f"w{i % 6}" for i in range(12)]
    truth = [f"w{i % 6}" if i % 3 else NEW_WHALE for i in range(n)]
    val = _scores(n, gallery, gids, "v", rng, query_ids=truth)
    return _save_run(tmp_path, "a", {"test": _scores(40, gallery, gids, "t", rng), "val": val})


def test_every_mode_prints_the_share_and_warns_when_it_is_implausible(tmp_path):
    run = _ensemble  # ensemble.py's work on the parsed line, bad input raising

    r = _ensemble_run(tmp_path, np.random.default_rng(4))
    for mode, warn in ((["--threshold", "1.01"], True), (["--new-whale-fraction", "0.3"], False),
                       (["--threshold", "0.0"], True)):
        lines = []
        run([str(r), *mode, "--out", str(tmp_path / "x.csv")], log=lines.append)
        text = "\n".join(lines)
        assert "implied test share of new_whale at rank 1" in text and "~0.28" in text
        assert ("warning:" in text and "outside [0.10, 0.60]" in text) == warn, text


def test_calibrate_with_a_threshold_mode_says_which_rule_wrote_the_submission(tmp_path, monkeypatch):
    run = _ensemble  # ensemble.py's work on the parsed line, bad input raising
    from whale.ranking import calibrate

    r = _ensemble_run(tmp_path, np.random.default_rng(5))
    real = calibrate.cross_validate

    def threshold_wins(*a, **k):
        cv = real(*a, **k)
        return dataclasses.replace(cv, calibrated_map=cv.threshold_map - 0.01)

    monkeypatch.setattr("whale.ensemble.decide.cross_validate", threshold_wins)
    out_t, out_c = tmp_path / "t.csv", tmp_path / "c.csv"
    lines = []
    run([str(r), "--new-whale-fraction", "0.3", "--calibrate", "--out", str(out_t)], log=lines.append)
    assert "submission written by the threshold rule: the threshold rule won the cross-validation" in "\n".join(lines)
    first = [row.split(",")[1].split()[0] for row in out_t.read_text().splitlines()[1:]]
    assert first.count(NEW_WHALE) == 12  # the fraction's rule, not the calibrated one
    lines = []
    run([str(r), "--new-whale-fraction", "0.3", "--calibrate", "--force-calibrated", "--out", str(out_c)],
        log=lines.append)
    assert "submission written by the calibrated rule: --force-calibrated" in "\n".join(lines)


# ----------------------------------------------------------------------------- 5. CLI errors
def test_run_cli_turns_a_whale_error_into_one_line_and_status_2(capsys):
    def bad(argv):
        raise DataError(f"some.csv: row 3 is bad\nsecond line {argv}")

    assert run_cli(bad, ["x"], prog="tool") == 2
    err = capsys.readouterr().err
    assert err.startswith("tool: error: some.csv: row 3 is bad") and len(err.strip().splitlines()) == 1
    with pytest.raises(DataError):
        run_cli(bad, ["--debug"], prog="tool")
    assert run_cli(lambda argv: 3, [], prog="tool") == 3


def _commands(tmp_path):
    missing = str(tmp_path / "missing")
    return {
        "whale.training.cli": ["--config", missing + ".yaml", "--fold", "0", "--data", missing, "--out", missing],
        "whale.ensemble.cli": [missing, "--threshold", "0.5", "--out", str(tmp_path / "x.csv")],
        "whale.inference.__main__": ["--run", missing, "--data", missing, "--out", str(tmp_path / "x.npz")],
        "whale.data.synth": ["--out", str(tmp_path / "file"), "--quiet"],
        "whale.data.folds": ["--data", missing],
        "whale.submission": ["check", str(tmp_path / "file"), "--sample", str(tmp_path / "binary.csv")],
        "whale.kaggle.kernels": ["make", "--config", missing + ".yaml", "--folds", "0", "--competition", "c",
                                 "--code-dataset", "u/c", "--out", str(tmp_path / "k")],
        "whale.demo": ["--data", str(tmp_path / "d"), "--ids", "0", "--baseline-only"],
    }


@pytest.mark.parametrize("module", list(_commands(Path("/x"))))
def test_every_command_reports_bad_input_in_one_line(module, tmp_path, capsys):
    import importlib

    main = importlib.import_module(module).main
    (tmp_path / "file").write_text("x")
    (tmp_path / "binary.csv").write_bytes(b"Image,Id\n\xff\xfe\x00\x81bad\n")
    assert main(_commands(tmp_path)[module]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0] and "Traceback" not in err[0], err


def test_run_fold_refuses_a_used_run_folder_in_one_line(tmp_path):
    run = _run_folder(tmp_path / "run")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\nseed: 3\nmodel: {branch: tiny}\nstages:\n  - {epochs: 1, k: 1.0, lr: 0.001, image_size: 32}\n")
    proc = subprocess.run([sys.executable, str(ROOT / "run_fold.py"), "--config", str(cfg), "--fold", "0",
                           "--data", str(tmp_path / "data"), "--out", str(run)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("run_fold.py: error: ") and "Traceback" not in proc.stderr
    assert "--resume" in proc.stderr and "--overwrite" in proc.stderr


def test_files_the_user_gets_have_umask_permissions(tmp_path):
    from whale.ensemble.report import plot_thresholds
    from whale.submission import write_submission

    old = os.umask(0o022)
    try:
        sub = write_submission(tmp_path / "s.csv", ["a.jpg"], [["w1", NEW_WHALE, "w2", "w3", "w4"]]) or tmp_path / "s.csv"
        npz = write_scores(tmp_path / "s.npz", np.zeros((1, 1), np.float16), ["a"], ["b"], ["w"])
        png = plot_thresholds(tmp_path / "s.png", np.array([0.1, 0.2]), np.array([0.3, 0.4]), 0.1,
                              np.array([0.5, 0.6]), np.array([0.5, 0.6]))
    finally:
        os.umask(old)
    for path in (sub, npz, png):
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o644, path
