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


def _retrieval_loop(s_train, s_test, train_ids, test_ids, m, redraws, seed, far):
    """Seed 002's protocol written as plain loops (the reference for :func:`retrieval_protocol`)."""
    rng = np.random.default_rng(seed)
    names, counts = np.unique(test_ids, return_counts=True)
    eligible = sorted(names[counts > m])
    tops, tprs, aucs = {1: [], 5: [], 10: []}, [], []
    for _ in range(redraws):
        picked = set()
        for name in eligible:
            members = [i for i, t in enumerate(test_ids) if t == name]
            picked |= set(rng.choice(members, m, replace=False).tolist())
        gal = [("train", j) for j in range(len(train_ids))] + [("test", j) for j in sorted(picked)]
        hits = {1: 0, 5: 0, 10: 0}
        pos, neg, nq = [], [], 0
        for q, t in enumerate(test_ids):
            if q in picked or t not in eligible:
                continue
            nq += 1
            best = {}
            for kind, j in gal:
                sc = s_train[q, j] if kind == "train" else s_test[q, j]
                gid = train_ids[j] if kind == "train" else test_ids[j]
                best[gid] = max(best.get(gid, -np.inf), sc)
                (pos if gid == t else neg).append(sc)
            rank = sum(v > best[t] for v in best.values())
            for k in hits:
                hits[k] += rank < k
        for k in hits:
            tops[k].append(hits[k] / nq)
        neg_sorted = sorted(neg)
        cut = neg_sorted[min(len(neg) - 1, int(np.ceil((1 - far) * len(neg))))]
        tprs.append(np.mean([p > cut for p in pos]))
        aucs.append(np.mean([np.mean([(p > n) + 0.5 * (p == n) for n in neg]) for p in pos]))
    return tops, tprs, aucs


def test_retrieval_protocol_matches_a_loop_with_ties_and_small_ids():
    from whale.metrics import retrieval_protocol

    rng = np.random.default_rng(3)
    train_ids = np.array([f"a{i}" for i in rng.integers(0, 6, 30)])
    test_ids = np.array([f"b{i}" for i in rng.integers(0, 8, 25)])  # some with <= m images: never queried
    s_train = np.round(rng.random((25, 30)), 1)  # rounded: ties
    s_test = np.round(rng.random((25, 25)), 1)
    got = retrieval_protocol(s_train, s_test, train_ids, test_ids, m=2, redraws=4, seed=9)
    tops, tprs, aucs = _retrieval_loop(s_train, s_test, train_ids, test_ids, 2, 4, 9, 0.01)
    for k in (1, 5, 10):
        assert got[f"top{k}"][0] == pytest.approx(np.mean(tops[k]))
        assert got[f"top{k}"][1] == pytest.approx(np.std(tops[k]))
    assert got["tpr_at_far"][0] == pytest.approx(np.mean(tprs))
    assert got["auc"][0] == pytest.approx(np.mean(aucs))


def test_retrieval_protocol_perfect_scores_and_refusals():
    from whale.metrics import retrieval_protocol

    test_ids = np.repeat(["x", "y", "z"], 4)
    train_ids = np.array(["t1", "t2"])
    s_test = (test_ids[:, None] == test_ids[None, :]).astype(float)  # same identity: 1, else 0
    got = retrieval_protocol(np.zeros((12, 2)), s_test, train_ids, test_ids, m=2, redraws=3)
    assert got["top1"] == (1.0, 0.0) and got["auc"] == (1.0, 0.0) and got["tpr_at_far"] == (1.0, 0.0)
    assert got["queries"] == 6 and got["identities"] == 3
    with pytest.raises(ValueError, match="disjoint"):
        retrieval_protocol(np.zeros((12, 2)), s_test, ["x", "t2"], test_ids)
    with pytest.raises(ValueError, match="expected scores"):
        retrieval_protocol(np.zeros((3, 2)), s_test, train_ids, test_ids)
