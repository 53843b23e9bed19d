"""whale.objectives.losses and .globalloss against brute-force NumPy loops, hand-worked batches, and finite gradients.

Random batches include tied distances (integer embeddings, exact in float32), single-image ids,
and batches with no positive pair or no valid triplet. Marked ``backend``: ``make test`` runs it
again under JAX, where the compiled train step is ``jax.jit``.
"""
import itertools
import math

import numpy as np
import pytest

pytestmark = pytest.mark.backend

from whale.objectives import globalloss as G  # noqa: E402
from whale.objectives import losses as L  # noqa: E402


def _np(x):
    from keras import ops

    return np.asarray(ops.convert_to_numpy(x))


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ------------------------------------------------------------------------------ brute force
def bf_sq(emb):
    e = np.asarray(emb, np.float64)
    n = len(e)
    return np.array([[np.sum((e[i] - e[j]) ** 2) for j in range(n)] for i in range(n)])


def bf_semihard_choice(labels, d, a, p):
    negs = [n for n in range(len(labels)) if labels[n] != labels[a]]
    if not negs:
        return None
    outside = [d[a, n] for n in negs if d[a, n] > d[a, p]]
    return min(outside) if outside else max(d[a, n] for n in negs)


def bf_semihard_loss(labels, emb, margin):
    d = bf_sq(emb)
    terms = []
    for a, p in itertools.permutations(range(len(labels)), 2):
        if labels[a] != labels[p]:
            continue
        dn = bf_semihard_choice(labels, d, a, p)
        terms.append(0.0 if dn is None else max(0.0, d[a, p] - dn + margin))
    return float(np.mean(terms)) if terms else 0.0


def bf_global(labels, emb, t, lam):
    d = bf_sq(emb) / 4
    pos = [d[i, j] for i in range(len(labels)) for j in range(i + 1, len(labels)) if labels[i] == labels[j]]
    neg = [d[i, j] for i in range(len(labels)) for j in range(i + 1, len(labels)) if labels[i] != labels[j]]
    var = lambda v: float(np.var(v)) if v else 0.0  # noqa: E731  (population variance, ddof=0)
    hinge = max(0.0, np.mean(pos) - np.mean(neg) + t) if pos and neg else 0.0
    return var(pos) + var(neg) + lam * hinge


def bf_ratio(labels, emb, m, reduction):
    dist = np.sqrt(bf_sq(emb))
    per_anchor, every = [], []
    for a in range(len(labels)):
        mine = [max(0.0, 1 - dist[a, n] / (dist[a, p] + m))
                for p in range(len(labels)) if p != a and labels[p] == labels[a]
                for n in range(len(labels)) if labels[n] != labels[a]]
        every += mine
        per_anchor.append(np.mean(mine) if mine else 0.0)
    if reduction == "sum":
        return float(np.sum(every))
    if reduction == "mean":
        return float(np.mean(every)) if every else 0.0
    return float(np.sum(per_anchor))


def bf_triplet_choice(labels):
    """Seed 001's one triplet per anchor, by the rule of ``triplet_choice``'s docstring: ``{a: (p, n)}``."""
    n, out = len(labels), {}
    for a in range(n):
        after = [(a + k) % n for k in range(1, n)]
        positives = [j for j in after if labels[j] == labels[a]]
        negatives = [j for j in after if labels[j] != labels[a]]
        if positives and negatives:
            slot = sum(labels[j] == labels[a] for j in range(a)) % len(negatives)
            out[a] = (positives[0], negatives[slot])
    return out


def bf_global_triplet(labels, emb, t, lam):
    d = bf_sq(emb) / 4
    chosen = bf_triplet_choice(labels)
    if not chosen:
        return 0.0
    pos = [d[a, p] for a, (p, _) in chosen.items()]
    neg = [d[a, n] for a, (_, n) in chosen.items()]
    return float(np.var(pos) + np.var(neg) + lam * max(0.0, np.mean(pos) - np.mean(neg) + t))


def bf_chosen_ratio(labels, emb, m):
    dist = np.sqrt(bf_sq(emb))
    return float(sum(max(0.0, 1 - dist[a, n] / (dist[a, p] + m)) for a, (p, n) in bf_triplet_choice(labels).items()))


