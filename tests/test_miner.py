"""whale.miner against brute force: Algorithm 1 as explicit loops, scipy's assignment,
permutation enumeration for Hall's condition, and the rules every mined epoch must obey."""
import itertools

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.stats import chisquare

from whale.mining import assignment as miner
from whale.core.errors import WhaleError
from whale.mining import (NoValidAssignment, mine_negatives, mine_negatives_sparse, positive_pairs, validate_negative_pairs)

MAXVAL = 10000.0


def brute_algorithm1(scores, ids, k, epochs, rng, maxval=MAXVAL):
    """Algorithm 1 as written in the paper, with scipy's solver; returns pairs and T per epoch."""
    n = len(ids)
    noise = rng.random((n, n))
    T = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            if ids[i] == ids[j]:
                T[i, j] = maxval
            else:
                T[i, j] = -scores[i, j] + k * noise[i, j]
    out, costs = [], []
    for _ in range(epochs):
        r, c = linear_sum_assignment(T)
        costs.append(T[r, c].sum())
        out.append(np.stack([r, c], axis=1))
        for i, j in zip(r, c):
            T[i, j] = maxval
    return out, costs


def total_cost_on(T, pairs):
    return T[pairs[:, 0], pairs[:, 1]].sum()


def random_problem(seed, n, n_ids):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_ids, n)
    while np.bincount(ids).max() * 2 > n:
        ids = rng.integers(0, n_ids, n)
    scores = rng.random((n, n))
    return scores, ids


# ----------------------------------------------------------------- dense vs brute force


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [0.0, 0.3, 5.0])
def test_dense_matches_explicit_loop_and_scipy(seed, k, monkeypatch):
    # Small blocks so the row-block noise draw is exercised; it must equal one (n, n) draw.
    monkeypatch.setattr(miner, "_BLOCK_ELEMS", 25)
    scores, ids = random_problem(seed, 12, 5)
    got = mine_negatives(scores, ids, k, 4, np.random.default_rng(seed))
    want, costs = brute_algorithm1(scores, ids, k, 4, np.random.default_rng(seed))
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and g.shape == (12, 2)
        np.testing.assert_array_equal(g, w)  # continuous random costs: unique optimum
    validate_negative_pairs(got, ids, 12)
    assert all(c < MAXVAL for c in costs)


def test_dense_total_cost_equals_scipy_optimum_each_epoch():
    scores, ids = random_problem(7, 16, 6)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    got = mine_negatives(scores, ids, 0.7, 5, rng_a)
    noise = rng_b.random((16, 16))
    T = -scores + 0.7 * noise
    T[ids[:, None] == ids[None, :]] = MAXVAL
    for pairs in got:
        r, c = linear_sum_assignment(T)
        assert total_cost_on(T, pairs) == pytest.approx(T[r, c].sum(), abs=1e-9)
        T[pairs[:, 0], pairs[:, 1]] = MAXVAL


def test_k0_first_epoch_is_scipy_optimum_of_scores():
    scores, ids = random_problem(11, 20, 7)
    got = mine_negatives(scores, ids, 0.0, 1, np.random.default_rng(0))[0]
    T = -scores.copy()
    T[ids[:, None] == ids[None, :]] = MAXVAL
    r, c = linear_sum_assignment(T)
    np.testing.assert_array_equal(got[:, 1], c)


def test_float32_scores_and_string_ids():
    scores, ids = random_problem(2, 10, 4)
    labels = np.array([f"w_{i}" for i in ids], dtype=object)
    a = mine_negatives(scores.astype(np.float32), labels, 0.1, 2, np.random.default_rng(1))
    b = mine_negatives(scores.astype(np.float32).astype(np.float64), ids, 0.1, 2, np.random.default_rng(1))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------- Hall's condition


def _valid_perm_exists(ids):
    n = len(ids)
    return any(all(ids[i] != ids[p[i]] for i in range(n)) for p in itertools.permutations(range(n)))


def test_hall_condition_claim_by_enumeration():
    """A permutation avoiding same-id pairs exists iff every id holds <= n/2 images."""
    seen = set()
    for n in range(1, 8):
        # every partition of n images into ids (as sorted group sizes)
        for labels in itertools.product(range(3), repeat=n):
            sizes = tuple(sorted(np.bincount(labels)))
            if (n, sizes) in seen:
                continue
            seen.add((n, sizes))
            ids = np.array(labels)
            assert _valid_perm_exists(ids) == (2 * max(sizes) <= n), (n, sizes)
            if n >= 2:
                scores = np.random.default_rng(n).random((n, n))
                if 2 * max(sizes) <= n:
                    validate_negative_pairs(mine_negatives(scores, ids, 1.0, 1, np.random.default_rng(0)), ids, n)
                else:
                    with pytest.raises(NoValidAssignment):
                        mine_negatives(scores, ids, 1.0, 1, np.random.default_rng(0))
    assert len(seen) > 15


