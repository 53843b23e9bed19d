"""whale.mining.solvers: scipy's solvers stand in for `lap` (absent on Kaggle) with equal optima."""
import importlib.util
import sys

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from whale.mining import mine_negatives, mine_negatives_sparse, validate_negative_pairs
from whale.mining import solvers


@pytest.fixture
def no_lap(monkeypatch):
    """`import lap` fails, as on Kaggle's image."""
    monkeypatch.setitem(sys.modules, "lap", None)
    solvers._lap.cache_clear()
    yield
    solvers._lap.cache_clear()


def _dense(seed, n, integer):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4, (n, n)).astype(np.float64) if integer else rng.random((n, n))


def _sparse(seed, n, per_row):
    """A feasible CSR problem: ``per_row`` random columns per row plus a permutation; zeros included."""
    rng = np.random.default_rng(seed)
    rows = np.r_[np.repeat(np.arange(n), per_row), np.arange(n)]
    cols = np.r_[rng.integers(0, n, n * per_row), rng.permutation(n)]
    keys = np.unique(rows * n + cols)
    cost = np.round(rng.random(len(keys)) * 3, 1)  # ties and exact zeros
    indptr = np.searchsorted(keys // n, np.arange(n + 1)).astype(np.int32)
    return cost, indptr, (keys % n).astype(np.int32), keys


def _sparse_total(n, keys, cost, x):
    chosen = np.arange(n) * n + x
    pos = np.searchsorted(keys, chosen)
    assert (keys[np.minimum(pos, len(keys) - 1)] == chosen).all(), "a pair outside the entries"
    return cost[pos].sum()


def test_fallback_says_so_once_on_stderr(no_lap, capsys):
    assert solvers.solver_name() == "scipy"
    solvers.solve_dense(_dense(0, 5, False))
    solvers.solve_dense(_dense(1, 5, False))
    err = capsys.readouterr().err
    assert err.count("'lap' is not installed") == 1 and err.count("\n") == 1, err


def _solvers():
    """``["scipy", "lap"]``, or ``["scipy"]`` where lap is not installed (the Kaggle rehearsal)."""
    return ["scipy"] + ([] if importlib.util.find_spec("lap") is None else ["lap"])


def _with(name, fn):
    """``fn()`` with the named solver in force (lap hidden for "scipy")."""
    solvers._lap.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            if name == "scipy":
                mp.setitem(sys.modules, "lap", None)
            assert solvers.solver_name() == name
            return fn()
    finally:
        solvers._lap.cache_clear()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("integer", [False, True])
def test_dense_fallback_total_cost_equals_lap_and_brute_force(seed, integer):
    cost = _dense(seed, 30, integer)
    r, c = linear_sum_assignment(cost)
    for name in _solvers():
        x = _with(name, lambda: solvers.solve_dense(cost))
        assert sorted(x) == list(range(30)), name
        assert cost[np.arange(30), x].sum() == pytest.approx(cost[r, c].sum(), abs=1e-9), name


@pytest.mark.parametrize("seed", range(4))
def test_sparse_fallback_total_cost_equals_lap_and_the_dense_optimum(seed):
    n = 40
    cost, indptr, indices, keys = _sparse(seed, n, 3)
    dense = np.full((n, n), 1e5)
    dense[keys // n, keys % n] = cost
    r, c = linear_sum_assignment(dense)
    optimum = dense[r, c].sum()
    for name in _solvers():
        x = _with(name, lambda: solvers.solve_sparse(n, cost, indptr, indices))
        assert sorted(x) == list(range(n)), name
        assert _sparse_total(n, keys, cost, x) == pytest.approx(optimum, abs=1e-9), name


def _problem(seed, n=24, n_ids=7):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_ids, n)
    while np.bincount(ids).max() * 2 > n:
        ids = rng.integers(0, n_ids, n)
    return rng.random((n, n)), ids


def _costs_per_epoch(scores, pairs_list):
    return [scores[p[:, 0], p[:, 1]].sum() for p in pairs_list]


@pytest.mark.parametrize("k", [0.0, 0.4])
def test_miners_keep_every_rule_and_the_same_first_optimum_with_either_solver(k):
    scores, ids = _problem(3)
    n = len(ids)
    r, c = (a.ravel() for a in np.indices((n, n)))
    # The first epoch's cost matrices, as the miners build them (same seeds, module docstring).
    dense_cost = -scores + k * np.random.default_rng(1).random((n, n))
    keep = ids[r] != ids[c]
    sparse_cost = np.full((n, n), np.nan)
    sparse_cost[r[keep], c[keep]] = -scores[r[keep], c[keep]] + k * np.random.default_rng(1).random(keep.sum())
    first = {}
    for name in _solvers():
        dense = _with(name, lambda: mine_negatives(scores, ids, k, 5, np.random.default_rng(1)))
        sparse = _with(name, lambda: mine_negatives_sparse(r, c, scores[r, c], ids, k, 5,
                                                          np.random.default_rng(1)))
        validate_negative_pairs(dense, ids, n)
        validate_negative_pairs(sparse, ids, n)
        first[name] = (dense_cost[dense[0][:, 0], dense[0][:, 1]].sum(),
                       sparse_cost[sparse[0][:, 0], sparse[0][:, 1]].sum())
        if k == 0.0:  # the same problem dense or sparse: equal optimum in every epoch
            np.testing.assert_allclose(_costs_per_epoch(scores, dense), _costs_per_epoch(scores, sparse))
    for name, costs in first.items():
        np.testing.assert_allclose(costs, first["scipy"], atol=1e-9, err_msg=name)
    # and the first epoch is the brute-force optimum (same-id entries forbidden)
    forbidden = np.where(ids[:, None] == ids[None, :], 1e4, dense_cost)
    rr, cc = linear_sum_assignment(forbidden)
    assert first["scipy"][0] == pytest.approx(forbidden[rr, cc].sum(), abs=1e-9)


def test_sparse_fallback_fill_without_lap(no_lap):
    """Too few candidates: random valid partners are added, the rules still hold."""
    scores, ids = _problem(5, n=20, n_ids=5)
    rows = np.arange(20)
    cols = (rows + 1) % 20  # one candidate per row, some same-id (dropped)
    out = mine_negatives_sparse(rows, cols, scores[rows, cols], ids, 0.1, 3, np.random.default_rng(0))
    validate_negative_pairs(out, ids, 20)
