"""Ranking: per-id max, top 5, new_whale insertion and thresholds, against Table 2 and loops."""

import numpy as np
import pytest

from whale import NEW_WHALE
from whale.metrics import map_at_k
from whale.ranking import (
    new_whale_share,
    per_id_scores,
    predict_top5,
    rank_from_id_scores,
    threshold_for_fraction,
    threshold_grid,
    top_id_scores,
    tune_threshold,
)

TABLE2_SCORES = np.array([[0.995, 0.991, 0.985, 0.8, 0.7, 0.55]], dtype=np.float32)
TABLE2_IDS = ["w1", "w10", "w1", "w5", "w7", "w8"]


def brute_force(scores, gallery_ids, threshold):
    """The paper's rule, one query and one gallery image at a time."""
    out = []
    for row in scores:
        best = {}
        for s, gid in zip(row.tolist(), gallery_ids):
            if gid != NEW_WHALE:
                best[gid] = max(best.get(gid, -np.inf), s)
        top = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        labels, inserted = [], False
        for gid, s in top:
            if not inserted and float(s) < threshold:
                labels.append(NEW_WHALE)
                inserted = True
            labels.append(gid)
        if not inserted:
            labels.append(NEW_WHALE)
        out.append(labels[:5])
    return out


def random_case(rng, n_q=40, n_g=60, n_ids=12, new_share=0.3):
    ids = np.array([f"w{i}" for i in rng.integers(0, n_ids, n_g)])
    ids[rng.random(n_g) < new_share] = NEW_WHALE
    scores = rng.random((n_q, n_g)).astype(np.float32)
    return scores, ids


def test_table2_exact():
    assert predict_top5(TABLE2_SCORES, TABLE2_IDS, 0.98) == [["w1", "w10", NEW_WHALE, "w5", "w7"]]
    names, id_scores = per_id_scores(TABLE2_SCORES, TABLE2_IDS)
    assert names.tolist() == ["w1", "w10", "w5", "w7", "w8"]
    np.testing.assert_allclose(id_scores, [[0.995, 0.991, 0.8, 0.7, 0.55]], rtol=1e-6)
    assert rank_from_id_scores(names, id_scores, 0.98) == [["w1", "w10", NEW_WHALE, "w5", "w7"]]


@pytest.mark.parametrize(
    "t, expected",
    [
        (0.5, ["w1", "w10", "w5", "w7", "w8"]),
        (0.999, [NEW_WHALE, "w1", "w10", "w5", "w7"]),
        (0.993, ["w1", NEW_WHALE, "w10", "w5", "w7"]),
        (0.6, ["w1", "w10", "w5", "w7", NEW_WHALE]),
    ],
)
def test_table2_other_thresholds(t, expected):
    assert predict_top5(TABLE2_SCORES, TABLE2_IDS, t) == [expected]


def test_new_whale_gallery_never_predicted_as_id():
    scores = np.array([[0.99, 0.1, 0.2], [0.999, 0.9, 0.3]], dtype=np.float32)
    ids = [NEW_WHALE, "a", "b"]
    for t in (0.0, 0.5, 1.0):
        for labels in predict_top5(scores, ids, t):
            assert labels.count(NEW_WHALE) == 1
            assert set(labels) == {NEW_WHALE, "a", "b"}
    names, _ = per_id_scores(scores, ids)
    assert NEW_WHALE not in names.tolist()


def test_fewer_than_five_ids_pads_with_distinct_new_whale():
    scores = np.array([[0.9, 0.2]], dtype=np.float32)
    assert predict_top5(scores, ["a", "b"], 0.0) == [["a", "b", NEW_WHALE]]
    assert predict_top5(scores, ["a", "b"], 0.5) == [["a", NEW_WHALE, "b"]]
    scores4 = np.array([[0.9, 0.8, 0.7, 0.6]], dtype=np.float32)
    assert predict_top5(scores4, list("abcd"), 0.0) == [["a", "b", "c", "d", NEW_WHALE]]


def test_ties_broken_by_name():
    scores = np.ones((1, 7), dtype=np.float32)
    scores[0, 6] = 0.5
    names = ["g", "f", "e", "d", "c", "b", "a"]
    assert predict_top5(scores, names, 0.0) == [["b", "c", "d", "e", "f"]]
    assert rank_from_id_scores(names, scores, 0.0) == [["b", "c", "d", "e", "f"]]
    # float16 scores saturate to 1.0 often: many ties, still the name order.
    rng = np.random.default_rng(1)
    s16 = np.round(rng.random((30, 40)) * 4).astype(np.float16) / 4
    ids = np.array([f"w{i:02d}" for i in rng.integers(0, 15, 40)])
    for t in (0.3, 0.8):
        assert predict_top5(s16, ids, t, block=7) == brute_force(s16.astype(np.float32), ids.tolist(), t)


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    scores, ids = random_case(rng, n_ids=[3, 6, 12, 30, 60][seed])
    for t in (0.0, 0.3, 0.9, 0.97, 1.0):
        expected = brute_force(scores, ids.tolist(), t)
        assert predict_top5(scores, ids, t, block=9) == expected
        names, id_scores = per_id_scores(scores, ids, block=5)
        assert rank_from_id_scores(names, id_scores, t) == expected