def test_valid_permutation_helper_avoids_same_id():
    rng = np.random.default_rng(0)
    for _ in range(50):
        ids = rng.integers(0, rng.integers(2, 8), rng.integers(2, 30))
        if 2 * np.bincount(ids).max() > len(ids):
            continue
        p = miner._valid_permutation(np.unique(ids, return_inverse=True)[1], rng)
        assert sorted(p) == list(range(len(ids)))
        assert (ids[p] != ids).all()


# ----------------------------------------------------------------- adversarial inputs


def test_one_id_over_half_raises_clear_error():
    ids = np.array([0] * 6 + [1, 2, 3, 4])
    with pytest.raises(NoValidAssignment, match=r"largest id holds 6 of n=10"):
        mine_negatives(np.random.default_rng(0).random((10, 10)), ids, 1.0, 1, np.random.default_rng(0))
    assert issubclass(NoValidAssignment, ValueError) and issubclass(NoValidAssignment, WhaleError)


def test_one_id_exactly_half_works_for_all_possible_epochs():
    ids = np.array([0] * 5 + [1, 2, 3, 4, 5])
    out = mine_negatives(np.random.default_rng(0).random((10, 10)), ids, 1.0, 5, np.random.default_rng(0))
    validate_negative_pairs(out, ids, 10)
    # the big id's images can only pair with the five others, and each does with all five
    with pytest.raises(NoValidAssignment, match="at most 5 epochs"):
        mine_negatives(np.random.default_rng(0).random((10, 10)), ids, 1.0, 6, np.random.default_rng(0))


def test_all_ids_unique_uses_every_pair_over_n_minus_1_epochs():
    n = 9
    ids = np.arange(n)
    out = mine_negatives(np.random.default_rng(1).random((n, n)), ids, 0.5, n - 1, np.random.default_rng(0))
    validate_negative_pairs(out, ids, n)
    used = {(int(i), int(j)) for p in out for i, j in p}
    # the graph left after each epoch is regular bipartite, so it never runs out
    assert used == {(i, j) for i in range(n) for j in range(n) if i != j}


def test_n2_edge_case():
    out = mine_negatives(np.array([[0.3, 0.9], [0.2, 0.1]]), ["a", "b"], 1.0, 1, np.random.default_rng(0))
    np.testing.assert_array_equal(out[0], [[0, 1], [1, 0]])
    with pytest.raises(NoValidAssignment):
        mine_negatives(np.zeros((2, 2)), ["a", "b"], 1.0, 2, np.random.default_rng(0))
    with pytest.raises(NoValidAssignment):
        mine_negatives(np.zeros((2, 2)), ["a", "a"], 1.0, 1, np.random.default_rng(0))
    with pytest.raises(NoValidAssignment):
        mine_negatives(np.zeros((1, 1)), ["a"], 1.0, 1, np.random.default_rng(0))


def _remaining_perm_exists(ids, used):
    n = len(ids)
    return any(
        all(ids[i] != ids[p[i]] and (i, p[i]) not in used for i in range(n))
        for p in itertools.permutations(range(n))
    )


def test_exhaustion_detected_exactly_when_no_permutation_is_left():
    """Greedy epochs can paint themselves into a corner before the cheap precheck's limit."""
    ids = np.array([0, 0, 1, 2, 3])  # precheck allows n - 2 = 3 epochs
    raised = 0
    for seed in range(40):
        scores = np.random.default_rng(seed).random((5, 5))
        prefix = []
        for e in range(1, 4):
            try:
                out = mine_negatives(scores, ids, 0.0, e, np.random.default_rng(seed))
            except NoValidAssignment as err:
                assert f"at epoch {e} of {e}" in str(err)
                used = {(int(i), int(j)) for p in prefix for i, j in p}
                assert not _remaining_perm_exists(ids, used)
                raised += 1
                break
            for a, b in zip(prefix, out):
                np.testing.assert_array_equal(a, b)  # epochs are a deterministic prefix
            validate_negative_pairs(out, ids, 5)
            prefix = out
    assert raised > 0, "no seed exercised the exhaustion path"