def bf_similarity_global(same, g, m, lam):
    pos = [x for s, x in zip(same, g) if s]
    neg = [x for s, x in zip(same, g) if not s]
    var = lambda v: float(np.var(v)) if v else 0.0  # noqa: E731
    hinge = max(0.0, m - (np.mean(pos) - np.mean(neg))) if pos and neg else 0.0
    return var(pos) + var(neg) + lam * hinge


def bf_arcface_logits(emb, centers, labels, margins, scale):
    e = _unit(np.asarray(emb, np.float64))
    c = np.asarray(centers, np.float64)
    c = c / np.linalg.norm(c, axis=2, keepdims=True)
    out = np.zeros((len(e), len(c)))
    for b in range(len(e)):
        for j in range(len(c)):
            cos = max(float(e[b] @ c[j, k]) for k in range(c.shape[1]))
            if j == labels[b]:
                m = float(margins[j])
                cos = min(max(cos, -1 + L.COS_EPS), 1 - L.COS_EPS)
                theta = math.acos(cos)
                cos = math.cos(theta + m) if theta + m < math.pi else cos - m * math.sin(m)
            out[b, j] = scale * cos
    return out


# ------------------------------------------------------------------------------ batches
def _batches():
    """(name, labels, emb), all [8, 4] (one shape: JAX compiles each op once per shape): random,
    tied distances (integer embeddings), single-image ids, no positive pair, one id, identical rows."""
    rng = np.random.default_rng(1)
    out = []
    for trial in range(3):
        out.append((f"random{trial}", rng.integers(0, 3, 8), rng.normal(size=(8, 4)).astype(np.float32)))
    out.append(("ties", np.array([0, 0, 0, 1, 1, 2, 2, 3]), rng.integers(1, 3, (8, 4)).astype(np.float32)))
    out.append(("single_images", np.array([0, 1, 2, 3, 3, 4, 5, 5]), rng.normal(size=(8, 4)).astype(np.float32)))
    out.append(("no_positive", np.arange(8), rng.normal(size=(8, 4)).astype(np.float32)))
    out.append(("one_id", np.full(8, 5), rng.normal(size=(8, 4)).astype(np.float32)))
    out.append(("identical", np.array([0, 0, 1, 1, 2, 2, 3, 3]), np.ones((8, 4), np.float32)))
    return out


BATCHES = _batches()
IDS = [b[0] for b in BATCHES]


# ------------------------------------------------------------------------------ distances
@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_pairwise_sq_distances_match_a_loop(backend, name, labels, emb):
    d = _np(L.pairwise_sq_distances(emb))
    assert d.dtype == np.float32 and d.shape == (len(emb), len(emb))
    np.testing.assert_allclose(d, bf_sq(emb), atol=1e-5)
    assert np.all(np.diag(d) == 0) and np.all(d >= 0)


def test_safe_sqrt_is_exact_zero_at_zero_and_sqrt_elsewhere(backend):
    x = np.array([0.0, 1e-14, 1e-6, 4.0], np.float32)
    np.testing.assert_allclose(_np(L.safe_sqrt(x)), [0.0, 0.0, 1e-3, 2.0], rtol=1e-6)


# ------------------------------------------------------------------------------ contrastive
def test_contrastive_loss_matches_drlim_per_pair(backend):
    rng = np.random.default_rng(2)
    same = np.array([1, 0, 0, 1, 0, 0], np.float32)
    sq = np.array([0.3, 0.0, 0.25, 0.0, 1.44, 4.0], np.float32)
    want = [s * q if s else max(0.0, 1.0 - math.sqrt(q)) ** 2 for s, q in zip(same, sq)]
    np.testing.assert_allclose(_np(L.contrastive_loss(same, sq)), want, rtol=1e-6, atol=1e-7)
    sq2 = rng.uniform(0, 3, 20).astype(np.float32)
    same2 = (rng.uniform(size=20) < 0.5).astype(np.float32)
    want2 = [s * q if s else max(0.0, 2.0 - math.sqrt(q)) ** 2 for s, q in zip(same2, sq2)]
    np.testing.assert_allclose(_np(L.contrastive_loss(same2, sq2, margin=2.0)), want2, rtol=1e-5)


