"""whale/ensemble/models.py: the folds of one model share its weight in an ensemble of several models."""
import json
from pathlib import Path

import numpy as np

from whale.ensemble.models import complete_groups, model_keys, model_weights, models_in_groups, validation_weights


def _identity(config: str, fold: int, **more) -> dict:
    return {"run_id": f"id{config}{fold}", "run": f"runs/{config}/fold{fold}", "config_hash": config, "fold": fold,
            "seed": 0, "checkpoint": "best", "snapshot": None, "init_from": None, "epoch": 10 + fold,
            "git_revision": f"rev{fold}", "backend": "tensorflow" if fold else "jax", "split": "test", **more}


def test_a_models_folds_share_one_key_and_other_configs_snapshots_seeds_do_not():
    folds = [_identity("net", f) for f in range(4)]
    others = [_identity("kp", 0, matcher="keypoints"), _identity("net", 0, snapshot="384"),
              _identity("net", 0, seed=1), None]
    keys = model_keys(folds + others, [f"p{i}" for i in range(8)])
    assert len(set(keys[:4])) == 1 and len(set(keys)) == 5  # the unrecorded file is a model of its own
    assert keys[7] == "path:p7"


def test_each_model_weighs_the_same_whatever_its_folds_and_validation_weighs_models_as_the_test():
    keys = ["net"] * 4 + ["kp"]
    w = model_weights(keys)
    assert w.tolist() == [0.125] * 4 + [0.5] and w.sum() == 1
    assert model_weights(["a", "b", "c"]).tolist() == [1 / 3] * 3  # one run per model: equal, as before
    assert model_weights(["a", "a", "b", "b"]).tolist() == [0.25] * 4  # equal folds: equal, as before
    assert validation_weights(keys, w, [0, 4]).tolist() == [0.5, 0.5]  # fold 0's file: the model's whole weight
    assert validation_weights(keys, [0.1, 0.1, 0.1, 0.1, 0.6], [0, 4]).tolist() == [0.4, 0.6]  # given weights
    members = [[0, 4], [1], [2], [3]]
    assert complete_groups(keys, members) == [0] and models_in_groups(keys, members) == 2
    assert models_in_groups(["a", "a", "b"], [[0, 2], [1]]) == 2


def _write(run: Path, split: str, queries, q_ids, gallery, g_ids, identity: dict, rng) -> None:
    from whale.inference.scorefile import write_scores

    scores = rng.random((len(queries), len(gallery))).astype(np.float32) * 0.6
    scores += 0.35 * (np.asarray(q_ids)[:, None] == np.asarray(g_ids)[None, :])
    write_scores(run / f"{split}.npz", np.clip(scores, 0, 1), queries, gallery, g_ids,
                 query_ids=q_ids if split == "val" else None, identity={**identity, "split": split})


def test_a_two_fold_network_fused_with_a_matcher_counts_as_one_model_against_the_other(tmp_path, capsys):
    """``whale ensemble KP NET_FOLD0 NET_FOLD1 --tune --fusion logodds``: two models of equal weight (each fold a
    quarter), the log-odds rule's K = 2, and the threshold tuned on fold 0's validation, which both models score
    (fold 1's, the network's alone, left out); the test fused with those weights."""
    from whale.ensemble.cli import main
    from whale.ensemble.fusion import read_fusion

    rng = np.random.default_rng(0)
    g_ids = [f"w{i % 12}" for i in range(36)]
    gallery = [f"g{i}.jpg" for i in range(36)]
    known = [f"w{i}" for i in range(12)]
    test_q = [f"t{i}.jpg" for i in range(24)]
    val = {f: ([f"v{f}_{i}.jpg" for i in range(10)], [known[(i + 3 * f) % 12] if i < 8 else "new_whale"
                                                      for i in range(10)]) for f in (0, 1)}
    runs = {"kp": (tmp_path / "kp", "kp", 0), "net0": (tmp_path / "net0", "net", 0),
            "net1": (tmp_path / "net1", "net", 1)}
    for name, (run, config, fold) in runs.items():
        run.mkdir()
        ident = _identity(config, fold)
        _write(run, "val", *val[fold], gallery, g_ids, ident, rng)
        _write(run, "test", test_q, [known[i % 12] for i in range(24)], gallery, g_ids, ident, rng)
    out = tmp_path / "s.csv"
    args = [str(runs[n][0]) for n in ("kp", "net0", "net1")]
    assert main(args + ["--tune", "--fusion", "logodds", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "weights: 0.5000, 0.2500, 0.2500" in said and "share its weight" in said
    assert "1 validation group(s) scored by only some of the models left out" in said
    fusion = read_fusion(tmp_path / "s.calibration.json")
    assert fusion.models == 2
    assert json.loads((tmp_path / "s.threshold.json").read_text())
    # one fold of each: the weights and validation of before (equal, both groups of one query set)
    assert main([args[0], args[1], "--tune", "--fusion", "logodds", "--out", str(tmp_path / "t.csv")]) == 0
    said = capsys.readouterr().out
    assert "weights: 0.5000, 0.5000" in said and "share its weight" not in said and "left out" not in said
