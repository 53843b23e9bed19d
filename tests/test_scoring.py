"""whale.scoring: exact head scoring vs head.predict, pruned mining rules, streaming top-k vs dense."""
import numpy as np
import pytest

from whale import NEW_WHALE
from whale.mining import mine_negatives, validate_negative_pairs
from whale.ranking import predict_top5, top_id_scores

pytestmark = pytest.mark.backend


@pytest.fixture(scope="module")
def heads(backend):
    import keras

    from whale.models import build_head

    keras.utils.set_random_seed(0)
    d = 16
    h0 = build_head(d, mid=8, hidden=0)
    h1 = build_head(d, mid=8, hidden=1)
    h2 = build_head(d, mid=4, hidden=[6, 3])
    return d, {0: h0, 1: h1, 2: h2}


def _feats(rng, n, d):
    # Non-negative like max-pooled ReLU activations, with some larger values.
    return np.maximum(rng.normal(size=(n, d)), 0).astype(np.float32) * 1.5


def _dense_ref(head, fa, fb):
    ia = np.repeat(np.arange(len(fa)), len(fb))
    ib = np.tile(np.arange(len(fb)), len(fa))
    out = head.predict([fa[ia], fb[ib]], batch_size=2048, verbose=0)
    return out.reshape(len(fa), len(fb))