# ------------------------------------------------------------------------------ semi-hard
def test_semihard_selector_on_a_hand_made_matrix(backend):
    # labels 0 0 1 2. (a=0, p=1): d(0,1) = 2, negatives at 3 and 5 -> the nearest beyond 2 is 3.
    # (a=1, p=0): d(1,0) = 2, negatives at 1 and 1.5, none beyond 2 -> the farthest, 1.5.
    labels = np.array([0, 0, 1, 2])
    d = np.array([[0, 2, 3, 5], [2, 0, 1, 1.5], [3, 1, 0, 4], [5, 1.5, 4, 0]], np.float32)
    chosen = _np(L.semihard_negatives(labels, d))
    assert chosen.shape == (4, 4) and chosen.dtype == np.float32
    assert chosen[0, 1] == 3.0 and chosen[1, 0] == 1.5


def test_semihard_selector_a_tie_is_not_beyond_the_positive(backend):
    # (0,1): the only negative is at exactly d(0,1) = 2: not strictly farther -> fallback to the farthest, 2.
    # (1,0): the negative is at 3 > 2 -> 3.
    labels = np.array([0, 0, 1])
    d = np.array([[0, 2, 2], [2, 0, 3], [2, 3, 0]], np.float32)
    chosen = _np(L.semihard_negatives(labels, d))
    assert chosen[0, 1] == 2.0 and chosen[1, 0] == 3.0
    # The loss on points whose squared distances are integers: (0,0), (1,1), (1,-1): d01 = d02 = 2, d12 = 4.
    emb = np.array([[0, 0], [1, 1], [1, -1]], np.float32)
    # (0,1): the negative at 2 ties -> the farthest, 2 -> max(0, 2 - 2 + .5) = .5; (1,0): 4 > 2 -> 0.
    assert float(_np(L.semihard_triplet_loss(labels, emb, margin=0.5))) == pytest.approx(0.25, abs=1e-6)


def test_semihard_selector_matches_a_loop(backend):
    for name, labels, emb in BATCHES:
        d = bf_sq(emb)
        chosen = _np(L.semihard_negatives(labels, d.astype(np.float32)))
        for a, p in itertools.permutations(range(len(labels)), 2):
            if labels[a] == labels[p]:
                want = bf_semihard_choice(labels, d, a, p)
                assert chosen[a, p] == pytest.approx(0.0 if want is None else want, abs=1e-5), (name, a, p)


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_semihard_triplet_loss_matches_a_loop(backend, name, labels, emb):
    for margin in (0.5, 2.0):
        got = _np(L.semihard_triplet_loss(labels, emb, margin=margin))
        assert got.shape == () and got.dtype == np.float32
        assert float(got) == pytest.approx(bf_semihard_loss(labels, emb, margin), rel=1e-4, abs=1e-5)


def test_semihard_triplet_loss_is_zero_without_positive_pairs_and_for_one_id(backend):
    rng = np.random.default_rng(3)
    assert float(_np(L.semihard_triplet_loss(np.arange(8), rng.normal(size=(8, 4))))) == 0.0
    assert float(_np(L.semihard_triplet_loss(np.zeros(8), rng.normal(size=(8, 4))))) == 0.0


# ------------------------------------------------------------------------------ seed 001
# Four unit vectors (1,0), (0,1), (-1,0), (0,-1), labels 0 0 1 1. Squared distances: 2 between
# neighbours (90 degrees), 4 between opposites; d = ||.||^2 / 4.
#   matching pairs (0,1), (2,3): d+ = .5, .5              -> mean .5, variance 0
#   non-matching (0,2), (0,3), (1,2), (1,3): 1, .5, .5, 1 -> mean .75, population variance .0625
#   J = 0 + .0625 + .8 * max(0, .5 - .75 + .4) = .0625 + .12 = .1825
# Ratio triplets (plain distances sqrt2 and 2, m = .01): anchor 0, positive 1 (sqrt2):
#   negative 2 (2):     max(0, 1 - 2 / (sqrt2 + .01))     = 0
#   negative 3 (sqrt2): max(0, 1 - sqrt2 / (sqrt2 + .01)) = .01 / (sqrt2 + .01) = .0070214
# Every anchor alike: per-anchor mean .0035107; "anchor" sum 4 x = .0140428; "sum" .0280856 (8 triplets);
# "mean" .0035107. TGLoss (gamma 1) = .0140428 + .1825 = .1965428.
SQUARE = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], np.float32)
SQUARE_LABELS = np.array([0, 0, 1, 1])
R = 0.01 / (math.sqrt(2) + 0.01)


