"""PairCalibration: P(same individual | score) from a run's labelled pairs, checked on hand-built matrices."""
import json

import numpy as np
import pytest

from whale.core.errors import DataError
from whale.ranking.pairprob import PRIOR_PAIRS, PairCalibration, logit, pair_counts, pava


def _gallery(n_ids=100, per_id=4, n_new=50):
    """Queries: one per individual plus ``n_new`` of individuals the gallery lacks; gallery: ``per_id`` each."""
    q = np.array([f"w{i}" for i in range(n_ids)] + ["new_whale"] * n_new)
    g = np.repeat([f"w{i}" for i in range(n_ids)], per_id)
    return q, g


def _gaussian_scores(q, g, mu0, mu1, sd, rng):
    """Scores whose logit is N(mu1, sd) for same-individual pairs and N(mu0, sd) for the others."""
    same = q[:, None] == g[None, :]
    x = np.where(same, rng.normal(mu1, sd, same.shape), rng.normal(mu0, sd, same.shape))
    return (1 / (1 + np.exp(-x))).astype(np.float32), same


def test_a_known_logistic_relation_is_recovered_with_negatives_subsampled_and_reweighted():
    rng = np.random.default_rng(0)
    q, g = _gallery(200, 5, 50)
    mu0, mu1, sd = -3.0, 1.0, 1.0
    s, same = _gaussian_scores(q, g, mu0, mu1, sd, rng)
    base = same.mean()
    # posterior log-odds of a Gaussian pair of equal spread: linear in logit(score)
    a_true = (mu1 - mu0) / sd**2
    b_true = (mu0**2 - mu1**2) / (2 * sd**2) + np.log(base / (1 - base))
    cal = PairCalibration.fit(s, q, g, method="logistic", max_negatives=20_000)
    assert cal.n_positive == int(same.sum()) and cal.n_negative == int((~same).sum())
    assert 19_000 < cal.n_drawn < 21_000  # about max_negatives of 249,000
    assert cal.base_rate == pytest.approx(base)
    assert cal.coef[0] == pytest.approx(a_true, rel=0.1)
    assert cal.coef[1] == pytest.approx(b_true, abs=0.4)
    grid = np.linspace(0.01, 0.99, 50)
    true_p = 1 / (1 + np.exp(-(a_true * logit(grid) + b_true)))
    assert np.abs(cal.transform(grid) - true_p).max() < 0.06
    iso = PairCalibration.fit(s, q, g, max_negatives=20_000)
    mid = (grid > 0.2) & (grid < 0.95)  # where both kinds of pair are frequent enough to estimate
    err = np.abs(iso.transform(grid[mid]) - true_p[mid])
    assert err.max() < 0.2 and err.mean() < 0.05  # a step fit of 1,000 positives: close, not smooth
    # without the reweighting the sample's base rate would be 12x the true one: the mean probability says which
    assert float(iso.transform(s).mean()) == pytest.approx(base, rel=0.15)


def test_the_maps_are_monotone_and_a_constant_score_run_gets_its_base_rate():
    rng = np.random.default_rng(1)
    q, g = _gallery(30, 3, 10)
    s, same = _gaussian_scores(q, g, -2.0, 0.5, 1.5, rng)
    grid = np.sort(np.concatenate([rng.random(500), [0.0, 1.0]])).astype(np.float32)
    for method in ("isotonic", "logistic"):
        p = PairCalibration.fit(s, q, g, method=method).transform(grid)
        assert p.dtype == np.float32 and p.shape == grid.shape
        assert (np.diff(p) >= 0).all() and 0 < p.min() and p.max() < 1
    flat = np.full_like(s, 0.3)
    for method in ("isotonic", "logistic"):
        cal = PairCalibration.fit(flat, q, g, method=method)
        np.testing.assert_allclose(cal.transform(np.array([0.0, 0.3, 0.9])), same.mean(), rtol=1e-4)


