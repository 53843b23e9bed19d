"""whale.objectives.miners (in-batch triplet miners) and the triplet loss's ``miner`` and ``reduction``.

Each miner against a brute-force NumPy loop on small batches with tied distances (integer embeddings, exact in
float32), a batch of one id, ids with one image (anchors without positives) and a batch without positive pairs;
seed 002's loss (``semihard`` + ``mean``) bit for bit against the implementation it replaced, value and gradient;
finite gradients in a compiled train step; the config keys and the Keras loss's config. Marked ``backend``.
"""
import itertools
from pathlib import Path

import numpy as np
import pytest

from whale.objectives import globalloss as G
from whale.objectives import losses as L
from whale.objectives import miners as M

ROOT = Path(__file__).resolve().parents[1]


def _np(x):
    from keras import ops

    return np.asarray(ops.convert_to_numpy(x))


# ------------------------------------------------------------------------------ batches
def _batches():
    rng = np.random.default_rng(43)
    out = [
        ("pk", np.repeat(np.arange(3), 3), rng.normal(size=(9, 4))),
        ("ties", np.array([0, 0, 1, 1, 2, 2, 0]), rng.integers(-1, 2, size=(7, 2)).astype(float)),
        ("one_id", np.zeros(5, int), rng.normal(size=(5, 3))),
        ("singletons", np.array([0, 0, 1, 2, 3, 1]), rng.normal(size=(6, 3))),  # ids 2, 3: anchors without positives
        ("no_pairs", np.arange(6), rng.normal(size=(6, 3))),
        ("float_labels", np.array([1.0, 2.0, 1.0, 2.0, 3.0]), rng.integers(0, 3, size=(5, 3)).astype(float)),
        ("identical", np.array([0, 0, 1, 1]), np.ones((4, 3))),
    ]
    for i in range(4):
        n = int(rng.integers(4, 11))
        out.append((f"random{i}", rng.integers(0, 3, n), rng.integers(-2, 3, size=(n, 3)).astype(float)))
    return [(name, labels, emb.astype(np.float32)) for name, labels, emb in out]


BATCHES = _batches()
IDS = [b[0] for b in BATCHES]
COMBOS = [(m, r) for m in M.MINERS for r in M.REDUCTIONS]


# ------------------------------------------------------------------------------ brute force
def bf_sq(emb):
    e = np.asarray(emb, np.float64)
    return np.array([[np.sum((e[i] - e[j]) ** 2) for j in range(len(e))] for i in range(len(e))])


def bf_triplets(labels, d, miner):
    """``{key: (d(a, p), d(a, n))}`` of the triplets ``miner`` selects, by loops: key ``(a, p, n)`` for ``all``,
    ``(a, p)`` for the miners that pick one negative per positive pair."""
    out = {}
    for a, p in itertools.permutations(range(len(labels)), 2):
        if labels[a] != labels[p]:
            continue
        negs = [n for n in range(len(labels)) if labels[n] != labels[a]]
        if not negs:
            continue
        if miner == "all":
            out.update({(a, p, n): (d[a, p], d[a, n]) for n in negs})
        elif miner == "hardest":
            out[a, p] = (d[a, p], min(d[a, n] for n in negs))
        else:  # semihard: the nearest strictly beyond the positive, else the farthest
            outside = [d[a, n] for n in negs if d[a, n] > d[a, p]]
            out[a, p] = (d[a, p], min(outside) if outside else max(d[a, n] for n in negs))
    return out


def bf_loss(labels, emb, margin, miner, reduction):
    terms = [max(0.0, dap - dan + margin) for dap, dan in bf_triplets(labels, bf_sq(emb), miner).values()]
    if reduction == "sum":
        return float(np.sum(terms))
    if reduction == "nonzero":
        terms = [t for t in terms if t > 0]
    return float(np.mean(terms)) if terms else 0.0


def _selected(mined, n):
    """A miner's answer as ``{(a, p): d_an}`` (per-pair miners) or ``{(a, p, n): (d_ap, d_an)}``, weights checked 0/1."""
    d_ap, d_an, weight = (_np(x) for x in mined)
    shape = np.broadcast_shapes(d_ap.shape, d_an.shape, weight.shape)
    d_ap, d_an, weight = (np.broadcast_to(x, shape) for x in (d_ap, d_an, weight))
    assert set(np.unique(weight)) <= {0.0, 1.0} and shape in ((n, n), (n, n, n))
    return {idx: (float(d_ap[idx]), float(d_an[idx])) for idx in zip(*np.nonzero(weight))}