def test_small_maxval_does_not_produce_same_id_pairs():
    # A forbidden entry at maxval=0.5 beats every valid assignment here (valid total 0,
    # a1->a2, a2->a1, b->c, c->b costs 2 * 0.5 - 2 = -1); the miner must still avoid it.
    ids = np.array(["a", "a", "b", "c"])
    scores = np.zeros((4, 4))
    scores[2, 3] = scores[3, 2] = 1.0
    out = mine_negatives(scores, ids, 0.0, 1, np.random.default_rng(0), maxval=0.5)
    validate_negative_pairs(out, ids, 4)


# ----------------------------------------------------------------- k: random vs hard


def test_large_k_gives_spread_negatives_small_k_the_hardest():
    n = 30
    ids = np.arange(n)
    scores = np.zeros((n, n))
    scores[np.arange(n), (np.arange(n) + 1) % n] = 1.0  # one very hard negative per row
    hard = mine_negatives(scores, ids, 0.01, 1, np.random.default_rng(0))[0]
    np.testing.assert_array_equal(hard[:, 1], (np.arange(n) + 1) % n)

    offsets, n_hard = [], 0
    for seed in range(20):
        p = mine_negatives(scores, ids, 1000.0, 1, np.random.default_rng(seed))[0]
        off = (p[:, 1] - p[:, 0]) % n
        offsets.append(off)
        n_hard += int((off == 1).sum())
    counts = np.bincount(np.concatenate(offsets), minlength=n)[1:]
    assert chisquare(counts).pvalue > 1e-3
    assert n_hard < 3 * 20  # ~1 per seed expected at random, 30 per seed when hard


def test_smaller_k_gives_higher_scored_negatives():
    scores, ids = random_problem(5, 40, 15)

    def mean_score(k):
        p = mine_negatives(scores, ids, k, 1, np.random.default_rng(1))[0]
        return scores[p[:, 0], p[:, 1]].mean()

    assert mean_score(0.0) > mean_score(0.3) > mean_score(100.0)


# ----------------------------------------------------------------- input checks


@pytest.mark.parametrize(
    "scores, ids, k, epochs, match",
    [
        (np.zeros(4), [0, 1, 2, 3], 1.0, 1, "square"),
        (np.zeros((4, 3)), [0, 1, 2, 3], 1.0, 1, "square"),
        (np.zeros((4, 4)), [0, 1, 2], 1.0, 1, "expected 4 labels"),
        (np.full((4, 4), np.nan), [0, 1, 2, 3], 1.0, 1, "finite"),
        (np.zeros((4, 4)), [0, 1, 2, 3], -1.0, 1, "k: expected"),
        (np.zeros((4, 4)), [0, 1, 2, 3], np.inf, 1, "k: expected"),
        (np.zeros((4, 4)), [0, 1, 2, 3], 1.0, 0, "epochs"),
        (np.zeros((4, 4)), [0, 1, 2, 3], 1.0, 1.5, "epochs"),
        (np.zeros((4, 4)), [0, 1, 2, 3], 20000.0, 1, "maxval"),
    ],
)
def test_dense_input_checks(scores, ids, k, epochs, match):
    with pytest.raises(ValueError, match=match):
        mine_negatives(scores, ids, k, epochs, np.random.default_rng(0))


def test_validate_negative_pairs_catches_each_rule():
    ids = np.array([0, 0, 1, 2])
    good = np.array([[0, 2], [1, 3], [2, 0], [3, 1]])
    validate_negative_pairs([good], ids, 4)
    with pytest.raises(ValueError, match="same-id"):
        validate_negative_pairs([np.array([[0, 1], [1, 2], [2, 3], [3, 0]])], ids, 4)
    with pytest.raises(ValueError, match="exactly once as second"):
        validate_negative_pairs([np.array([[0, 2], [1, 2], [2, 0], [3, 1]])], ids, 4)
    with pytest.raises(ValueError, match="exactly once as first"):
        validate_negative_pairs([np.array([[0, 2], [0, 3], [2, 0], [3, 1]])], ids, 4)
    with pytest.raises(ValueError, match="at most once"):
        validate_negative_pairs([good, good], ids, 4)
    with pytest.raises(ValueError, match=r"\(4, 2\)"):
        validate_negative_pairs([good[:3]], ids, 4)


