"""Seed 004's similarity models against NumPy formulas: values, losses, gradients, matrices, files."""

import numpy as np
import pytest

pytestmark = pytest.mark.backend

from whale.objectives import similarity as sim  # noqa: E402


def _np_distance(kind, h1, h2, alpha):
    diff = h1.astype(np.float64) - h2.astype(np.float64)
    per = diff ** 2 if kind in sim.SQUARED else np.abs(diff)
    return (alpha * per).sum(-1)


def _np_g(kind, h1, h2, alpha, beta=sim.DEFAULT_BETA, delta=sim.DEFAULT_DELTA):
    """Table 3.1 written out (float64); the baselines' exp(-distance)."""
    d = _np_distance(kind, h1, h2, alpha)
    return {
        "gaussian": lambda: np.exp(-d),
        "flattened_gaussian": lambda: (beta + 1) / (beta + np.exp(d)),
        "laplacian": lambda: np.exp(-d),
        "prob_clipped_l1": lambda: np.exp(-d) / (np.exp(-d) + np.exp(-np.maximum(0, delta - d))),
        "cauchy": lambda: 1 / (1 + d),
        "clipped_l1": lambda: np.exp(-d),
        "drlim": lambda: np.exp(-np.sqrt(d)),
    }[kind]()


def _pairs(n=64, dim=6, scale=0.5, seed=0):
    rng = np.random.default_rng(seed)
    h1 = rng.normal(0, scale, (n, dim)).astype(np.float32)
    h2 = rng.normal(0, scale, (n, dim)).astype(np.float32)
    alpha = rng.uniform(0.2, 2.0, dim).astype(np.float32)
    return h1, h2, alpha


@pytest.mark.parametrize("kind", sim.KINDS)
def test_g_matches_table_3_1_and_lies_in_0_1(backend, kind):
    h1, h2, alpha = _pairs()
    alpha_used = alpha if kind in sim.SIMILARITIES else np.ones_like(alpha)
    g = np.asarray(sim.similarity(kind, h1, h2, alpha_used, beta=1.5, delta=2.5))
    want = _np_g(kind, h1, h2, alpha_used, beta=1.5, delta=2.5)
    assert g.dtype == np.float32 and g.shape == (64,)
    np.testing.assert_allclose(g, want, rtol=2e-5, atol=1e-7)
    assert np.all(g > 0) and np.all(g <= 1)
    # the same pair, both ways round (symmetry of Section 3.1)
    np.testing.assert_allclose(np.asarray(sim.similarity(kind, h2, h1, alpha_used, 1.5, 2.5)), g, rtol=1e-6)


@pytest.mark.parametrize("kind", sim.KINDS)
def test_g_is_one_at_equal_embeddings_where_the_formula_says_so(backend, kind):
    h1, _, alpha = _pairs()
    g = np.asarray(sim.similarity(kind, h1, h1, alpha, delta=2.0))
    want = 1 / (1 + np.exp(-2.0)) if kind == "prob_clipped_l1" else 1.0
    np.testing.assert_allclose(g, want, rtol=1e-6)
    # far apart: still > 0 (float32 underflow floored at G_MIN)
    far = np.asarray(sim.similarity(kind, h1, h1 + 100.0, alpha))
    assert np.all(far > 0) and np.all(far < 1e-2)


