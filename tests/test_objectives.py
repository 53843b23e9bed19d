"""The objectives: config key, P x K batches, scorers, and every objective through training, scoring, ensembling.

The loss mathematics is checked against NumPy loops in tests/test_losses.py; here the plumbing that makes
"one config line switches the objective" true.
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.backend


# ------------------------------------------------------------------------------------------- config
def _cfg(**over):
    from whale.config import config_from_dict

    return config_from_dict({"name": "t", "stages": [{"epochs": 1, "k": 1.0, "lr": 1e-3, "image_size": 32}], **over})


def test_objective_key_fills_defaults_round_trips_and_keeps_old_hashes():
    from whale.config import config_from_dict, config_hash, load_config

    demo = load_config(ROOT / "configs" / "demo.yaml")
    assert demo.objective.name == "head" and demo.batch is None
    assert "objective" not in demo.to_dict() and "batch" not in demo.to_dict()  # older configs keep their hash
    assert config_hash(load_config(ROOT / "configs" / "demo.yaml", {"objective": "head"})) == config_hash(demo)
    c = _cfg(objective={"name": "triplet", "margin": 0.3}, batch={"ids": 6, "per_id": 3})
    assert dict(c.objective.params) == {"embedding": 256, "normalize": False, "margin": 0.3, "miner": "semihard",
                                        "reduction": "mean"}
    assert (c.batch.ids, c.batch.per_id, c.batch_size) == (6, 3, 18)
    assert config_from_dict(c.to_dict()) == c
    assert _cfg(objective="arcface", batch_size=32).batch.ids == 8  # K 4, P = batch_size / 4


def test_seed_001_keys_pairs_and_sglobal_with_the_papers_defaults_and_old_hashes_kept():
    from whale.config import config_from_dict, config_hash

    g = _cfg(objective="global")
    assert dict(g.objective.params) == {"embedding": 256, "t": 0.4, "lam": 0.8, "pairs": "all"}
    assert "pairs" not in g.to_dict()["objective"]  # the default is not written: earlier global runs keep their hash
    assert config_hash(_cfg(objective={"name": "global", "t": 0.4})) == config_hash(g)
    per = _cfg(objective={"name": "tgloss", "pairs": "triplet"})
    assert per.to_dict()["objective"]["pairs"] == "triplet" and config_from_dict(per.to_dict()) == per
    assert config_hash(per) != config_hash(_cfg(objective="tgloss"))
    s = _cfg(objective="sglobal")
    assert dict(s.objective.params) == {"margin": 1.0, "lam": 1.0} and not s.objective.identities and s.batch is None


@pytest.mark.parametrize("over,message", [
    ({"objective": "cosface"}, "objective.name: expected one of head"),
    ({"objective": {"name": "triplet", "margni": 1}}, "objective.margni: unknown key"),
    ({"objective": {"name": "arcface", "margin_p": 0.5}}, "objective.margin_p: expected a number <= 0"),
    ({"objective": {"name": "contrastive", "normalize": "yes please"}}, "objective.normalize"),
    ({"objective": "triplet", "batch": {"ids": 1}}, "batch.ids: expected an integer >= 2"),
    ({"batch": {"ids": 4}}, "batch: expected no batch for objective head"),
    ({"objective": {"name": "global", "pairs": "some"}}, "objective.pairs: expected one of all, triplet"),
    ({"objective": {"name": "sglobal", "pairs": "triplet"}}, "objective.pairs: unknown key"),
    ({"objective": {"name": "sglobal", "margin": 0}}, "objective.margin: expected a number > 0"),
    ({"objective": "sglobal", "batch": {"ids": 4}}, "batch: expected no batch for objective sglobal"),
])
def test_objective_errors_name_the_key_path(over, message):
    from whale.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        _cfg(**over)


# ------------------------------------------------------------------------------------------ batches
def test_identity_batches_cover_every_image_with_p_chunks_of_k():
    from whale.training.identitybatches import identity_batches

    ids = np.array(["a"] * 5 + ["b"] * 2 + ["c"] * 3 + ["d"] * 7 + ["e"] * 4 + ["f"] * 9)
    batches = identity_batches(ids, 3, 4, np.random.default_rng(0))
    assert batches.shape[1] == 12 and set(batches.ravel()) == set(range(len(ids)))
    for row in batches:
        chunks = ids[row].reshape(3, 4)
        assert (chunks == chunks[:, :1]).all()  # each chunk: K images of one identity
        assert len(set(chunks[:, 0])) == 3  # P different identities while the epoch has them
    b_chunks = [row.reshape(3, 4)[i] for row in batches for i in range(3) if ids[row[4 * i]] == "b"]
    assert all(sorted(set(c)) == [5, 6] for c in b_chunks)  # fewer than K images: repeated, no other id's
    again = identity_batches(ids, 3, 4, np.random.default_rng(0))
    assert np.array_equal(batches, again)


def test_mined_partners_seed_the_batches():
    from whale.training.identitybatches import identity_batches

    ids = np.repeat([f"w{i}" for i in range(40)], 4)
    # Each identity's images are mined against the next identity's: w0-w1, w2-w3, ... share a batch.
    first = np.arange(len(ids))
    partner = np.where((first // 4) % 2 == 0, first + 4, first - 4)
    batches = identity_batches(ids, 2, 4, np.random.default_rng(1), np.stack([first, partner], 1))
    pairs = {tuple(sorted(set(ids[row]))) for row in batches}
    assert all(int(a[1:]) // 2 == int(b[1:]) // 2 for a, b in pairs)
    random = identity_batches(ids, 2, 4, np.random.default_rng(1))
    assert sum(int(a[1:]) // 2 == int(b[1:]) // 2 for a, b in {tuple(sorted(set(ids[r]))) for r in random}) < 10


# ------------------------------------------------------------------------------------------ scorers
@pytest.mark.parametrize("normalize,score", [(False, "cauchy"), (True, "cosine")])
def test_embedding_scorer_equals_the_model_on_every_pair(backend, normalize, score):
    import keras

    from whale.objectives import Embedding, EmbeddingScorer, make_scorer

    x = keras.Input((6,))
    model = keras.Model(x, Embedding(4, normalize=normalize, score=score, name="embedding")(x))
    rng = np.random.default_rng(0)
    fa, fb = rng.normal(size=(5, 6)).astype(np.float32), rng.normal(size=(7, 6)).astype(np.float32)
    ea, eb = (np.asarray(model.predict(f, verbose=0)) for f in (fa, fb))
    d2 = ((ea[:, None] - eb[None]) ** 2).sum(-1)
    want = (1 + (ea[:, None] * eb[None]).sum(-1)) / 2 if score == "cosine" else 1 / (1 + d2)
    scorer = make_scorer(model)
    assert isinstance(scorer, EmbeddingScorer) and scorer.d == 6
    got = scorer.matrix(fa, fb, block=2, progress=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.min() >= 0 and got.max() <= 1
    np.testing.assert_allclose(scorer.pairs_index(fa, fb, [0, 4], [6, 1]), want[[0, 4], [6, 1]], rtol=1e-5)
    np.testing.assert_allclose(scorer.matrix(fa, progress=False), scorer.matrix(fa, fa, progress=False))


@pytest.mark.parametrize("kind", ["cauchy", "laplacian", "prob_clipped_l1"])
def test_probabilistic_scorer_equals_the_similarity_model_on_every_pair(backend, kind):
    import keras

    from whale.objectives import build_objective
    from whale.objectives.scorer import EmbeddingScorer, make_scorer
    from whale.objectives.similarity import SimilarityModel

    cfg = _cfg(objective={"name": "probabilistic", "similarity": kind, "embedding": 5}).objective
    x = keras.Input((6, 6, 3))
    branch = keras.Model(x, keras.layers.GlobalMaxPooling2D()(keras.layers.Conv2D(7, 3)(x)), name="branch")
    model = build_objective(cfg).build(branch)
    sim = model.get_layer("similarity")
    sim.log_alpha.assign(np.log(np.linspace(0.5, 2.0, 5)).astype(np.float32))  # not all ones
    rng = np.random.default_rng(1)
    fa, fb = rng.normal(size=(4, 7)).astype(np.float32), rng.normal(size=(6, 7)).astype(np.float32)
    emb = keras.Model(model.get_layer("embedding").input, model.get_layer("embedding").output)
    ea, eb = (np.asarray(emb.predict(f, verbose=0)) for f in (fa, fb))
    prob = SimilarityModel(kind, dim=5, beta=sim.beta, delta=sim.delta)
    prob.build([(None, 5), (None, 5)])
    prob.log_alpha.assign(sim.log_alpha)
    want = np.array([[float(np.asarray(prob([ea[i:i + 1], eb[j:j + 1]]))[0, 0]) for j in range(6)] for i in range(4)])
    scorer = make_scorer(model)
    assert isinstance(scorer, EmbeddingScorer) and scorer.similarity[0] == kind
    np.testing.assert_allclose(scorer.matrix(fa, fb, progress=False), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(scorer.pairs_index(fa, fb, [0, 3], [5, 2]), want[[0, 3], [5, 2]], rtol=1e-4)


def test_the_config_knows_every_similarity_model():
    from whale.config.objectives import SIMILARITY_MODELS
    from whale.objectives.similarity import SIMILARITIES

    assert SIMILARITY_MODELS == SIMILARITIES


def test_arcface_layer_and_margin_logits_follow_the_formula(backend):
    import keras

    from whale.objectives import SubCenterArcFace
    from whale.objectives.losses import arcface_margin_logits, subcenter_arcface_logits

    rng = np.random.default_rng(2)
    layer = SubCenterArcFace(5, subcenters=3)
    e = rng.normal(size=(4, 8)).astype(np.float32)
    cos = np.asarray(layer(keras.ops.convert_to_tensor(e)))
    w = layer.centers.numpy() if hasattr(layer.centers, "numpy") else np.asarray(layer.centers)
    en = e / np.linalg.norm(e, axis=1, keepdims=True)
    wn = w / np.linalg.norm(w, axis=2, keepdims=True)
    np.testing.assert_allclose(cos, np.einsum("be,nke->bnk", en, wn).max(-1), rtol=1e-5, atol=1e-6)
    labels, margins, s = np.array([0, 3, 3, 1]), np.array([0.1, 0.5, 0.2, 0.3, 0.4]), 16.0
    got = np.asarray(arcface_margin_logits(keras.ops.convert_to_tensor(cos), keras.ops.convert_to_tensor(labels),
                                           margins, s))
    want = s * cos.copy()
    for i, y in enumerate(labels):
        theta, m = np.arccos(np.clip(cos[i, y], -1 + 1e-7, 1 - 1e-7)), margins[y]
        want[i, y] = s * (np.cos(theta + m) if theta + m < np.pi else cos[i, y] - m * np.sin(m))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The layer + the loss's margin give the logits of the one-function form on the same centres.
    whole = subcenter_arcface_logits(keras.ops.convert_to_tensor(e), keras.ops.convert_to_tensor(w),
                                     keras.ops.convert_to_tensor(labels), margins, s)
    np.testing.assert_allclose(got, np.asarray(whole), rtol=1e-4, atol=1e-4)


def test_sglobal_is_the_papers_head_trained_on_eq_8_and_scored_by_the_head(backend):
    import keras

    from whale.models import build_branch
    from whale.objectives import build_objective, make_scorer
    from whale.objectives.objective import SimilarityGlobalLoss

    keras.utils.set_random_seed(0)
    objective = build_objective(_cfg(objective={"name": "sglobal", "margin": 0.5}).objective)
    branch = build_branch("tiny", (32, 32, 1))
    model = objective.build(branch)
    objective.compile(model, lr=1e-3)
    assert isinstance(model.loss, SimilarityGlobalLoss) and model.loss.m == 0.5 and model.loss.lam == 1.0
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(0, 255, (6, 32, 32, 1)).astype(np.float32) for _ in range(2))
    y = np.array([[1], [0], [1], [0], [1], [0]], np.float32)
    assert np.isfinite(model.train_on_batch([a, b], y)).all()
    p = np.asarray(model.predict([a, b], verbose=0)).ravel()
    fa, fb = (np.asarray(branch.predict(x, verbose=0)) for x in (a, b))
    np.testing.assert_allclose(make_scorer(model).pairs(fa, fb), p, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def competition(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("comp") / "data", n_ids=16, seed=4, size=80, progress=False)


def _config_file(tmp_path, objective: str) -> Path:
    from conftest import TINY_RUN
    from whale.config import config_from_dict

    stages = [{"epochs": 2, "k": 1000.0, "lr": 1e-3, "image_size": 32},
              {"epochs": 1, "k": 0.5, "lr": 1e-3, "image_size": 40}]  # a resize: the objective's top carried over
    cfg = config_from_dict({"name": f"obj-{objective}", "seed": 0, **TINY_RUN, "objective": objective,
                            "stages": stages})
    path = tmp_path / f"{objective}.yaml"
    path.write_text(cfg.to_yaml())
    return path


@pytest.mark.parametrize("objective", ["probabilistic", pytest.param("contrastive", marks=pytest.mark.slow),
                                       pytest.param("triplet", marks=pytest.mark.slow),
                                       pytest.param("arcface", marks=pytest.mark.slow),  # resumes in test_faults
                                       pytest.param("global", marks=pytest.mark.slow),
                                       pytest.param("tgloss", marks=pytest.mark.slow),
                                       pytest.param("sglobal", marks=pytest.mark.slow)])
def test_each_objective_trains_pauses_resumes_and_scores_in_0_1(competition, tmp_path, objective):
    run = tmp_path / "run"
    base = [sys.executable, str(ROOT / "run_fold.py"), "--config", str(_config_file(tmp_path, objective)),
            "--fold", "0", "--data", str(competition), "--out", str(run), "--verbose", "0"]
    out = subprocess.run(base + ["--max-epochs", "2"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-3000:]  # paused
    out = subprocess.run(base + ["--resume"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    from whale.inference.scorefile import load_score_file

    for split in ("val", "test"):
        s = load_score_file(run / "scores" / f"{split}.npz").scores.astype(np.float32)
        assert s.size and np.isfinite(s).all() and s.min() >= 0 and s.max() <= 1
        assert s.std() > 0  # a trained embedding, not a constant


def test_an_ensemble_of_the_head_and_an_embedding_objective_makes_a_valid_submission(competition, tmp_path):
    from whale.submission import check_submission

    runs = []
    for objective in ("head", "triplet"):
        run = tmp_path / objective
        cmd = [sys.executable, str(ROOT / "run_fold.py"), "--config", str(_config_file(tmp_path, objective)),
               "--fold", "1", "--data", str(competition), "--out", str(run), "--verbose", "0"]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        runs.append(str(run))
    sub = tmp_path / "sub.csv"
    cmd = [sys.executable, str(ROOT / "ensemble.py"), *runs, "--tune", "--out", str(sub),
           "--sample", str(competition / "sample_submission.csv")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert check_submission(sub, competition / "sample_submission.csv") == []


def test_arcface_defaults_are_the_happywhale_2022_winners():
    from whale.config.objectives import OBJECTIVE_PARAMS
    from whale.objectives.losses import HAPPYWHALE_2022_MARGINS

    table = {key: spec[3] for key, spec in OBJECTIVE_PARAMS["arcface"].items()}
    assert (table["margin_a"], table["margin_p"], table["margin_c"]) == tuple(HAPPYWHALE_2022_MARGINS.values())
    assert (table["subcenters"], table["scale"]) == (2, 20.96)


def test_a_run_never_starts_from_a_run_of_another_objective():
    from whale.core.errors import ConfigError
    from whale.training.pretrain import check_same_start

    stages = [{"epochs": 1, "k": 1.0, "lr": 1e-3, "image_size": 32}] * 2
    head, triplet = _cfg(stages=stages), _cfg(stages=stages, objective="triplet")
    check_same_start(head, head, 1, "x")
    with pytest.raises(ConfigError, match="objective"):
        check_same_start(triplet, head, 1, "x")


def test_stages_in_steps_give_identity_objectives_the_same_optimiser_steps():
    from whale.training.schedule import sized_config

    stages = [{"steps": 1000, "k": 1.0, "lr": 1e-3, "image_size": 32}]
    head, triplet = _cfg(stages=stages, batch_size=32), _cfg(stages=stages, batch_size=32, objective="triplet")
    # 200 images: a pair epoch is 400 pairs = 13 steps, a P x K epoch about 200 images = 7 steps.
    assert sized_config(head, {"main": 200}).stages[0].epochs == 77
    assert sized_config(triplet, {"main": 200}).stages[0].epochs == 143