@pytest.mark.parametrize("hidden", [0, 1, 2])
def test_matrix_equals_head_predict(heads, hidden):
    from whale.models import HeadScorer

    d, hs = heads
    head = hs[hidden]
    rng = np.random.default_rng(1)
    fa, fb = _feats(rng, 23, d), _feats(rng, 31, d)
    scorer = HeadScorer(head, tile=(8, 16))
    assert scorer.exact_formula
    ref_ab = _dense_ref(head, fa, fb)
    ref_aa = _dense_ref(head, fa, fa)
    for block in [(8, 16), (4, 8), 5]:
        got = scorer.matrix(fa, fb, block=block, progress=False)
        assert got.dtype == np.float32 and got.shape == (23, 31)
        np.testing.assert_allclose(got, ref_ab, atol=1e-5, rtol=0)
        sym = scorer.matrix(fa, block=block, progress=False)
        np.testing.assert_allclose(sym, ref_aa, atol=1e-5, rtol=0)
        assert np.array_equal(sym, sym.T)
    half = scorer.matrix(fa, fb, dtype=np.float16, progress=False)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half.astype(np.float32), ref_ab, atol=1e-3, rtol=0)
    pairs = scorer.pairs(fa[:20], fb[:20])
    np.testing.assert_allclose(pairs, np.diag(ref_ab[:20, :20]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("hidden", [0, 2])
def test_new_weights_reuse_the_compiled_formula_and_score_their_own_head(backend, hidden):
    """A training run builds a scorer for a new head every epoch: same shapes, new weights.
    The second scorer compiles nothing new and scores with its own weights, not the first's."""
    import keras

    from whale.models import HeadScorer, build_head
    from whale.models import scorer as scorer_module

    d, rng = 12, np.random.default_rng(3)
    fa, fb = _feats(rng, 9, d), _feats(rng, 14, d)
    heads, got = [], []
    for seed in (10, 11):
        keras.utils.set_random_seed(seed)
        head = build_head(d, mid=5, hidden=[4, 3] if hidden else 0)
        heads.append(head)
        scorer = HeadScorer(head, tile=(8, 8))
        got.append(scorer.matrix(fa, fb, progress=False))
        if seed == 10:
            compiled = len(scorer_module._FORMULAS)
    assert len(scorer_module._FORMULAS) == compiled
    for head, m in zip(heads, got):
        np.testing.assert_allclose(m, _dense_ref(head, fa, fb), atol=1e-5, rtol=0)
    assert np.abs(got[0] - got[1]).max() > 1e-3  # different weights, different scores
    folded = HeadScorer(heads[1], tile=(8, 8), constants=True).matrix(fa, fb, progress=False)
    np.testing.assert_allclose(folded, got[1], atol=1e-6, rtol=0)
    assert len(scorer_module._FORMULAS) == compiled  # constants: compiled per scorer, not shared


def test_symmetric_equals_full_and_counts_upper_triangle(heads):
    from whale.models import HeadScorer

    d, hs = heads
    scorer = HeadScorer(hs[0], tile=(4, 8))
    f = _feats(np.random.default_rng(2), 21, d)
    full = scorer.matrix(f, f, progress=False)
    scorer.pairs_computed = 0
    sym = scorer.matrix(f, progress=False)
    np.testing.assert_allclose(sym, full, atol=1e-6, rtol=0)
    symmetric_count = scorer.pairs_computed
    scorer.pairs_computed = 0
    scorer.matrix(f, f, progress=False)
    assert scorer.pairs_computed == 21 * 21  # the counter counts every pair of a full matrix once
    # The symmetric matrix computes each row tile from its first row on: at least the upper
    # triangle with the diagonal, and fewer than the full matrix.
    assert 21 * 22 // 2 <= symmetric_count < 21 * 21


def test_generic_path_matches(heads):
    from whale.models import HeadScorer

    d, hs = heads
    scorer = HeadScorer(hs[1], tile=(4, 8))
    scorer.exact_formula = False  # force the Keras-model path
    scorer._fns.clear()
    f = _feats(np.random.default_rng(3), 9, d)
    np.testing.assert_allclose(scorer.matrix(f, progress=False), _dense_ref(hs[1], f, f), atol=1e-5)


def _ids(rng, n, n_ids):
    ids = np.array([f"w{i % n_ids}" for i in range(n)])
    return ids[rng.permutation(n)]


def test_candidates_rules():
    from whale.mining import candidates

    rng = np.random.default_rng(4)
    f = _feats(rng, 60, 32)
    f[0] = 0.0  # an all-zero feature vector must not break the cosine
    ids = _ids(rng, 60, 12)
    rows, cols = candidates(f, ids, m=5, n_random=3, rng=rng)
    assert (ids[rows] != ids[cols]).all()
    keys = rows * 60 + cols
    assert np.array_equal(keys, np.unique(keys))
    counts = np.bincount(rows, minlength=60)
    assert counts.min() >= 5 and counts.max() <= 8
    # Top-5 by cosine of each row are all present.
    fn = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
    sim = fn @ fn.T
    sim[ids[:, None] == ids[None, :]] = -np.inf
    top = np.argsort(-sim, axis=1)[:, :5]
    assert np.isin(np.arange(60)[:, None] * 60 + top, keys)[1:].all()  # row 0: all tied
    assert counts[0] >= 5


def test_mine_pruned_rules_and_full_candidates_equal_dense(heads):
    from whale.mining import mine_pruned
    from whale.models import HeadScorer

    d, hs = heads
    scorer = HeadScorer(hs[0], tile=(8, 16))
    rng = np.random.default_rng(5)
    n = 40
    f = _feats(rng, n, d)
    ids = _ids(rng, n, 10)
    for k in (0.25, 1000.0):
        pairs = mine_pruned(scorer, f, ids, k, 3, np.random.default_rng(6), m=6)
        assert len(pairs) == 3
        validate_negative_pairs(pairs, ids, n)  # permutation, no same id, no repeats
    # m >= n: every other-id pair is a candidate, so with k=0 the optimum equals dense mining.
    S = scorer.matrix(f, progress=False)
    dense = mine_negatives(S, ids, 0.0, 3, np.random.default_rng(7))
    pruned = mine_pruned(scorer, f, ids, 0.0, 3, np.random.default_rng(7), m=n, n_random=0)
    for a, b in zip(dense, pruned):
        assert S[a[:, 0], a[:, 1]].sum() == pytest.approx(S[b[:, 0], b[:, 1]].sum(), abs=1e-4)


def test_large_k_spreads_over_all_images(heads):
    from whale.mining import candidate_counts, mine_pruned, proxy_scores
    from whale.models import HeadScorer

    d, hs = heads
    scorer = HeadScorer(hs[0], tile=(8, 16))
    rng = np.random.default_rng(8)
    n, m = 300, 10
    f = _feats(rng, n, d)
    ids = _ids(rng, n, 100)
    assert candidate_counts(m, 1000.0) == (1, m)
    assert candidate_counts(m, 0.25) == (m, 8)
    sim = proxy_scores(f, f)
    sim[ids[:, None] == ids[None, :]] = -np.inf
    topm = np.argsort(-sim, axis=1)[:, :m]
    in_top = lambda p: np.isin(p[:, 0] * n + p[:, 1], np.arange(n)[:, None] * n + topm).mean()
    hard = mine_pruned(scorer, f, ids, 0.0, 1, np.random.default_rng(9), m=m)[0]
    spread = mine_pruned(scorer, f, ids, 1000.0, 2, np.random.default_rng(9), m=m)
    # Uniform partners would fall in the top-m with probability ~ m / n = 3%.
    assert in_top(hard) > 0.25  # random head: proxy and head only loosely agree
    assert max(in_top(p) for p in spread) < 0.2  # 1 proxy + 10 random candidates per row
    # Partners of one epoch are spread over far more than the top-m neighbourhood.
    ranks = np.argsort(np.argsort(-sim, axis=1), axis=1)
    chosen_rank = ranks[spread[0][:, 0], spread[0][:, 1]]
    assert np.median(chosen_rank) > n / 4


@pytest.mark.parametrize("with_new_whale", [False, True])
def test_topk_stream_equals_dense(heads, with_new_whale):
    from whale.inference.topk import topk_stream
    from whale.models import HeadScorer
    from whale.ranking import topk_to_predictions

    d, hs = heads
    scorer = HeadScorer(hs[0], tile=(8, 16))
    rng = np.random.default_rng(10)
    fq, fg = _feats(rng, 19, d), _feats(rng, 45, d)
    gids = _ids(rng, 45, 12)
    if with_new_whale:
        gids[:5] = NEW_WHALE
        fg[0] = fq[0]  # the best match of query 0 is a new_whale image: must not be returned
    dense = scorer.matrix(fq, fg, progress=False)
    names, top_idx, top_vals = top_id_scores(dense, gids, k=7)
    for prune, sim in ((None, "auto"), (45, "auto"), (1000, "cosine"), (45, "euclidean"), (45, "dot")):
        got_names, got_vals = topk_stream(scorer, fq, fg, gids, k_ids=7, block=4, prune=prune,
                                          similarity=sim, progress=False)
        assert got_names.shape == (19, 7) and got_vals.dtype == np.float32
        assert NEW_WHALE not in set(got_names.ravel().tolist())
        assert np.array_equal(got_names, names[top_idx])
        np.testing.assert_allclose(got_vals, top_vals, atol=1e-6)
    got_names, got_vals = topk_stream(scorer, fq, fg, gids, k_ids=7, block=5, progress=False)
    assert topk_to_predictions(got_names, got_vals, 0.5) == predict_top5(dense, gids, 0.5)
    # Pruned well below the gallery (15 of 45 images per query): the head scores only those, so
    # every returned score is an exact head score of one of that id's images, never above the
    # id's exact maximum, and the best id agrees with exact scoring for nearly every query.
    per_id = {name: dense[:, gids == name] for name in names}
    got_names, got_vals = topk_stream(scorer, fq, fg, gids, k_ids=7, block=4, prune=15, progress=False)
    for q in range(len(fq)):
        for name, value in zip(got_names[q], got_vals[q]):
            exact = per_id[name][q]
            assert value <= exact.max() + 1e-6
            assert value == 0.0 or np.isclose(exact, value, atol=1e-6).any()
    agree = np.mean(got_names[:, 0] == names[top_idx[:, 0]])
    assert agree >= 0.9, f"pruned top-1 agrees with exact scoring for {agree:.0%} of queries"


def test_topk_stream_prune_pads_missing_ids(heads):
    from whale.inference.topk import topk_stream
    from whale.models import HeadScorer

    d, hs = heads
    scorer = HeadScorer(hs[0], tile=(8, 16))
    rng = np.random.default_rng(11)
    fq, fg = _feats(rng, 6, d), _feats(rng, 30, d)
    gids = _ids(rng, 30, 10)
    names, vals = topk_stream(scorer, fq, fg, gids, k_ids=5, prune=1, progress=False)
    assert (vals[:, 1:] == 0).all() and (vals[:, 0] > 0).all()
    assert all(len(set(r)) == 5 for r in names.tolist())


def test_compute_features_batches(backend):
    import keras

    from whale.inference.features import compute_features

    inp = keras.Input((4, 4, 1))
    branch = keras.Model(inp, keras.layers.GlobalMaxPooling2D()(keras.layers.Conv2D(3, 1)(inp)))
    x = np.random.default_rng(12).random((10, 4, 4, 1)).astype(np.float32)
    want = np.asarray(branch(x))
    got = compute_features(branch, x, batch_size=3, progress=False)
    np.testing.assert_allclose(got, want, atol=1e-6)
    got = compute_features(branch, [(x[:6], None), (x[6:], None)], n=10, progress=False)
    np.testing.assert_allclose(got, want, atol=1e-6)
    with pytest.raises(ValueError, match="expected 11 images"):
        compute_features(branch, [x], n=11, progress=False)


def test_compute_features_pads_short_batches_to_one_shape(backend):
    """pad=True (JAX's default): every batch reaches the branch at the pass's batch size (one compiled shape), and
    only each batch's own rows come back, equal to the unpadded features."""
    import keras

    from whale.inference.features import compute_features

    class Seen(keras.Model):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.shapes = inner, []

        def predict_on_batch(self, x):
            self.shapes.append(x.shape[0])
            return self.inner.predict_on_batch(x)

    inp = keras.Input((4, 4, 1))
    inner = keras.Model(inp, keras.layers.GlobalMaxPooling2D()(keras.layers.Conv2D(3, 1)(inp)))
    x = np.random.default_rng(14).random((10, 4, 4, 1)).astype(np.float32)
    want = np.asarray(inner(x))
    for pad, shapes in ((True, [4, 4, 4]), (False, [4, 4, 2])):
        branch = Seen(inner)
        got = compute_features(branch, x, batch_size=4, progress=False, pad=pad)
        assert branch.shapes == shapes and got.shape == (10, 3)
        np.testing.assert_allclose(got, want, atol=1e-6)
    branch = Seen(inner)  # a list of batches: padded to the first batch's size
    got = compute_features(branch, [x[:6], x[6:9], x[9:]], n=10, progress=False, pad=True)
    assert branch.shapes == [6, 6, 6]
    np.testing.assert_allclose(got, want, atol=1e-6)

    class Batches:  # a PyDataset-like pass of 3 images a batch: padded to its batch_size, not its first batch
        batch_size = 8

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return x[3 * i: 3 * i + 3]

    branch = Seen(inner)
    got = compute_features(branch, Batches(), n=10, progress=False, pad=True)
    assert branch.shapes == [8, 8, 8, 8]
    np.testing.assert_allclose(got, want, atol=1e-6)

    from whale.inference.features import ChainedBatches, ImageBatches

    # two passes as one (a gallery photo's views, whale.inference.runs): each part's short batch padded to 4
    parts = [ImageBatches(list(images), None, (4, 4), 4, plain=lambda m: m) for images in (x, x[:0], x[::-1])]
    chain = ChainedBatches(parts)
    assert len(chain) == 6 and chain.batch_size == 4
    np.testing.assert_array_equal(chain[3], x[9::-1][:4])
    with pytest.raises(IndexError, match="batch 6 out of range for 6 batches"):
        chain[6]
    branch = Seen(inner)
    got = compute_features(branch, chain, n=20, progress=False, pad=True)
    assert branch.shapes == [4] * 6
    np.testing.assert_allclose(got, np.concatenate([want, want[::-1]]), atol=1e-6)


def test_head_proxy_ranks_like_the_head(heads):
    from whale.models import HeadScorer

    d, hs = heads
    scorer = HeadScorer(hs[0], tile=(8, 16))
    rng = np.random.default_rng(13)
    fq, fg = _feats(rng, 10, d), _feats(rng, 50, d)
    g = scorer.proxy_features(fg, "g", rank=8)
    q = scorer.proxy_features(fq, "q", rank=8)
    assert g.shape == (50, 8 * d) and q.dtype == np.float32
    proxy = q @ g.T
    exact = scorer.matrix(fq, fg, progress=False)
    logit = np.log(exact) - np.log1p(-exact)
    for i in range(10):  # the proxy is the logit up to a per-row constant and a small error
        assert np.corrcoef(proxy[i], logit[i])[0, 1] > 0.9
    assert not HeadScorer(hs[1], tile=(8, 16)).has_head_proxy


def _mining_set(heads, seed, n, n_ids):
    """A contract head's scorer, ``[n, d]`` features and ids for the miner tests."""
    from whale.models import HeadScorer

    d, hs = heads
    rng = np.random.default_rng(seed)
    return HeadScorer(hs[0], tile=(8, 16)), _feats(rng, n, d), _ids(rng, n, n_ids)


def test_dense_miner_equals_algorithm_1_and_reports_the_mean_mined_score(heads):
    from whale.mining import DenseMiner, make_miner

    n = 30
    scorer, f, ids = _mining_set(heads, 11, n, 7)
    miner = make_miner("exact")
    assert isinstance(miner, DenseMiner)
    got = miner.mine(scorer, f, ids, 0.5, 3, np.random.default_rng(3))
    S = scorer.matrix(f, progress=False)
    want = mine_negatives(S, ids, 0.5, 3, np.random.default_rng(3))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    stats = miner.last_stats
    mined_scores = [S[i, j] for pairs in want for i, j in pairs]  # explicit loop
    assert stats.mean_score == pytest.approx(float(np.mean(mined_scores)), rel=1e-6)
    assert (stats.mode, stats.images, stats.epochs, stats.k, stats.fallback_pairs) == ("exact", n, 3, 0.5, 0)
    assert n * (n + 1) // 2 <= stats.pairs_scored < n * n  # the upper triangle by tiles, never all
    assert "negatives (exact)" in stats.line()


def test_pruned_miner_counts_fallback_pairs_outside_the_candidates(heads):
    from whale.mining import PrunedMiner, candidate_counts, candidates, make_miner, mine_negatives_sparse

    scorer, f, ids = _mining_set(heads, 12, 36, 6)
    fallbacks_seen = []
    for m, epochs in ((2, 4), (8, 2)):
        miner = make_miner("pruned", candidates=m)
        assert isinstance(miner, PrunedMiner)
        got = miner.mine(scorer, f, ids, 0.25, epochs, np.random.default_rng(9))
        # The same steps by hand, with the same generator.
        r2 = np.random.default_rng(9)
        m_top, n_random = candidate_counts(m, 0.25)
        rows, cols = candidates(f, ids, m=m_top, n_random=n_random, rng=r2, scorer=scorer)
        cand_scores = scorer.pairs_index(f, f, rows, cols)
        want = mine_negatives_sparse(rows, cols, cand_scores, ids, 0.25, epochs, r2)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        cand = {(int(i), int(j)): float(s) for i, j, s in zip(rows, cols, cand_scores)}
        fallback = [(int(i), int(j)) for pairs in want for i, j in pairs if (int(i), int(j)) not in cand]
        scores = [cand[(int(i), int(j))] if (int(i), int(j)) in cand
                  else float(scorer.pairs(f[i:i + 1], f[j:j + 1])[0]) for pairs in want for i, j in pairs]
        stats = miner.last_stats
        assert stats.fallback_pairs == len(fallback)
        assert stats.mean_score == pytest.approx(float(np.mean(scores)), rel=1e-5)
        assert "negatives (pruned)" in stats.line() and "fallback" in stats.line()
        fallbacks_seen.append(stats.fallback_pairs)
    assert fallbacks_seen[0] > 0 and fallbacks_seen[1] == 0  # 2 candidates cannot feed 4 epochs; 8 feed 2


def test_auto_miner_is_exact_up_to_its_threshold_and_pruned_above(heads):
    from whale.mining import AUTO_EXACT_MAX, AutoMiner, make_miner, mine_pruned

    scorer, f, ids = _mining_set(heads, 14, 30, 7)
    miner = make_miner("auto", candidates=4)
    assert isinstance(miner, AutoMiner) and miner.exact_max == AUTO_EXACT_MAX >= 1000
    assert miner.choose(AUTO_EXACT_MAX).mode == "exact" and miner.choose(AUTO_EXACT_MAX + 1).mode == "pruned"
    S = scorer.matrix(f, progress=False)
    got = miner.mine(scorer, f, ids, 0.5, 2, np.random.default_rng(3))  # 30 images: exact
    for a, b in zip(got, mine_negatives(S, ids, 0.5, 2, np.random.default_rng(3))):
        np.testing.assert_array_equal(a, b)
    assert miner.last_stats.mode == "exact" and "negatives (exact)" in miner.last_stats.line()
    small = AutoMiner(candidates=4, exact_max=29)  # the same 30 images above a lower line: pruned
    got = small.mine(scorer, f, ids, 0.5, 2, np.random.default_rng(3))
    for a, b in zip(got, mine_pruned(scorer, f, ids, 0.5, 2, np.random.default_rng(3), m=4)):
        np.testing.assert_array_equal(a, b)
    assert small.last_stats.mode == "pruned" and small.last_stats.images == 30


def test_make_miner_rejects_an_unknown_mode():
    from whale.mining import make_miner

    with pytest.raises(ValueError, match="exact, pruned, auto"):
        make_miner("greedy")