def test_a_matrix_mostly_of_exact_zeros_as_the_keypoint_matchers_calibrates_by_the_pairs_at_each_value():
    rng = np.random.default_rng(2)
    q, g = _gallery(60, 3, 20)
    same = q[:, None] == g[None, :]
    # 84% zeros; of the rest, same-individual pairs score high more often
    s = np.zeros(same.shape, np.float32)
    verified = rng.random(same.shape) < np.where(same, 0.7, 0.14)
    s[verified] = np.where(same, rng.uniform(0.3, 1.0, same.shape), rng.uniform(0.0, 0.5, same.shape))[verified]
    assert 0.8 < (s == 0).mean() < 0.9
    cal = PairCalibration.fit(s, q, g)
    from sklearn.isotonic import IsotonicRegression

    brute = IsotonicRegression(out_of_bounds="clip").fit(s.ravel(), same.ravel().astype(float))  # every pair
    probe = np.float32([0.0, 0.2, 0.45, 0.8])
    np.testing.assert_allclose(cal.transform(probe[:1]), brute.predict(probe[:1]), rtol=0.01)
    assert np.abs(cal.transform(probe) - brute.predict(probe)).max() < 0.08  # between blocks: interpolated
    assert float(cal.transform(np.ones(1))[0]) > 0.9
    assert cal.score_for(0.5) == pytest.approx(
        float(np.interp(0.5, cal.probs, cal.knots)), abs=1e-9)  # the score at which P reaches 0.5
    assert cal.transform(np.float32([cal.score_for(0.5) + 1e-4]))[0] >= 0.5 > cal.transform(
        np.float32([cal.score_for(0.5) - 1e-3]))[0]


def test_left_out_pairs_and_unlabelled_gallery_photos_are_not_pairs_and_the_draw_is_seeded():
    ids = np.array(["a", "a", "b", "b", "c", "new_whale"])
    s = np.full((6, 6), 0.1, np.float32)
    s[0, 1] = s[1, 0] = s[2, 3] = s[3, 2] = 0.9
    np.fill_diagonal(s, 1.0)
    cal = PairCalibration.fit(s, ids, ids, skip=np.arange(6))
    # same pairs: (a,a) x2, (b,b) x2; the diagonal left out; the new_whale column never counts
    assert (cal.n_positive, cal.n_negative) == (4, 6 * 5 - 5 - 4)
    assert float(cal.transform(np.float32([1.0]))[0]) == pytest.approx((4 + 2 * 4 / 25) / (4 + 2))
    with_self = PairCalibration.fit(s, ids, ids)
    assert with_self.n_positive == 4 + 5  # each labelled photo with itself
    rng = np.random.default_rng(3)
    q, g = _gallery(40, 3, 10)
    big, _ = _gaussian_scores(q, g, -2.0, 1.0, 1.0, rng)
    one, two = (PairCalibration.fit(big, q, g, max_negatives=500, seed=7) for _ in range(2))
    assert one == two and PairCalibration.fit(big, q, g, max_negatives=500, seed=8) != one


def test_a_calibration_goes_through_json_and_a_bad_one_is_named():
    rng = np.random.default_rng(4)
    q, g = _gallery(20, 3, 5)
    s, _ = _gaussian_scores(q, g, -2.0, 1.0, 1.0, rng)
    for method in ("isotonic", "logistic"):
        cal = PairCalibration.fit(s, q, g, method=method)
        back = PairCalibration.from_dict(json.loads(json.dumps(cal.to_dict())))
        assert back == cal
        np.testing.assert_array_equal(back.transform(s), cal.transform(s))
    raw = cal.to_dict()
    raw["base_rate"] = 1.5
    with pytest.raises(DataError, match=r"cal.json: base_rate: expected a number in \(0, 1\)"):
        PairCalibration.from_dict(raw, "cal.json")
    del raw["knots"]
    with pytest.raises(DataError, match="cal.json: knots: missing"):
        PairCalibration.from_dict(raw, "cal.json")
    with pytest.raises(DataError, match="pairs of the same individual and of different ones; got 0 same"):
        PairCalibration.fit(s[:, :3], np.array(["x"] * len(q)), g[:3])
    with pytest.raises(DataError, match="expected one of isotonic, logistic"):
        PairCalibration.fit(s, q, g, method="platt")


def test_pava_pools_exactly_the_violating_neighbours():
    y = np.array([0.1, 0.5, 0.3, 0.2, 0.9])
    starts, ends = pava(y, np.ones(5))
    assert starts.tolist() == [0, 1, 4] and ends.tolist() == [1, 4, 5]