# ------------------------------------------------------------------------------ miners against loops
@pytest.mark.parametrize("miner", M.MINERS)
@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_each_miner_selects_what_the_loop_selects(backend, miner, name, labels, emb):
    d = bf_sq(emb)
    got = _selected(M.get_miner(miner)(labels, d.astype(np.float32)), len(labels))
    want = bf_triplets(labels, d, miner)
    assert set(got) == set(want), name
    for key, (dap, dan) in want.items():
        assert got[key] == pytest.approx((dap, dan), abs=1e-5), (name, key)


@pytest.mark.backend  # also on JAX (make test); the loop comparisons run under TensorFlow
def test_semihard_and_hardest_on_a_hand_made_matrix(backend):
    # labels 0 0 1 2. (a=0, p=1): d(0,1) = 2, negatives at 3 and 5: semi-hard 3 (nearest beyond 2), hardest 3.
    # (a=1, p=0): d(1,0) = 2, negatives at 1 and 1.5: none beyond 2 -> semi-hard the farthest, 1.5; hardest 1.
    labels = np.array([0, 0, 1, 2])
    d = np.array([[0, 2, 3, 5], [2, 0, 1, 1.5], [3, 1, 0, 4], [5, 1.5, 4, 0]], np.float32)
    semi = _selected(M.semihard(labels, d), 4)
    hard = _selected(M.hardest(labels, d), 4)
    assert semi == {(0, 1): (2.0, 3.0), (1, 0): (2.0, 1.5)}
    assert hard == {(0, 1): (2.0, 3.0), (1, 0): (2.0, 1.0)}
    every = _selected(M.all_triplets(labels, d), 4)
    assert every == {(0, 1, 2): (2.0, 3.0), (0, 1, 3): (2.0, 5.0), (1, 0, 2): (2.0, 1.0), (1, 0, 3): (2.0, 1.5)}
    # semihard_negatives moved here; losses keeps the name
    assert L.semihard_negatives is M.semihard_negatives


@pytest.mark.backend  # also on JAX (make test); the loop comparisons run under TensorFlow
def test_a_tie_is_not_beyond_the_positive_and_one_id_selects_nothing(backend):
    labels = np.array([0, 0, 1])
    d = np.array([[0, 2, 2], [2, 0, 3], [2, 3, 0]], np.float32)
    assert _selected(M.semihard(labels, d), 3) == {(0, 1): (2.0, 2.0), (1, 0): (2.0, 3.0)}  # tie: the farthest, 2
    for miner in M.MINERS:
        assert _selected(M.get_miner(miner)(np.zeros(4), np.ones((4, 4), np.float32)), 4) == {}, miner


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="miner: expected one of semihard, hardest, all, received 'hard'"):
        M.get_miner("hard")
    with pytest.raises(ValueError, match="reduction: expected one of mean, sum, nonzero"):
        M.reduce_triplets(np.zeros(3, np.float32), np.ones(3, np.float32), "anchor")


# ------------------------------------------------------------------------------ the loss
@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_triplet_loss_matches_a_loop_for_every_miner_and_reduction(backend, name, labels, emb):
    for (miner, reduction), margin in itertools.product(COMBOS, (0.5, 2.0)):
        got = _np(L.triplet_loss(labels, emb, margin, miner=miner, reduction=reduction))
        assert got.shape == () and got.dtype == np.float32
        want = bf_loss(labels, emb, margin, miner, reduction)
        assert float(got) == pytest.approx(want, rel=1e-4, abs=1e-5), (name, miner, reduction, margin)


def _old_semihard_triplet_loss(labels, emb, margin=0.5):
    """The implementation ``semihard_triplet_loss`` had before the miners (losses.py), kept verbatim."""
    from keras import ops

    from whale.objectives.distances import off_diagonal, pairwise_sq_distances

    def same_id(y):
        y = ops.reshape(ops.convert_to_tensor(y), (-1,))
        return ops.cast(ops.equal(ops.expand_dims(y, 1), ops.expand_dims(y, 0)), "float32")

    def semihard_negatives(y, sq_dist):
        sq_dist = ops.cast(ops.convert_to_tensor(sq_dist), "float32")
        neg = 1.0 - same_id(y)
        big = ops.max(sq_dist) + 1.0
        d_an = ops.expand_dims(sq_dist, 1)
        d_ap = ops.expand_dims(sq_dist, 2)
        outside = ops.logical_and(ops.greater(d_an, d_ap), ops.expand_dims(neg, 1) > 0.5)
        nearest_outside = ops.min(ops.where(outside, d_an, big), axis=2)
        has_outside = ops.any(outside, axis=2)
        has_neg = ops.max(neg, axis=1, keepdims=True) > 0.5
        farthest = ops.max(ops.where(neg > 0.5, sq_dist, -1.0), axis=1, keepdims=True)
        farthest = ops.where(has_neg, farthest, 0.0)
        return ops.where(has_outside, nearest_outside, ops.broadcast_to(farthest, ops.shape(sq_dist)))

    sq = pairwise_sq_distances(emb)
    same = same_id(labels)
    has_neg = ops.max(1.0 - same, axis=1, keepdims=True)
    positives = same * off_diagonal(ops.shape(sq)[0])
    loss = ops.relu(sq - semihard_negatives(labels, sq) + margin) * positives * has_neg
    return ops.sum(loss) / ops.maximum(ops.sum(positives), 1.0)


