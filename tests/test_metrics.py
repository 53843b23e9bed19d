"""MAP@5 and top-k accuracy against the paper's Table 1 and hand-built cases."""

import numpy as np
import pytest

from whale.metrics import map_at_k, precision_at_k_per_image, top_k_accuracy

PRED = ["w1", "w2", "w3", "w4", "w5"]


@pytest.mark.parametrize(
    "truth, expected",
    [("w1", 1.0), ("w2", 1 / 2), ("w3", 1 / 3), ("w4", 1 / 4), ("w5", 1 / 5), ("w9", 0.0)],
)
def test_table1_rank_scores(truth, expected):
    assert map_at_k([PRED], [truth]) == pytest.approx(expected)
    assert map_at_k([" ".join(PRED)], [truth]) == pytest.approx(expected)


def test_mean_over_images():
    truths = ["w1", "w2", "w3", "w4", "w5", "w9"]
    expected = (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 6
    assert map_at_k([PRED] * 6, truths) == pytest.approx(expected)
    np.testing.assert_allclose(
        precision_at_k_per_image([PRED] * 6, truths), [1, 1 / 2, 1 / 3, 1 / 4, 1 / 5, 0]
    )


def test_duplicates_count_once_and_k_cuts():
    assert map_at_k([["a", "a", "b", "b", "c"]], ["b"]) == pytest.approx(1 / 3)
    assert map_at_k([["a", "b", "c", "d", "e", "f"]], ["f"]) == 0.0
    assert map_at_k([["a", "b", "c"]], ["c"], k=2) == 0.0
    assert map_at_k([["new_whale", "w1"]], ["new_whale"]) == 1.0


def test_top_k_accuracy():
    truths = ["w1", "w3", "w5", "w9"]
    assert top_k_accuracy([PRED] * 4, truths, 1) == pytest.approx(0.25)
    assert top_k_accuracy([PRED] * 4, truths, 3) == pytest.approx(0.5)
    assert top_k_accuracy([PRED] * 4, truths, 5) == pytest.approx(0.75)


def test_length_mismatch_names_both():
    with pytest.raises(ValueError, match="3.*2"):
        map_at_k([PRED] * 3, ["w1", "w2"])
    with pytest.raises(ValueError, match="k"):
        map_at_k([PRED], ["w1"], k=0)


def test_empty_is_zero():
    assert map_at_k([], []) == 0.0


def _top_k_loop(score_of, gallery, query_ids, ks=(1, 5, 10)):
    """Top-k over distinct identities with ties broken at random, in expectation, as plain loops.

    ``score_of(q, g)``: the score of query ``q`` against gallery position ``g``; ``gallery``: its labels."""
    hits = {k: 0.0 for k in ks}
    for q, t in enumerate(query_ids):
        best = {}
        for g, gid in enumerate(gallery):
            best[gid] = max(best.get(gid, -np.inf), score_of(q, g))
        above = sum(v > best[t] for v in best.values())
        level = sum(v == best[t] for gid, v in best.items() if gid != t)
        for k in ks:  # the true identity's place inside its tied block is uniform over 0..level
            hits[k] += sum(above + pos < k for pos in range(level + 1)) / (level + 1)
    return {k: hits[k] / len(query_ids) for k in ks}


def _pairs_loop(s_test, test_ids, far):
    """TPR at FAR and AUC over every pair i < j of the test set as plain loops: every threshold tried."""
    pos, neg = [], []
    for i in range(len(test_ids)):
        for j in range(i + 1, len(test_ids)):
            (pos if test_ids[i] == test_ids[j] else neg).append((s_test[i, j] + s_test[j, i]) / 2)
    tpr = 0.0
    for thr in sorted(set(pos) | set(neg)) + [np.inf]:  # accept score >= thr
        if sum(n >= thr for n in neg) <= far * len(neg) + 1e-9:
            tpr = max(tpr, sum(p >= thr for p in pos) / len(pos))
    auc = np.mean([np.mean([(p > n) + 0.5 * (p == n) for n in neg]) for p in pos])
    return tpr, auc, len(pos) + len(neg), len(pos)


def _retrieval_loop(s_train, s_test, train_ids, test_ids, m, redraws, seed, far):
    """Seed 002's protocol written as plain loops (the reference for :func:`retrieval_protocol`)."""
    rng = np.random.default_rng(seed)
    names, counts = np.unique(test_ids, return_counts=True)
    eligible = sorted(names[counts > m])
    tops = {1: [], 5: [], 10: []}
    for _ in range(redraws):
        picked = set()
        for name in eligible:
            members = [i for i, t in enumerate(test_ids) if t == name]
            picked |= set(rng.choice(members, m, replace=False).tolist())
        gal = [("train", j) for j in range(len(train_ids))] + [("test", j) for j in sorted(picked)]
        queries = [q for q, t in enumerate(test_ids) if q not in picked and t in eligible]
        gallery = [train_ids[j] if kind == "train" else test_ids[j] for kind, j in gal]

        def score_of(qi, g, queries=queries, gal=gal):
            kind, j = gal[g]
            return s_train[queries[qi], j] if kind == "train" else s_test[queries[qi], j]

        for k, v in _top_k_loop(score_of, gallery, [test_ids[q] for q in queries]).items():
            tops[k].append(v)
    return tops, _pairs_loop(s_test, test_ids, far)


@pytest.mark.parametrize("far", [0.01, 0.1, 0.25])
def test_retrieval_protocol_matches_a_loop_with_ties_and_small_ids(far):
    from whale.metrics import retrieval_protocol

    rng = np.random.default_rng(3)
    train_ids = np.array([f"a{i}" for i in rng.integers(0, 6, 30)])
    test_ids = np.array([f"b{i}" for i in rng.integers(0, 8, 25)])  # some with <= m images: never queried
    s_train = np.round(rng.random((25, 30)), 1)  # rounded: ties
    s_test = np.round(rng.random((25, 25)), 1)  # not symmetric: a pair scores the mean of both directions
    got = retrieval_protocol(s_train, s_test, train_ids, test_ids, m=2, redraws=4, seed=9, far=far)
    tops, (tpr, auc, pairs, positive) = _retrieval_loop(s_train, s_test, train_ids, test_ids, 2, 4, 9, far)
    for k in (1, 5, 10):
        assert got[f"top{k}"][0] == pytest.approx(np.mean(tops[k]))
        assert got[f"top{k}"][1] == pytest.approx(np.std(tops[k]))
    assert got["tpr_at_far"] == pytest.approx(tpr)
    assert got["auc"] == pytest.approx(auc)
    assert (got["pairs"], got["positive_pairs"]) == (pairs, positive) == (25 * 24 // 2, positive)


def test_pair_set_is_every_pair_of_the_test_set_not_the_gallery():
    """Training images never enter TPR and AUC: the paper's pairs are those within the test fold."""
    from whale.metrics import retrieval_protocol

    test_ids = np.repeat(["x", "y", "z"], 4)
    s_test = (test_ids[:, None] == test_ids[None, :]).astype(float)
    confusing = np.ones((12, 5))  # training images scoring above every test pair
    got = retrieval_protocol(confusing, s_test, [f"t{i}" for i in range(5)], test_ids, m=2, redraws=3)
    assert got["tpr_at_far"] == 1.0 and got["auc"] == 1.0
    assert got["pairs"] == 66 and got["positive_pairs"] == 3 * 6
    assert got["top10"] == (1.0, 0.0) and got["top1"][0] < 1.0  # top-k does see the training images


def test_pair_verification_threshold_lets_through_at_most_far_of_the_negatives():
    from whale.metrics import pair_verification

    ids = np.array(["a", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"])
    s = np.zeros((12, 12))
    s[0, 1] = s[1, 0] = 0.5  # the one positive pair
    s[2, 3] = s[3, 2] = 0.9  # one negative pair above it
    got = pair_verification(s, ids, far=0.01)  # 65 negatives: no false accept allowed
    assert got["tpr_at_far"] == 0.0 and got["pairs"] == 66 and got["positive_pairs"] == 1
    assert pair_verification(s, ids, far=1 / 65)["tpr_at_far"] == 1.0  # one false accept allowed
    assert got["auc"] == pytest.approx((64 + 0.0) / 65)
    with pytest.raises(ValueError, match="positive"):
        pair_verification(np.zeros((3, 3)), ["a", "b", "c"])


def test_top_k_identities_counts_a_tie_as_chance_not_a_hit():
    from whale.metrics import top_k_identities

    flat = np.zeros((1, 20))
    gallery = [f"w{i}" for i in range(20)]
    got = top_k_identities(flat, gallery, ["w3"], ks=(1, 5, 10))
    assert got == {"top1": pytest.approx(1 / 20), "top5": pytest.approx(5 / 20), "top10": pytest.approx(10 / 20)}
    with pytest.raises(ValueError, match="absent"):
        top_k_identities(flat, gallery, ["w99"])


def test_retrieval_draws_leave_exactly_m_matches_per_query():
    from whale.metrics import retrieval_draws, retrieval_queries

    ids = np.array(["a"] * 5 + ["b"] * 3 + ["c"] * 2)
    draws = retrieval_draws(ids, m=2, redraws=6, seed=1)
    assert len(draws) == 6 and len({d.tobytes() for d in draws}) > 1
    for picked in draws:
        assert picked[ids == "a"].sum() == 2 and picked[ids == "b"].sum() == 2 and not picked[ids == "c"].any()
        assert list(ids[retrieval_queries(ids, picked, 2)]) == ["a"] * 3 + ["b"]
    assert all((a == b).all() for a, b in zip(draws, retrieval_draws(ids, m=2, redraws=6, seed=1)))


def test_retrieval_protocol_perfect_scores_and_refusals():
    from whale.metrics import retrieval_protocol

    test_ids = np.repeat(["x", "y", "z"], 4)
    train_ids = np.array(["t1", "t2"])
    s_test = (test_ids[:, None] == test_ids[None, :]).astype(float)  # same identity: 1, else 0
    got = retrieval_protocol(np.zeros((12, 2)), s_test, train_ids, test_ids, m=2, redraws=3)
    assert got["top1"] == (1.0, 0.0) and got["auc"] == 1.0 and got["tpr_at_far"] == 1.0
    assert got["queries"] == 6 and got["identities"] == 3
    with pytest.raises(ValueError, match="disjoint"):
        retrieval_protocol(np.zeros((12, 2)), s_test, ["x", "t2"], test_ids)
    with pytest.raises(ValueError, match="expected scores"):
        retrieval_protocol(np.zeros((3, 2)), s_test, train_ids, test_ids)