def test_per_id_scores_vs_loop():
    rng = np.random.default_rng(7)
    scores, ids = random_case(rng)
    names, id_scores = per_id_scores(scores, ids)
    assert id_scores.dtype == np.float32 and id_scores.shape == (40, names.size)
    for j, name in enumerate(names):
        np.testing.assert_array_equal(id_scores[:, j], scores[:, ids == name].max(axis=1))


def test_tune_threshold_equals_brute_force():
    rng = np.random.default_rng(3)
    scores, ids = random_case(rng, n_q=50, n_g=80, n_ids=10, new_share=0.2)
    known = sorted(set(ids.tolist()) - {NEW_WHALE})
    query_ids = np.array([NEW_WHALE if rng.random() < 0.3 else rng.choice(known + ["unseen"])
                          for _ in range(50)])
    grid = np.concatenate([np.linspace(0, 1, 41), np.sort(scores.ravel()[:20]).astype(np.float64)])
    best_t, best_map, maps = tune_threshold(scores, ids, query_ids, grid=grid, block=8)
    expected = [map_at_k(predict_top5(scores, ids, t), query_ids) for t in grid]
    np.testing.assert_allclose(maps, expected, rtol=0, atol=1e-12)
    assert best_map == pytest.approx(max(expected))
    assert best_t == grid[int(np.argmax(expected))]


def test_threshold_grid():
    grid = threshold_grid()
    assert np.all(np.diff(grid) > 0) and grid[0] == 0.0 and grid[-1] == 1.0
    for t in (0.5, 0.98, 0.99, 0.995, 0.999, 0.9999):
        assert np.isclose(grid, t, rtol=0, atol=1e-12).any()


def test_threshold_for_fraction_hits_share():
    rng = np.random.default_rng(5)
    top1 = rng.random(1000).astype(np.float32)
    for fraction in (0.0, 0.276, 0.5, 1.0):
        t = threshold_for_fraction(top1, fraction)
        assert new_whale_share(top1, t) == pytest.approx(fraction, abs=1e-3)
    # the share is computed like predict_top5 inserts new_whale at rank 1
    scores = rng.random((200, 30)).astype(np.float32)
    ids = np.array([f"w{i}" for i in range(30)])
    _, _, vals = top_id_scores(scores, ids)
    t = threshold_for_fraction(vals[:, 0], 0.3)
    first = [labels[0] == NEW_WHALE for labels in predict_top5(scores, ids, t)]
    assert np.mean(first) == pytest.approx(0.3)
    # ties: the closest achievable share
    assert new_whale_share(np.array([0.5, 0.5, 0.5, 0.9]), threshold_for_fraction(np.array([0.5, 0.5, 0.5, 0.9]), 0.3)) == 0.0


def test_input_errors():
    with pytest.raises(ValueError, match="gallery_ids has 2"):
        predict_top5(TABLE2_SCORES, ["a", "b"], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        predict_top5(np.array([[np.nan, 0.1]], dtype=np.float32), ["a", "b"], 0.5)
    with pytest.raises(ValueError, match="query_ids has 3"):
        tune_threshold(TABLE2_SCORES, TABLE2_IDS, ["a", "b", "c"])
    with pytest.raises(ValueError, match="new_whale"):
        rank_from_id_scores(["a", NEW_WHALE], np.zeros((1, 2), np.float32), 0.5)
    with pytest.raises(ValueError, match="fraction"):
        threshold_for_fraction(np.array([0.5]), 1.5)


def test_id_groups_reduce_and_find_the_best_column_as_a_loop_does():
    from whale.ranking.topids import IdGroups

    rng = np.random.default_rng(3)
    ids = rng.choice(["a", "b", "c", NEW_WHALE], size=17)
    ids[:3] = ["a", "b", "c"]
    block = np.round(rng.random((4, 17)), 1).astype(np.float32)  # ties within ids
    g = IdGroups.of(ids)
    assert g.names.tolist() == ["a", "b", "c"]
    per_id = g.max(block)
    top = np.argsort(-per_id, axis=1, kind="stable")
    best = g.best_columns(block, top)
    for r in range(4):
        for j, i in enumerate(top[r]):
            cols = np.flatnonzero(ids == g.names[i])
            assert per_id[r, i] == block[r, cols].max()
            assert best[r, j] == cols[np.argmax(block[r, cols])]  # the first column holding the maximum
    codes = IdGroups.of(np.array([2, 0, 2, 1]), open_label=None)
    assert codes.names.tolist() == [0, 1, 2] and codes.max(np.array([[1.0, 2.0, 3.0, 4.0]])).tolist() == [[2.0, 4.0, 3.0]]


@pytest.mark.parametrize("n_ids", [3, 9])
def test_predictions_from_the_top_ids_are_predict_top5s(n_ids):
    from types import SimpleNamespace

    from whale.ranking.newwhale import predict_from_top, predict_top5
    from whale.ranking.topids import top_ids

    rng = np.random.default_rng(n_ids)
    gallery = np.array([f"w{i % n_ids}" for i in range(2 * n_ids)] + [NEW_WHALE])
    scores = np.round(rng.random((30, gallery.size)), 1).astype(np.float32)  # many ties
    top = top_ids(SimpleNamespace(scores=scores, gallery_ids=gallery, n_query=30, query_ids=None))
    for t in (0.0, 0.35, 0.8, 1.1):
        assert predict_from_top(top, t) == predict_top5(scores, gallery, t)