def _old_ratio_triplet_loss(labels, emb, m=0.01, reduction="anchor"):
    """``globalloss.ratio_triplet_loss`` before it read the ``all`` miner, kept verbatim."""
    from keras import ops

    from whale.objectives.distances import off_diagonal, pairwise_sq_distances, safe_sqrt

    dist = safe_sqrt(pairwise_sq_distances(emb))
    y = ops.reshape(ops.convert_to_tensor(labels), (-1,))
    same = ops.cast(ops.equal(ops.expand_dims(y, 1), ops.expand_dims(y, 0)), "float32")
    positives = same * off_diagonal(ops.shape(dist)[0])
    valid = ops.expand_dims(positives, 2) * ops.expand_dims(1.0 - same, 1)
    ratio = ops.expand_dims(dist, 1) / (ops.expand_dims(dist, 2) + m)
    loss = ops.relu(1.0 - ratio) * valid
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "mean":
        return ops.sum(loss) / ops.maximum(ops.sum(valid), 1.0)
    per_anchor = ops.sum(loss, axis=(1, 2)) / ops.maximum(ops.sum(valid, axis=(1, 2)), 1.0)
    return ops.sum(per_anchor)


def _value_and_grad(fn, labels, emb):
    """``fn(labels, emb)`` and its gradient with respect to ``emb``, by the backend's own differentiation."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        value, grad = jax.value_and_grad(lambda e: fn(labels, e))(np.asarray(emb, np.float32))
        return np.asarray(value), np.asarray(grad)
    import tensorflow as tf

    e = tf.Variable(np.asarray(emb, np.float32))
    with tf.GradientTape() as tape:
        value = fn(labels, e)
    return value.numpy(), tape.gradient(value, e).numpy()


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_seed_002s_loss_is_bit_for_bit_what_it_was(backend, name, labels, emb):
    """``semihard`` + hinge + ``mean``: the same value and gradient as the implementation it replaced."""
    for margin in (0.5, 2.0):
        old_v, old_g = _value_and_grad(lambda y, e: _old_semihard_triplet_loss(y, e, margin), labels, emb)
        for fn in (lambda y, e: L.triplet_loss(y, e, margin),
                   lambda y, e: L.semihard_triplet_loss(y, e, margin),
                   lambda y, e: L.triplet_loss(y, e, margin, miner="semihard", reduction="mean")):
            new_v, new_g = _value_and_grad(fn, labels, emb)
            assert new_v == old_v, (name, margin)
            np.testing.assert_array_equal(new_g, old_g, err_msg=name)
            assert np.all(np.isfinite(new_g))


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_tglosss_ratio_triplet_term_on_the_all_miner_is_bit_for_bit_what_it_was(backend, name, labels, emb):
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-6)
    for reduction in G.REDUCTIONS:
        old = _value_and_grad(lambda y, e: _old_ratio_triplet_loss(y, e, 0.01, reduction), labels, emb)
        new = _value_and_grad(lambda y, e: G.ratio_triplet_loss(y, e, 0.01, reduction=reduction), labels, emb)
        assert new[0] == old[0], (name, reduction)
        np.testing.assert_array_equal(new[1], old[1], err_msg=f"{name} {reduction}")


@pytest.mark.parametrize("miner,reduction", COMBOS)
def test_every_miner_and_reduction_has_a_finite_gradient(backend, miner, reduction):
    rng = np.random.default_rng(7)
    for labels, emb in ((np.repeat(np.arange(4), 3), rng.normal(size=(12, 5))),
                        (np.array([0, 0, 1, 1, 2]), np.ones((5, 5))),  # identical embeddings: every distance 0
                        (np.zeros(4), rng.normal(size=(4, 5)))):
        value, grad = _value_and_grad(lambda y, e: L.triplet_loss(y, e, 0.5, miner=miner, reduction=reduction),
                                      labels, emb)
        assert np.isfinite(value) and grad.shape == emb.shape and np.all(np.isfinite(grad)), (miner, reduction)


@pytest.mark.backend  # also on JAX (make test); the loop comparisons run under TensorFlow
def test_a_compiled_train_step_with_every_miner_and_reduction_stays_finite_and_learns(backend):
    """Compiled SGD steps on the sum of the nine losses (one compilation), through ``TripletLoss``, on unit
    embeddings (the ``sum`` reductions are large on unbounded ones)."""
    import keras

    from whale.objectives.triplet import TripletLoss

    keras.utils.set_random_seed(0)
    inp = keras.Input((6,))
    model = keras.Model(inp, keras.layers.UnitNormalization()(keras.layers.Dense(4)(inp)))
    parts = [TripletLoss(0.5, m, r) for m, r in COMBOS]
    model.compile(optimizer=keras.optimizers.SGD(0.001), loss=lambda yt, yp: sum(p(yt, yp) for p in parts))
    rng = np.random.default_rng(8)
    labels = np.repeat(np.arange(4), 4).astype(np.float32)
    x = (rng.normal(size=(16, 6)) + 2 * np.eye(4)[labels.astype(int)] @ rng.normal(size=(4, 6))).astype(np.float32)
    values = [float(np.asarray(model.train_on_batch(x, labels))) for _ in range(20)]
    assert all(np.isfinite(values)) and all(np.all(np.isfinite(w)) for w in model.get_weights())
    assert values[-1] < values[0]


# ------------------------------------------------------------------------------ the Keras loss and the config
@pytest.mark.backend  # also on JAX (make test); the loop comparisons run under TensorFlow
def test_triplet_loss_config_round_trips_and_an_old_config_loads_with_the_defaults(backend):
    import keras

    from whale.objectives.triplet import TripletLoss

    loss = TripletLoss(0.3, "hardest", "nonzero")
    config = loss.get_config()
    assert (config["margin"], config["miner"], config["triplet_reduction"]) == (0.3, "hardest", "nonzero")
    back = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(back, TripletLoss) and (back.margin, back.miner, back.triplet_reduction) == (0.3, "hardest",
                                                                                                   "nonzero")
    # A model saved before miners: its loss's config has Keras's own keys and the margin only.
    old = {"name": "triplet", "reduction": "sum_over_batch_size", "dtype": None, "margin": 0.5}
    restored = TripletLoss.from_config(old)
    assert (restored.miner, restored.triplet_reduction) == ("semihard", "mean")
    labels = np.repeat(np.arange(3), 2).astype(np.float32)
    emb = np.random.default_rng(9).normal(size=(6, 4)).astype(np.float32)
    assert float(_np(restored(labels, emb))) == float(_np(L.semihard_triplet_loss(labels, emb, 0.5)))
    with pytest.raises(ValueError, match="miner: expected one of semihard, hardest, all"):
        TripletLoss(miner="random")
    with pytest.raises(ValueError, match="triplet_reduction"):
        TripletLoss(triplet_reduction="anchor")


def _cfg(**over):
    from whale.config import config_from_dict

    return config_from_dict({"name": "t", "stages": [{"epochs": 1, "k": 1.0, "lr": 1e-3, "image_size": 32}], **over})


def test_config_takes_miner_and_reduction_keeps_old_hashes_and_builds_the_loss():
    from whale.config import config_from_dict, config_hash, load_config
    from whale.objectives import build_objective
    from whale.config.overrides import overrides

    t = _cfg(objective="triplet")
    assert (t.objective["miner"], t.objective["reduction"]) == ("semihard", "mean")
    assert "miner" not in t.to_dict()["objective"] and "reduction" not in t.to_dict()["objective"]
    assert config_hash(_cfg(objective={"name": "triplet", "miner": "semihard", "reduction": "mean"})) == config_hash(t)
    demo = ROOT / "configs" / "demo.yaml"
    set_ = load_config(demo, overrides(["objective.name=triplet", "objective.miner=hardest",
                                        "objective.reduction=nonzero"]))
    assert (set_.objective["miner"], set_.objective["reduction"]) == ("hardest", "nonzero")
    assert config_from_dict(set_.to_dict()) == set_ and set_.to_dict()["objective"]["miner"] == "hardest"
    assert config_hash(set_) != config_hash(load_config(demo, overrides(["objective=triplet"])))
    mapping = load_config(demo, overrides(["objective={name: triplet, miner: all}"]))
    assert mapping.objective["miner"] == "all"
    loss = build_objective(set_.objective).loss()
    assert (loss.miner, loss.triplet_reduction, loss.margin) == ("hardest", "nonzero", 0.5)


@pytest.mark.parametrize("over,message", [
    ({"objective": {"name": "triplet", "miner": "hard"}}, "objective.miner: expected one of semihard, hardest, all"),
    ({"objective": {"name": "triplet", "reduction": "anchor"}}, "objective.reduction: expected one of mean, sum, "
                                                                 "nonzero"),
    ({"objective": {"name": "global", "miner": "all"}}, "objective.miner: unknown key"),
])
def test_config_refuses_an_unknown_miner_naming_the_key(over, message):
    from whale.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        _cfg(**over)