def test_global_loss_on_the_hand_computed_square(backend):
    assert float(_np(G.global_loss(SQUARE_LABELS, SQUARE))) == pytest.approx(0.1825, abs=1e-6)


def test_ratio_triplet_and_tg_loss_on_the_hand_computed_square(backend):
    assert float(_np(G.ratio_triplet_loss(SQUARE_LABELS, SQUARE))) == pytest.approx(2 * R, abs=1e-6)
    assert float(_np(G.ratio_triplet_loss(SQUARE_LABELS, SQUARE, reduction="sum"))) == pytest.approx(4 * R, abs=1e-6)
    assert float(_np(G.ratio_triplet_loss(SQUARE_LABELS, SQUARE, reduction="mean"))) == pytest.approx(R / 2, abs=1e-6)
    assert float(_np(G.tg_loss(SQUARE_LABELS, SQUARE))) == pytest.approx(2 * R + 0.1825, abs=1e-6)
    assert float(_np(G.tg_loss(SQUARE_LABELS, SQUARE, gamma=3.0, t=0.1, lam=1.0))) == pytest.approx(
        6 * R + 0.0625 + max(0.0, 0.5 - 0.75 + 0.1), abs=1e-6)


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_global_loss_matches_a_loop(backend, name, labels, emb):
    emb = _unit(emb).astype(np.float32)
    for t, lam in ((0.4, 0.8), (1.0, 1.0)):
        got = _np(G.global_loss(labels, emb, t=t, lam=lam))
        assert got.shape == () and got.dtype == np.float32
        assert float(got) == pytest.approx(bf_global(labels, emb, t, lam), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_ratio_triplet_and_tg_loss_match_a_loop(backend, name, labels, emb):
    emb = _unit(emb).astype(np.float32)
    for reduction in G.REDUCTIONS:
        got = float(_np(G.ratio_triplet_loss(labels, emb, m=0.01, reduction=reduction)))
        assert got == pytest.approx(bf_ratio(labels, emb, 0.01, reduction), rel=1e-4, abs=1e-5), reduction
    want = 2.0 * bf_ratio(labels, emb, 0.05, "anchor") + bf_global(labels, emb, 0.4, 0.8)
    assert float(_np(G.tg_loss(labels, emb, gamma=2.0, m=0.05))) == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_triplet_choice_in_a_p_by_k_batch_takes_the_next_slot_and_the_next_chunk(backend):
    # 4 identities x 3 images in chunks: slot r of a chunk -> positive slot r + 1 (cyclic), negative slot r of the
    # next chunk: every image is once an anchor, once a positive and once a negative.
    labels = np.repeat([7, 3, 9, 1], 3)
    pos, neg, valid = (_np(x) for x in G.triplet_choice(labels))
    assert valid.tolist() == [1.0] * 12 and pos.sum(1).tolist() == [1.0] * 12 and neg.sum(1).tolist() == [1.0] * 12
    assert pos.argmax(1).tolist() == [1, 2, 0, 4, 5, 3, 7, 8, 6, 10, 11, 9]
    assert neg.argmax(1).tolist() == [3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2]


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_triplet_choice_matches_a_loop(backend, name, labels, emb):
    pos, neg, valid = (_np(x) for x in G.triplet_choice(labels))
    want = bf_triplet_choice(labels)
    assert sorted(np.flatnonzero(valid).tolist()) == sorted(want)
    for a in range(len(labels)):
        if a in want:
            assert (np.flatnonzero(pos[a]).tolist(), np.flatnonzero(neg[a]).tolist()) == ([want[a][0]], [want[a][1]])
        else:
            assert not pos[a].any() and not neg[a].any()


def test_per_triplet_global_and_tg_loss_on_the_hand_computed_square(backend):
    # Labels 0 0 1 1 on the square: anchor 0 -> (1, 2), 1 -> (0, 3), 2 -> (3, 0), 3 -> (2, 1): every positive at
    # 90 degrees (d+ = .5), every chosen negative opposite (d- = 1): no variance, hinge max(0, .5 - 1 + .4) = 0;
    # ratio triplets max(0, 1 - 2 / (sqrt2 + .01)) = 0. Every pair (above): .1825.
    assert bf_triplet_choice(SQUARE_LABELS) == {0: (1, 2), 1: (0, 3), 2: (3, 0), 3: (2, 1)}
    assert float(_np(G.global_loss(SQUARE_LABELS, SQUARE, pairs="triplet"))) == pytest.approx(0.0, abs=1e-7)
    assert float(_np(G.global_loss(SQUARE_LABELS, SQUARE, t=0.7, pairs="triplet"))) == pytest.approx(
        0.8 * 0.2, abs=1e-6)
    assert float(_np(G.tg_loss(SQUARE_LABELS, SQUARE, pairs="triplet"))) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("name,labels,emb", BATCHES, ids=IDS)
def test_per_triplet_global_and_tg_loss_match_a_loop(backend, name, labels, emb):
    emb = _unit(emb).astype(np.float32)
    for t, lam in ((0.4, 0.8), (1.0, 1.0)):
        got = _np(G.global_loss(labels, emb, t=t, lam=lam, pairs="triplet"))
        assert got.shape == () and got.dtype == np.float32
        assert float(got) == pytest.approx(bf_global_triplet(labels, emb, t, lam), rel=1e-4, abs=1e-6)
    assert float(_np(G.chosen_ratio_triplet_loss(labels, emb, m=0.05))) == pytest.approx(
        bf_chosen_ratio(labels, emb, 0.05), rel=1e-4, abs=1e-5)
    want = 2.0 * bf_chosen_ratio(labels, emb, 0.05) + bf_global_triplet(labels, emb, 0.4, 0.8)
    assert float(_np(G.tg_loss(labels, emb, gamma=2.0, m=0.05, pairs="triplet"))) == pytest.approx(
        want, rel=1e-4, abs=1e-5)


def test_similarity_global_loss_on_hand_computed_pairs(backend):
    # g+ = {2, 0}: mean 1, variance 1; g- = {1, -1}: mean 0, variance 1; hinge max(0, m - 1).
    same, g = np.array([1, 1, 0, 0], np.float32), np.array([2.0, 0.0, 1.0, -1.0], np.float32)
    assert float(_np(G.similarity_global_loss(same, g))) == pytest.approx(2.0, abs=1e-6)
    assert float(_np(G.similarity_global_loss(same, g, m=3.0, lam=0.5))) == pytest.approx(3.0, abs=1e-6)
    # [b, 1] columns as Keras hands them; a batch of one kind keeps its variance and drops the hinge.
    assert float(_np(G.similarity_global_loss(same[:, None], g[:, None], m=3.0))) == pytest.approx(4.0, abs=1e-6)
    assert float(_np(G.similarity_global_loss(np.ones(2), g[:2], m=3.0))) == pytest.approx(1.0, abs=1e-6)


def test_similarity_global_loss_matches_a_loop_and_reads_the_heads_log_odds(backend):
    from whale.objectives.objective import SimilarityGlobalLoss

    rng = np.random.default_rng(8)
    for trial in range(4):
        same = (rng.uniform(size=16) < 0.5).astype(np.float32)
        g = rng.normal(scale=3.0, size=16).astype(np.float32)
        for m, lam in ((1.0, 1.0), (0.3, 2.0)):
            got = float(_np(G.similarity_global_loss(same, g, m, lam)))
            assert got == pytest.approx(bf_similarity_global(same, g, m, lam), rel=1e-5, abs=1e-6), trial
        p = (1 / (1 + np.exp(-g.astype(np.float64)))).astype(np.float32)
        np.testing.assert_allclose(_np(G.logit(p)), g, rtol=1e-4, atol=1e-3)
        loss = SimilarityGlobalLoss(m=0.3, lam=2.0)
        assert float(_np(loss(same[:, None], p[:, None]))) == pytest.approx(
            bf_similarity_global(same, g, 0.3, 2.0), rel=1e-3, abs=1e-3)
    assert np.all(np.isfinite(_np(G.logit(np.array([0.0, 1.0], np.float32)))))


def test_the_pairs_option_refuses_an_unknown_reading():
    with pytest.raises(ValueError, match=r"global_loss\(pairs=...\): expected one of .* received 'some'"):
        G.global_loss(SQUARE_LABELS, SQUARE, pairs="some")
    with pytest.raises(ValueError, match=r"tg_loss\(pairs=...\)"):
        G.tg_loss(SQUARE_LABELS, SQUARE, pairs="some")


def test_ratio_triplet_loss_refuses_an_unknown_reduction():
    with pytest.raises(ValueError, match="expected one of .* received 'max'"):
        G.ratio_triplet_loss(SQUARE_LABELS, SQUARE, reduction="max")


def test_global_loss_without_positive_or_negative_pairs_keeps_the_defined_terms(backend):
    emb = _unit(np.random.default_rng(4).normal(size=(8, 4))).astype(np.float32)
    d = bf_sq(emb)[np.triu_indices(8, 1)] / 4
    assert float(_np(G.global_loss(np.arange(8), emb))) == pytest.approx(np.var(d), abs=1e-6)   # no d+
    assert float(_np(G.global_loss(np.zeros(8), emb))) == pytest.approx(np.var(d), abs=1e-6)    # no d-
    assert float(_np(G.ratio_triplet_loss(np.arange(8), emb))) == 0.0                            # no triplet


# ------------------------------------------------------------------------------ ArcFace
def test_dynamic_margins_formula_and_errors():
    counts = np.array([1, 2, 16, 73])
    m = L.dynamic_margins(counts)
    assert m.dtype == np.float32 and m.shape == (4,)
    np.testing.assert_allclose(m, [0.55, 0.5 * 2 ** -0.25 + 0.05, 0.3, 0.5 * 73 ** -0.25 + 0.05], rtol=1e-6)
    assert np.all(np.diff(m) < 0)  # rarer ids get larger margins
    w = L.dynamic_margins(counts, **L.HAPPYWHALE_2022_MARGINS)
    np.testing.assert_allclose(w, 0.27126 * counts ** -0.364399 + 0.05, rtol=1e-6)
    with pytest.raises(ValueError, match="expected every count >= 1, received 0 at index 1"):
        L.dynamic_margins([3, 0, 2])
    with pytest.raises(ValueError, match="expected a 1-D array"):
        L.dynamic_margins([[1, 2]])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_subcenter_arcface_logits_match_the_formula(backend, k):
    rng = np.random.default_rng(10 + k)
    n_ids, dim, b = 5, 4, 9
    centers = rng.normal(size=(n_ids, k, dim)).astype(np.float32)
    emb = (3.0 * rng.normal(size=(b, dim))).astype(np.float32)
    labels = rng.integers(0, n_ids, b)
    # Row 0 points away from every sub-centre of its class (theta + m > pi: the fallback branch);
    # row 1 sits on one of its class's sub-centres (cos = 1: the clip).
    labels[:2] = [2, 3]
    centers[2] = np.tile(centers[2, :1], (k, 1))
    emb[0] = -2.0 * centers[2, 0]
    emb[1] = 0.5 * centers[3, k - 1]
    margins = L.dynamic_margins(rng.integers(1, 20, n_ids))
    got = _np(L.subcenter_arcface_logits(emb, centers, labels, margins, scale=30.0))
    assert got.shape == (b, n_ids) and got.dtype == np.float32
    # float32 near cos = 1: sin = sqrt(1 - cos^2) ~ 5e-4 carries a few 1e-5 of relative rounding.
    np.testing.assert_allclose(got, bf_arcface_logits(emb, centers, labels, margins, 30.0), rtol=1e-4, atol=2e-4)
    # A float label (as Keras hands y_true to a loss) gives the same logits.
    got_f = _np(L.subcenter_arcface_logits(emb, centers, labels.astype(np.float32), margins, scale=30.0))
    np.testing.assert_array_equal(got, got_f)


def test_arcface_loss_is_the_mean_softmax_cross_entropy(backend):
    rng = np.random.default_rng(5)
    logits = (10 * rng.normal(size=(6, 7))).astype(np.float32)
    labels = rng.integers(0, 7, 6)
    z = logits.astype(np.float64)
    want = np.mean([np.log(np.sum(np.exp(z[i] - z[i].max()))) + z[i].max() - z[i, labels[i]] for i in range(6)])
    assert float(_np(L.arcface_loss(labels, logits))) == pytest.approx(want, rel=1e-5)


# ------------------------------------------------------------------------------ finite gradients
def _contrastive_all_pairs(labels, emb):
    from keras import ops

    y = ops.reshape(labels, (-1,))
    same = ops.cast(ops.equal(ops.expand_dims(y, 1), ops.expand_dims(y, 0)), "float32")
    return ops.mean(L.contrastive_loss(ops.reshape(same, (-1,)), ops.reshape(L.pairwise_sq_distances(emb), (-1,))))


EMBEDDING_LOSSES = {
    "contrastive": _contrastive_all_pairs,
    "semihard_triplet": L.semihard_triplet_loss,
    "global": G.global_loss,
    "global_per_triplet": lambda y, e: G.global_loss(y, e, pairs="triplet"),
    "ratio_triplet": G.ratio_triplet_loss,
    "tg": G.tg_loss,
    "tg_per_triplet": lambda y, e: G.tg_loss(y, e, pairs="triplet"),
}


def _train_steps(model, batches, loss):
    """One compiled SGD step per ``(x, y)`` (compiled once); ``[(loss value, weights)]`` after each."""
    import keras

    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    out = []
    for x, y in batches:
        value = model.train_on_batch(x, y)
        out.append((float(np.asarray(value)), [np.asarray(w) for w in model.get_weights()]))
    return out


def test_a_compiled_train_step_stays_finite_on_identical_embeddings(backend):
    """One compiled step per batch, the loss the sum of every embedding loss (one compilation, not five)."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((3,))
    out = keras.layers.UnitNormalization()(keras.layers.Dense(4)(inp))
    model = keras.Model(inp, out)
    labels = np.array([0, 0, 1, 1, 2], np.float32)
    loss = lambda yt, yp: sum(fn(yt, yp) for fn in EMBEDDING_LOSSES.values())  # noqa: E731
    xs = (np.ones((5, 3), np.float32), np.random.default_rng(6).normal(size=(5, 3)).astype(np.float32))
    for value, weights in _train_steps(model, [(x, labels) for x in xs], loss):
        assert np.isfinite(value)
        assert all(np.all(np.isfinite(w)) for w in weights)
    # The identical batch's value, eagerly: every term is finite there too.
    same = np.asarray(model(np.ones((5, 3), np.float32)))
    for name, fn in EMBEDDING_LOSSES.items():
        assert np.isfinite(float(_np(fn(labels, same)))), name


def test_a_compiled_arcface_train_step_stays_finite(backend):
    import keras
    from keras import ops

    keras.utils.set_random_seed(0)

    class Head(keras.layers.Layer):
        def build(self, shapes):
            self.centers = self.add_weight(shape=(3, 2, 4), initializer="glorot_uniform", name="centers")

        def call(self, inputs):
            emb, y = inputs
            logits = L.subcenter_arcface_logits(emb, self.centers, y, L.dynamic_margins([1, 4, 9]))
            return ops.broadcast_to(L.arcface_loss(y, logits), (ops.shape(emb)[0], 1))

    x_in, y_in = keras.Input((3,)), keras.Input((1,))
    model = keras.Model([x_in, y_in], Head()([keras.layers.Dense(4)(x_in), y_in]))
    labels = np.array([[0], [1], [2], [1]], np.float32)
    xs = (np.ones((4, 3), np.float32), np.random.default_rng(7).normal(size=(4, 3)).astype(np.float32))
    batches = [([x, labels], np.zeros((4, 1), np.float32)) for x in xs]
    for value, weights in _train_steps(model, batches, lambda yt, yp: ops.mean(yp)):
        assert np.isfinite(value) and all(np.all(np.isfinite(w)) for w in weights)


def test_a_compiled_similarity_global_train_step_stays_finite_at_saturated_probabilities(backend):
    """eq. 8 on the head's log-odds: a sigmoid output at exactly 0 or 1 (float32) keeps the step finite."""
    import keras

    from whale.objectives.objective import SimilarityGlobalLoss

    keras.utils.set_random_seed(0)
    inp = keras.Input((2,))
    model = keras.Model(inp, keras.layers.Dense(1, activation="sigmoid")(inp))
    same = np.array([[1], [1], [0], [0]], np.float32)
    xs = (np.array([[60, 0], [-60, 0], [60, 0], [0, 0]], np.float32),   # log-odds far past float32's sigmoid range
          np.random.default_rng(9).normal(size=(4, 2)).astype(np.float32))
    model.layers[-1].set_weights([np.array([[1.0], [0.0]], np.float32), np.zeros(1, np.float32)])
    for value, weights in _train_steps(model, [(x, same) for x in xs], SimilarityGlobalLoss()):
        assert np.isfinite(value) and all(np.all(np.isfinite(w)) for w in weights)
