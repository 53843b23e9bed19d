"""Linear assignment solvers for Algorithm 1: ``lap`` when installed, scipy otherwise.

``lap`` (Jonker-Volgenant, ``lapjv`` dense and ``lapmod`` sparse) is the reference code's
solver and the fastest one measured here (dense 5,000 x 5,000: 1.9 s vs scipy's 3.4 s).
Kaggle's GPU image does not install it (the code dataset ships a wheel; see
:mod:`whale.kaggle.kernels`), so when ``import lap`` fails the same problems are solved by
``scipy.optimize.linear_sum_assignment`` (dense) and
``scipy.sparse.csgraph.min_weight_full_bipartite_matching`` (sparse, LAPJVsp). Both give an
optimum of the same problem, so the total cost is the same; among several optimal
assignments they may pick different ones. One line on stderr says so, once per process.

Conventions of the sparse solve are those of ``lap.lapmod`` whichever solver runs: costs in
``[0, LARGE)``, rows in CSR form with sorted column indices, and a problem the caller has
checked to be feasible (a perfect matching exists among the candidates).
"""

from __future__ import annotations

import functools
import sys

import numpy as np

__all__ = ["LARGE", "solve_dense", "solve_sparse", "solver_name"]

# lap.LARGE of lap 0.5.13: lapmod treats costs >= LARGE as missing entries.
LARGE = 1e6


@functools.cache
def _lap():
    """The ``lap`` module, or None (then one line on stderr says scipy is used instead)."""
    try:
        import lap
    except ImportError:
        print("whale.mining: package 'lap' is not installed; solving the negative assignments with "
              "scipy instead (same optimum, slower on large problems)", file=sys.stderr, flush=True)
        return None
    return lap


def solver_name() -> str:
    """``"lap"`` or ``"scipy"``: which library :func:`solve_dense` and :func:`solve_sparse` use."""
    return "lap" if _lap() is not None else "scipy"


def solve_dense(cost: np.ndarray) -> np.ndarray:
    """Minimum-cost assignment of a square cost matrix.

    Args:
        cost: ``[n, n]`` float64, finite.

    Returns:
        ``[n]`` int64 ``x``: row ``i`` is assigned column ``x[i]`` (a permutation).
    """
    lap = _lap()
    if lap is not None:
        return np.asarray(lap.lapjv(cost, extend_cost=False, return_cost=False)[0], dtype=np.int64)
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost)
    x = np.empty(cost.shape[0], dtype=np.int64)
    x[rows] = cols
    return x


def solve_sparse(n: int, cost: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Minimum-cost perfect matching restricted to the given entries (``lap.lapmod`` form).

    Args:
        n: rows = columns.
        cost: ``[m]`` float64 in ``[0, LARGE)``, the entries in CSR order.
        indptr: ``[n + 1]`` int32, row ``i``'s entries are ``indptr[i]:indptr[i + 1]``.
        indices: ``[m]`` int32 column of each entry, sorted within each row.

    Returns:
        ``[n]`` int64 ``x``, row ``i`` matched to column ``x[i]``. The caller checks
        feasibility first: ``lapmod`` answers an infeasible problem with pairs that are not
        entries, scipy raises ``ValueError``.
    """
    lap = _lap()
    if lap is not None:
        x, _ = lap.lapmod(n, cost, indptr, indices, return_cost=False)
        return np.asarray(x, dtype=np.int64)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    # LAPJVsp reads explicit zeros as missing edges: shift every cost by 1 (a constant added
    # to every row of a perfect matching does not change which matching is optimal).
    graph = csr_matrix((np.asarray(cost, dtype=np.float64) + 1.0, indices, indptr), shape=(n, n))
    rows, cols = min_weight_full_bipartite_matching(graph)
    x = np.empty(n, dtype=np.int64)
    x[rows] = cols
    return x