@pytest.mark.parametrize("kind", sim.KINDS)
def test_pair_loss_is_the_bce_of_g_or_the_baselines_own_cost(backend, kind):
    h1, h2, alpha = _pairs(dim=4, scale=0.3)
    same = (np.arange(64) % 2).astype(np.float32)
    got = np.asarray(sim.pair_loss(kind, same, h1, h2, alpha, beta=2.0, delta=1.5, margin=0.8))
    if kind == "clipped_l1":
        d = np.abs(h1.astype(np.float64) - h2).sum(-1)
        want = np.where(same == 1, d, np.maximum(0, 1.5 - d))
    elif kind == "drlim":
        D = np.sqrt(((h1.astype(np.float64) - h2) ** 2).sum(-1))
        want = np.where(same == 1, D ** 2 / 2, np.maximum(0, 0.8 - D) ** 2 / 2)
    else:
        g = _np_g(kind, h1, h2, alpha, beta=2.0, delta=1.5)
        want = -(same * np.log(g) + (1 - same) * np.log(1 - g))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_bce_keeps_log_g_exact_for_a_similar_pair_far_apart(backend):
    h1 = np.zeros((1, 3), np.float32)
    h2 = np.full((1, 3), 10.0, np.float32)
    alpha = np.ones(3, np.float32)
    # Gaussian: -log g = d = 300 exactly, where exp(-300) underflows float32
    np.testing.assert_allclose(np.asarray(sim.pair_loss("gaussian", [1.0], h1, h2, alpha)), [300.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(sim.pair_loss("cauchy", [1.0], h1, h2, alpha)), [np.log1p(300.0)], rtol=1e-6)


@pytest.mark.parametrize("kind", sim.KINDS)
def test_gradients_are_finite_at_equal_embeddings(backend, kind):
    import keras

    h = np.array([[0.3, -0.2, 0.0, 1.0]], np.float32)
    layer = sim.SimilarityModel(kind, dim=4)
    for same in (0.0, 1.0):
        grads = _grads(layer, lambda h1, h2, s=same: keras.ops.sum(layer.loss([s], h1, h2)), h, h.copy())
        for g in grads:
            assert np.all(np.isfinite(g)), (kind, same, g)


def _grads(layer, loss_fn, h1, h2):
    """Gradients of ``loss_fn(h1, h2)`` w.r.t. h1, h2 and the layer's weights, on this backend."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        weights = [w.value for w in layer.trainable_weights]

        def pure(h1, h2, weights):
            mapping = list(zip(layer.trainable_weights, weights))
            with keras.StatelessScope(state_mapping=mapping):
                return loss_fn(h1, h2)

        g1, g2, gw = jax.grad(pure, argnums=(0, 1, 2))(h1, h2, weights)
        return [np.asarray(g1), np.asarray(g2)] + [np.asarray(x) for x in gw]
    import tensorflow as tf

    t1, t2 = tf.constant(h1), tf.constant(h2)
    with tf.GradientTape() as tape:
        tape.watch([t1, t2])
        loss = loss_fn(t1, t2)
    grads = tape.gradient(loss, [t1, t2] + [w.value for w in layer.trainable_weights])
    return [np.asarray(g) for g in grads]


def test_alpha_stays_positive_after_a_step_that_pushes_it_negative(backend):
    import keras

    layer = sim.SimilarityModel("cauchy", dim=3, alpha_init=0.5)
    h1 = np.zeros((4, 3), np.float32)
    h2 = np.full((4, 3), 1.0, np.float32)
    # similar pairs far apart: the loss falls as alpha falls, so the step pushes alpha down
    loss_fn = lambda a, b: keras.ops.sum(layer.loss([1.0] * 4, a, b))  # noqa: E731
    g_log_alpha = _grads(layer, loss_fn, h1, h2)[2]
    assert np.all(g_log_alpha > 0)
    alpha0 = np.asarray(layer.alpha)
    # a raw step on alpha of this size would take it to alpha0 - 10 * 0.5 < 0
    opt = keras.optimizers.SGD(learning_rate=10.0)
    opt.apply_gradients([(keras.ops.convert_to_tensor(g_log_alpha), layer.log_alpha)])
    alpha1 = np.asarray(layer.alpha)
    assert np.all(alpha1 < alpha0) and np.all(alpha1 > 0)


@pytest.mark.parametrize("kind", sim.KINDS)
def test_similarity_matrix_equals_the_pairwise_formula(kind):
    rng = np.random.default_rng(1)
    A = rng.normal(0, 0.4, (23, 5)).astype(np.float32)
    B = rng.normal(0, 0.4, (17, 5)).astype(np.float32)
    alpha = rng.uniform(0.3, 3.0, 5).astype(np.float32)
    got = sim.similarity_matrix(kind, A, B, alpha, beta=0.7, delta=3.0, block=4)  # 6 blocks, the last short
    want = np.array([[_np_g(kind, a[None], b[None], alpha, beta=0.7, delta=3.0)[0] for b in B] for a in A])
    assert got.dtype == np.float32 and got.shape == (23, 17)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert np.all(got > 0) and np.all(got <= 1)


def test_similarity_matrix_checks_its_inputs():
    with pytest.raises(ValueError, match=r"A \[n, D\] and B \[m, D\]"):
        sim.similarity_matrix("cauchy", np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="3 positive weights"):
        sim.similarity_matrix("cauchy", np.zeros((2, 3)), np.zeros((2, 3)), alpha=[1, 0, 1])
    with pytest.raises(ValueError, match="expected one of gaussian"):
        sim.similarity_matrix("l2", np.zeros((2, 3)), np.zeros((2, 3)))


@pytest.mark.parametrize("kind", ["cauchy", "prob_clipped_l1", "drlim"])
def test_layer_round_trips_through_a_keras_file_in_safe_mode(backend, kind, tmp_path):
    import keras

    h1_in, h2_in = keras.Input((6,)), keras.Input((6,))
    layer = sim.SimilarityModel(kind, dim=6, beta=1.5, delta=2.5, margin=0.9, alpha_init=0.8, name="sim")
    model = keras.Model([h1_in, h2_in], layer([h1_in, h2_in]))
    if layer.log_alpha is not None:
        layer.log_alpha.assign(np.linspace(-1, 1, 6).astype(np.float32))
    h1, h2, _ = _pairs(n=8, dim=6)
    before = np.asarray(model.predict([h1, h2], verbose=0))
    assert before.shape == (8, 1)
    path = tmp_path / "sim.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(np.asarray(loaded.predict([h1, h2], verbose=0)), before)
    cfg = loaded.get_layer("sim").get_config()
    assert (cfg["kind"], cfg["dim"], cfg["beta"], cfg["delta"], cfg["margin"], cfg["alpha_init"]) == \
        (kind, 6, 1.5, 2.5, 0.9, 0.8)


def test_layer_logit_output_gives_the_bce_through_keras(backend):
    import keras

    h1, h2, _ = _pairs(n=16, dim=4)
    same = (np.arange(16) % 2).astype(np.float32)
    layer = sim.SimilarityModel("flattened_gaussian", dim=4, beta=3.0, returns="logit")
    z = layer([h1, h2])
    bce = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)(same[:, None], z)
    np.testing.assert_allclose(np.asarray(bce), np.asarray(layer.loss(same, h1, h2)), rtol=1e-5, atol=1e-6)


def test_layer_refuses_bad_arguments():
    with pytest.raises(ValueError, match="expected one of"):
        sim.SimilarityModel("student_t", dim=4)
    with pytest.raises(ValueError, match="beta: expected > 0"):
        sim.SimilarityModel("flattened_gaussian", dim=4, beta=0.0)
    with pytest.raises(ValueError, match="has no log-odds"):
        sim.SimilarityModel("drlim", dim=4, returns="logit")