# ----------------------------------------------------------------- sparse


def all_pairs(scores):
    n = len(scores)
    r, c = np.divmod(np.arange(n * n), n)
    return r, c, scores.ravel()


@pytest.mark.parametrize("seed", range(3))
def test_sparse_with_all_pairs_matches_dense_optimum(seed):
    scores, ids = random_problem(seed, 14, 5)
    r, c, s = all_pairs(scores)
    perm = np.random.default_rng(seed).permutation(len(r))  # candidate order must not matter
    sp = mine_negatives_sparse(r[perm], c[perm], s[perm], ids, 0.0, 4, np.random.default_rng(0))
    de = mine_negatives(scores, ids, 0.0, 4, np.random.default_rng(0))
    validate_negative_pairs(sp, ids, 14)
    for a, b in zip(sp, de):
        assert scores[a[:, 0], a[:, 1]].sum() == pytest.approx(scores[b[:, 0], b[:, 1]].sum())
        np.testing.assert_array_equal(a, b)


def test_sparse_optimum_cost_with_noise_equals_scipy():
    scores, ids = random_problem(9, 12, 4)
    rng = np.random.default_rng(0)
    # random candidates plus one valid permutation, so candidates alone are feasible
    valid = miner._valid_permutation(ids, rng)
    r = np.r_[np.repeat(np.arange(12), 6), np.arange(12)]
    c = np.r_[rng.integers(0, 12, 72), valid]
    s = scores[r, c]
    # recompute the miner's cost exactly: filter, dedupe by key (highest score kept), noise
    out = mine_negatives_sparse(r, c, s, ids, 0.5, 1, np.random.default_rng(5))
    keep = ids[r] != ids[c]
    keys, sc = r[keep] * 12 + c[keep], s[keep]
    o = np.lexsort((-sc, keys))
    keys, sc = keys[o], sc[o]
    first = np.r_[True, keys[1:] != keys[:-1]]
    keys, sc = keys[first], sc[first]
    cost = -sc + 0.5 * np.random.default_rng(5).random(len(keys))
    T = np.full((12, 12), MAXVAL)
    T[keys // 12, keys % 12] = cost
    rr, cc = linear_sum_assignment(T)
    assert total_cost_on(T, out[0]) == pytest.approx(T[rr, cc].sum())
    validate_negative_pairs(out, ids, 12)


def test_sparse_prefers_candidates_and_drops_same_id_and_used():
    ids = np.array([0, 0, 1, 1, 2, 2])
    n = 6
    # candidates: a valid permutation at high score, plus same-id pairs at even higher score
    perm = np.array([2, 4, 5, 0, 1, 3])
    r = np.r_[np.arange(n), np.arange(n)]
    c = np.r_[perm, [1, 0, 3, 2, 5, 4]]
    s = np.r_[np.full(n, 0.9), np.full(n, 1.0)]
    out = mine_negatives_sparse(r, c, s, ids, 0.0, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(out[0][:, 1], perm)
    validate_negative_pairs(out, ids, n)  # later epochs come from the fallback, still valid


@pytest.mark.parametrize("case", ["one_column", "empty_rows", "no_candidates"])
def test_sparse_fallback_when_candidates_infeasible(case):
    n = 12
    ids = np.repeat(np.arange(4), 3)
    if case == "one_column":
        r, c = np.arange(n), np.full(n, 11)
    elif case == "empty_rows":
        r, c = np.arange(6), (np.arange(6) + 6)
    else:
        r = c = np.empty(0, dtype=np.int64)
    s = np.random.default_rng(0).random(len(r))
    out = mine_negatives_sparse(r, c, s, ids, 1.0, 4, np.random.default_rng(0))
    validate_negative_pairs(out, ids, n)


def test_sparse_fallback_runs_out_with_clear_error():
    ids = np.array([0, 0, 1, 2, 3])
    raised = 0
    for seed in range(40):
        scores = np.random.default_rng(seed).random((5, 5))
        r, c, s = all_pairs(scores)
        try:
            out = mine_negatives_sparse(r, c, s, ids, 0.0, 3, np.random.default_rng(seed))
            validate_negative_pairs(out, ids, 5)
        except NoValidAssignment as err:
            assert "at epoch" in str(err)
            raised += 1
    assert raised > 0


def test_sparse_adversarial_ids():
    rng = np.random.default_rng(0)
    ids = np.array([0] * 6 + [1, 2, 3, 4])
    r, c, s = all_pairs(rng.random((10, 10)))
    with pytest.raises(NoValidAssignment, match="6 of n=10"):
        mine_negatives_sparse(r, c, s, ids, 1.0, 1, rng)
    ids = np.array([0] * 5 + [1, 2, 3, 4, 5])
    validate_negative_pairs(mine_negatives_sparse(r, c, s, ids, 1.0, 5, rng), ids, 10)
    out = mine_negatives_sparse([0, 1], [1, 0], [0.5, 0.5], ["x", "y"], 1.0, 1, rng)
    np.testing.assert_array_equal(out[0], [[0, 1], [1, 0]])


@pytest.mark.parametrize(
    "rows, cols, scores, match",
    [
        ([0, 1], [1], [0.5, 0.5], "equal lengths"),
        ([0, 4], [1, 0], [0.5, 0.5], "indices in 0..3"),
        ([0, -1], [1, 0], [0.5, 0.5], "indices in 0..3"),
        ([0.0, 1.0], [1, 0], [0.5, 0.5], "integer"),
        ([0, 1], [1, 0], [0.5, np.nan], "finite"),
        ([[0, 1]], [[1, 0]], [[0.5, 0.5]], "1-D"),
    ],
)
def test_sparse_input_checks(rows, cols, scores, match):
    with pytest.raises(ValueError, match=match):
        mine_negatives_sparse(rows, cols, scores, [0, 1, 2, 3], 1.0, 1, np.random.default_rng(0))


def test_sparse_whale_scale_gives_valid_assignments():
    # whale scale (15,697 photos, 100 candidates each); no wall time asserted: speed claims live in benchmarks/
    rng = np.random.default_rng(0)
    sizes = np.r_[np.ones(2000, int), np.full(1300, 2), np.full(600, 3), rng.integers(4, 74, 900)]
    ids = np.repeat(np.arange(len(sizes)), sizes)[:15697]
    n, m = len(ids), 100
    r = np.repeat(np.arange(n), m)
    c = rng.integers(0, n, n * m)
    s = rng.random(n * m)
    out = mine_negatives_sparse(r, c, s, ids, 1.0, 2, rng)
    assert len(out) == 2
    for pairs in out:  # every photo given one partner of another whale, every partner used once
        assert pairs.shape == (n, 2) and pairs.dtype == np.int64
        np.testing.assert_array_equal(np.sort(pairs[:, 0]), np.arange(n))
        assert np.unique(pairs[:, 1]).size == n and (ids[pairs[:, 0]] != ids[pairs[:, 1]]).all()


# ----------------------------------------------------------------- positives


def test_positive_pairs_rules():
    rng = np.random.default_rng(0)
    ids = np.array(["a", "b", "a", "c", "c", "c", "d", "a", "e", "e"])
    pairs = positive_pairs(ids, rng)
    assert pairs.dtype == np.int64 and pairs.shape == (8, 2)
    multi = [i for i in range(len(ids)) if (ids == ids[i]).sum() >= 2]
    assert sorted(pairs[:, 0]) == multi and sorted(pairs[:, 1]) == multi
    assert (pairs[:, 0] != pairs[:, 1]).all()
    assert (ids[pairs[:, 0]] == ids[pairs[:, 1]]).all()
    assert positive_pairs(["x", "y"], rng).shape == (0, 2)
    assert positive_pairs([], rng).shape == (0, 2)


def test_positive_pairs_random_and_uniform_derangements():
    ids = np.zeros(4, dtype=int)
    seen = {}
    for seed in range(900):
        p = positive_pairs(ids, np.random.default_rng(seed))
        key = tuple(p[:, 1])
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == 9  # all 9 derangements of 4
    assert chisquare(list(seen.values())).pvalue > 1e-3
    big = np.repeat(np.arange(50), 5)
    a = positive_pairs(big, np.random.default_rng(1))
    b = positive_pairs(big, np.random.default_rng(2))
    assert not np.array_equal(a, b)


def test_positive_pairs_at_whale_scale():
    rng = np.random.default_rng(0)
    ids = rng.permutation(np.repeat(np.arange(5004), rng.integers(1, 8, 5004)))[:15697]
    pairs = positive_pairs(ids, rng)
    assert (pairs[:, 0] != pairs[:, 1]).all()
    assert (ids[pairs[:, 0]] == ids[pairs[:, 1]]).all()
    assert np.unique(pairs[:, 1]).size == len(pairs)
