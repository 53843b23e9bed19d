"""snapshot: true stages: one schedule, several models, each scored into scores/<size>/ and ensembled."""


import numpy as np
import pytest

from whale.core.errors import ConfigError

STAGES = [{"epochs": 2, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main", "snapshot": True},
          {"epochs": 1, "k": 1.0, "lr": 5.0e-4, "image_size": 40, "dataset": "main", "freeze_branch": True},
          {"epochs": 1, "k": 0.5, "lr": 5.0e-4, "image_size": 40, "dataset": "main"}]
QUIET = dict(verbose=0, log=lambda *_: None)


def test_two_snapshots_of_one_size_are_refused(tmp_path, tiny_config):
    from whale.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(tiny_config("snapshot-test", 4, STAGES))
    with pytest.raises(ConfigError, match=r"stages\[2\]\.snapshot: expected one snapshot per image size "
                                          r"\(stages\[1\] already keeps the 40 px model\)"):
        load_config(path, overrides={"stages[1].snapshot": True, "stages[2].snapshot": True})
    cfg = load_config(path)
    assert cfg.stages[0].snapshot_name == "32" and cfg.stages[1].snapshot_name is None
    # Written configs keep the key where it is set, and hashes of configs without it do not move.
    assert "snapshot: true" in cfg.to_yaml() and cfg.to_yaml().count("snapshot:") == 1
    assert "init_from" not in cfg.to_yaml()


@pytest.mark.backend
def test_snapshot_is_its_stages_final_model_with_its_own_scores_that_ensemble_accepts(backend, tmp_path,
                                                                                      tiny_config):
    from whale.config import load_config
    from whale.data.synth import generate
    from whale.ensemble.cli import main as ensemble
    from whale.inference.scorefile import load_score_file
    from whale.models.checkpoint import load_checkpoint
    from whale.submission import check_submission
    from whale.training.trainer import train_fold

    comp = generate(tmp_path / "comp", n_ids=16, seed=5, size=96, progress=False)
    path = tmp_path / "c.yaml"
    path.write_text(tiny_config("snapshot-test", 4, STAGES))
    cfg = load_config(path)
    run = tmp_path / "run"
    assert train_fold(cfg, comp, 0, run, **QUIET).finished
    # The snapshot is the model after stage 1 (epoch 2): the same weights as a run stopped there.
    train_fold(cfg, comp, 0, tmp_path / "stopped", max_epochs=2, score=False, **QUIET)
    snap, state = load_checkpoint(run / "checkpoints", "snapshot-32")
    stopped, _ = load_checkpoint(tmp_path / "stopped" / "checkpoints", "last")
    assert state["epochs_done"] == 2 and snap.input_shape[0][1:] == (32, 32, 3)
    for a, b in zip(snap.get_weights(), stopped.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    final, snapshot = load_score_file(run / "scores" / "val.npz"), load_score_file(run / "scores" / "32" / "val.npz")
    assert snapshot.identity["checkpoint"] == "snapshot-32" and snapshot.identity["snapshot"] == "32"
    assert final.identity["snapshot"] is None and final.identity["run_id"] == snapshot.identity["run_id"]
    np.testing.assert_array_equal(final.query, snapshot.query)
    # Scored by its own model: equal to the final scores exactly when 'best' is that same epoch.
    assert snapshot.identity["epoch"] == 2
    same = np.allclose(final.scores.astype(np.float32), snapshot.scores.astype(np.float32))
    assert same == (final.identity["epoch"] == 2)
    assert (run / "scores" / "32" / "test.npz").is_file()

    # ensemble.py takes the run and its snapshot as two inputs (flags or a recipe: the same file).
    sample = comp / "sample_submission.csv"
    lines = []
    assert ensemble([str(run), str(run / "scores" / "32"), "--weights", "2", "1", "--tune",
                     "--out", str(tmp_path / "flags.csv")], log=lines.append) == 0
    assert check_submission(tmp_path / "flags.csv", sample) == []
    assert any("scores/32/test.npz" in line and "snapshot-32" in line for line in lines)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"runs:\n  - {{path: {run}, weight: 2}}\n  - {{path: {run}/scores/32, weight: 1}}\n"
                      "threshold: {mode: tune}\n")
    assert ensemble(["--recipe", str(recipe), "--out", str(tmp_path / "recipe.csv")], log=lambda *_: None) == 0
    assert (tmp_path / "recipe.csv").read_text() == (tmp_path / "flags.csv").read_text()
    # One snapshot twice is still one model counted twice.
    assert ensemble([str(run / "scores" / "32"), str(run / "scores" / "32"), "--tune",
                     "--out", str(tmp_path / "twice.csv")], log=lambda *_: None) == 2