def _brute_pav_blocks(y, w):
    """Blocks ``[(start, end)]`` of pool-adjacent-violators by its definition: merge the first two neighbouring
    blocks whose weighted means do not increase, again and again, until none is left (slow, obviously right)."""
    blocks = [[i, i + 1, y[i] * w[i], w[i]] for i in range(len(y))]
    merged = True
    while merged:
        merged = False
        for i in range(len(blocks) - 1):
            a, b = blocks[i], blocks[i + 1]
            if a[2] / a[3] >= b[2] / b[3]:
                blocks[i:i + 2] = [[a[0], b[1], a[2] + b[2], a[3] + b[3]]]
                merged = True
                break
    return [(a, b) for a, b, _, _ in blocks]


def _reference_isotonic(scores, q, g, **kw):
    """The isotonic map as the Python loop fitted it before scikit-learn: brute-force blocks of the positive
    share, each shrunk by PRIOR_PAIRS pairs at the base rate, interpolated between the blocks' mean scores."""
    values, pos, neg, n_pos, n_neg, _ = pair_counts(scores, q, g, **kw)
    base, total = n_pos / (n_pos + n_neg), pos + neg
    centres, probs = [], []
    for lo, hi in _brute_pav_blocks(pos / total, total):
        weight = total[lo:hi].sum()
        centres.append(float((values[lo:hi] * total[lo:hi]).sum() / weight))
        probs.append(float((pos[lo:hi].sum() + PRIOR_PAIRS * base) / (weight + PRIOR_PAIRS)))
    return np.array(centres), np.maximum.accumulate(probs)


def test_the_scikit_learn_isotonic_fit_gives_the_python_loops_probabilities():
    rng = np.random.default_rng(5)
    q, g = _gallery(40, 3, 10)
    gauss, same = _gaussian_scores(q, g, -2.0, 1.0, 1.2, rng)
    zeros = np.where(rng.random(same.shape) < np.where(same, 0.3, 0.85), 0.0, gauss).astype(np.float32)
    coarse = np.round(gauss * 8) / 8  # few distinct values: ties of shares, blocks of equal means
    tiny = (gauss * 1e-12).astype(np.float32)  # scores closer than 1e-15 (IsotonicRegression would pool them)
    cases = [(gauss, {}), (zeros, {}), (coarse.astype(np.float16), {}), (tiny, {}),
             (gauss, {"max_negatives": 700, "seed": 3}),  # negatives weighing 7.3 pairs each: counts not whole
             (zeros, {"skip": rng.integers(-1, len(g), len(q))})]
    probe = np.concatenate([np.linspace(-0.1, 1.1, 301), rng.random(300), [0.0, 1.0]])
    for scores, kw in cases:
        knots, probs = _reference_isotonic(scores, q, g, **kw)
        cal = PairCalibration.fit(scores, q, g, **kw)
        assert len(knots) == len(cal.knots) >= 1
        np.testing.assert_allclose(cal.knots, knots, rtol=1e-9, atol=1e-30)
        np.testing.assert_allclose(cal.probs, probs, rtol=0, atol=1e-9)
        x = probe * 1e-12 if scores is tiny else probe
        want = np.interp(np.concatenate([x, scores.ravel()[:500].astype(np.float64)]), knots, probs)
        got = cal.transform(np.concatenate([x, scores.ravel()[:500].astype(np.float64)]))
        assert np.abs(got - want).max() < 1e-6
    assert len(PairCalibration.fit(gauss, q, g).knots) > 10  # not a trivial one-block fit
    # the blocks themselves, weighted, with ties of equal means pooled as the loop pooled them
    for y, w in [(np.array([0.1, 0.5, 0.3, 0.2, 0.9]), np.ones(5)),
                 (np.array([0.5, 0.5, 0.25, 1.0]), np.array([2, 4, 1, 3.5])),
                 (rng.integers(0, 3, 200) / 2.0, rng.random(200) + 0.1)]:
        starts, ends = pava(y, w)
        assert list(zip(starts.tolist(), ends.tolist())) == _brute_pav_blocks(y, w)
