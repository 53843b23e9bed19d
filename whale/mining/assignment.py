"""Algorithm 1 (adversarial negative mining): the linear assignment on the noisy score matrix.

Negatives (paper, Algorithm 1). Every few epochs the current model scores every training
image against every other one, ``S[i, j]`` = probability of a match. The cost is

    T[i, j] = maxval                          if ids[i] == ids[j] (the diagonal included)
    T[i, j] = -S[i, j] + k * U(0, 1)          otherwise

with the noise drawn once per mining. For each of the following ``epochs`` epochs the linear
assignment on ``T`` (Jonker-Volgenant, package ``lap``; scipy when ``lap`` is missing,
:mod:`whale.mining.solvers`) gives every image ``i`` one partner
``x[i]``, each image being chosen as a partner exactly once; ``(i, x[i])`` are that epoch's
negative pairs; then ``T[i, x[i]] = maxval`` so that later epochs pick new pairs. Large ``k``
gives nearly random negatives, small ``k`` the hardest ones (highest score). Never start
training with a small ``k``.

Choices made here, and why:

* The dense cost is built in place in ONE ``float64`` ``[n, n]`` array: ``lap.lapjv`` works in
  float64 and would silently copy a float32 matrix, so building float64 directly keeps a single
  ``n x n`` copy (the reference code kept two). The noise is drawn in row blocks into a small
  buffer; ``Generator.random`` fills sequentially, so the values equal one
  ``rng.random((n, n))`` draw.
* Only the used ordered entry ``T[i, x[i]]`` is blocked after an epoch, as in the paper and its
  reference code. The mirrored ``(x[i], i)`` stays allowed: the head is symmetric, so it is the
  same pair of images, but one assignment can hold both ``(i, j)`` and ``(j, i)`` anyway (a
  2-cycle), so mirroring would not make pairs unique, and it would halve the pairs left for
  later epochs and make exhaustion come sooner. "No pair repeated" therefore means no ORDERED
  pair repeated across the returned epochs.
* A permutation ``x`` with ``ids[x[i]] != ids[i]`` for every ``i`` exists iff every id holds at
  most ``n / 2`` images (Hall's condition: the ``s`` rows of one id need ``s`` columns outside
  it, so ``s <= n - s``; conversely, listing images grouped by id and shifting the list by the
  largest group size gives such a permutation). This is checked before solving; a bigger id
  raises :class:`NoValidAssignment` instead of emitting same-id pairs. Later epochs can still
  run out of unused valid pairs; that is detected after solving (an assigned cost that reaches
  ``maxval``) and raises :class:`NoValidAssignment` too.
* ``maxval`` is the paper's constant. Forbidden entries cost ``maxval`` unless an assignment
  takes one: in theory an optimum can accept one ``maxval`` entry to save more than ``maxval``
  over the other ``n - 1`` rows (large ``k``, large ``n``). The solve is then repeated once
  with the forbidden entries raised to a bound no valid assignment can reach; a forbidden entry
  in that answer proves that no valid assignment exists.
* Sparse mining (:func:`mine_negatives_sparse`) solves the same problem restricted to candidate
  pairs with ``lap.lapmod`` (or scipy's LAPJVsp, same conventions). ``lapmod`` (lap 0.5.13)
  requires costs in ``[0, LARGE)`` (``LARGE`` = 1e6), column indices sorted within each row, and a feasible problem: on an
  infeasible one it silently returns pairs that are not candidates. Costs are therefore shifted
  to be non-negative (a constant shift does not change the optimum), and feasibility is checked
  first with a maximum bipartite matching. When the candidates admit no perfect matching (a row
  with no candidate left, or a set of rows sharing too few columns), random valid partners are
  added at cost ``maxval``: whole random permutations that avoid same-id pairs (the grouped
  shift above, with groups and members shuffled) and used pairs, until a perfect matching
  exists. Those fallback pairs are valid but random negatives; the optimum uses as few as it
  can. Never are same-id pairs emitted.

The caller drops ``new_whale`` (its images are different whales) before mining.
"""

from __future__ import annotations

import numpy as np

from whale.core.arrays import id_codes
from whale.core.errors import WhaleError
from whale.mining.solvers import LARGE, solve_dense, solve_sparse

__all__ = [
    "NoValidAssignment",
    "mine_negatives",
    "mine_negatives_sparse",
    "validate_negative_pairs",
]

# Rows per block when building the dense cost, so temporaries stay ~32 MB.
_BLOCK_ELEMS = 4_000_000
# Fallback permutations tried by the sparse miner before giving up.
_MAX_FILL_ROUNDS = 20


class NoValidAssignment(WhaleError):
    """No permutation avoids same-id pairs (and the pairs used in earlier epochs)."""


# --------------------------------------------------------------------------- helpers


def _largest_group(codes: np.ndarray) -> int:
    return int(np.bincount(codes).max()) if len(codes) else 0


def _check_k_epochs(k, epochs) -> tuple[float, int]:
    try:
        k = float(k)
    except (TypeError, ValueError):
        raise ValueError(f"k: expected a number >= 0, received {k!r}") from None
    if not np.isfinite(k) or k < 0:
        raise ValueError(f"k: expected a finite number >= 0, received {k!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 1:
        raise ValueError(f"epochs: expected an integer >= 1, received {epochs!r}")
    return k, int(epochs)


def _check_feasible(codes: np.ndarray, epochs: int) -> None:
    """Cheap necessary conditions, with the numbers in the message."""
    n = len(codes)
    if n < 2:
        raise NoValidAssignment(
            f"no valid negative assignment: need at least 2 images of 2 different ids, received n={n}"
        )
    big = _largest_group(codes)
    if 2 * big > n:
        raise NoValidAssignment(
            f"no valid negative assignment: the largest id holds {big} of n={n} images; every image "
            f"needs a partner of another id, which requires every id to hold at most n/2 = {n / 2:g}"
        )
    if epochs > n - big:
        raise NoValidAssignment(
            f"no valid negative assignment for {epochs} epochs: the images of the largest id "
            f"({big} of n={n}) have only {n - big} valid partners, so at most {n - big} epochs of "
            f"distinct pairs exist"
        )


def _valid_permutation(codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``[n]`` int64 permutation ``p`` with ``codes[p[i]] != codes[i]`` (needs largest id <= n/2).

    Images are listed grouped by id (random group order, random order inside groups) and each
    maps to the image ``big`` places further on, ``big`` = largest group size: a group is a run
    of length ``s <= big`` and ``big <= n - s``, so the shift never lands in the same run.
    """
    n = len(codes)
    big = _largest_group(codes)
    group_rank = rng.permutation(int(codes.max()) + 1)[codes]
    order = np.lexsort((rng.random(n), group_rank))
    perm = np.empty(n, dtype=np.int64)
    perm[order] = np.roll(order, -big)
    return perm


def validate_negative_pairs(pairs_list, ids, n: int) -> None:
    """Check mined negatives; raise ``ValueError`` naming the first broken rule.

    ``pairs_list``: list of ``(n, 2)`` int arrays, one per epoch; ``ids``: ``[n]`` labels.
    Rules: in every epoch each image is first element exactly once and second element exactly
    once (a permutation); no pair joins two images of the same id; no ordered pair appears in
    two epochs.
    """
    codes = id_codes(ids, n)
    seen = []
    for e, pairs in enumerate(pairs_list):
        pairs = np.asarray(pairs)
        if pairs.shape != (n, 2) or not np.issubdtype(pairs.dtype, np.integer):
            raise ValueError(
                f"epoch {e}: expected an ({n}, 2) integer array, received {pairs.shape} {pairs.dtype}"
            )
        a, b = pairs[:, 0], pairs[:, 1]
        for col, name in ((a, "first"), (b, "second")):
            if col.min() < 0 or col.max() >= n or (np.bincount(col, minlength=n) != 1).any():
                raise ValueError(
                    f"epoch {e}: expected every image 0..{n - 1} exactly once as {name} element"
                )
        same = np.flatnonzero(codes[a] == codes[b])
        if same.size:
            i, j = pairs[same[0]]
            raise ValueError(
                f"epoch {e}: {same.size} same-id pairs, e.g. ({i}, {j}); expected none"
            )
        seen.append(a.astype(np.int64) * n + b)
    if seen:
        keys = np.sort(np.concatenate(seen))
        dup = np.flatnonzero(keys[1:] == keys[:-1])
        if dup.size:
            key = int(keys[dup[0]])
            raise ValueError(
                f"pair ({key // n}, {key % n}) is used in more than one epoch; expected each "
                f"ordered pair at most once"
            )


def _member(sorted_keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``[len(query)]`` bool: which ``query`` values occur in ``sorted_keys`` (ascending).

    ``np.isin``/``np.unique`` take seconds on ~1.5M int64 under numpy 2.4; binary search
    takes milliseconds.
    """
    if len(sorted_keys) == 0:
        return np.zeros(len(query), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, query), len(sorted_keys) - 1)
    return sorted_keys[pos] == query


def _exhausted(epoch: int, epochs: int, codes: np.ndarray, what: str) -> NoValidAssignment:
    n = len(codes)
    return NoValidAssignment(
        f"no valid negative assignment at epoch {epoch + 1} of {epochs}: {what} (pairs of "
        f"different ids not used in an earlier epoch); n={n}, largest id holds "
        f"{_largest_group(codes)} images. Mine again with fewer epochs per mining"
    )


# --------------------------------------------------------------------------- dense


def mine_negatives(scores, ids, k, epochs, rng: np.random.Generator, maxval: float = 10000.0):
    """Algorithm 1 on a dense score matrix.

    Args:
        scores: ``[n, n]`` float (any float dtype; train-vs-train match probabilities), finite.
        ids: ``[n]`` labels of any dtype; equal labels = same whale.
        k: noise scale ``K >= 0``.
        epochs: number of epochs (assignments) to mine, ``>= 1``.
        rng: the generator; draws exactly ``n * n`` uniforms (as ``rng.random((n, n))`` would).
        maxval: cost of forbidden entries; must exceed every valid cost ``-S + k * U``.

    Returns:
        list of ``epochs`` arrays ``(n, 2)`` int64: row ``i`` is the pair ``(i, x[i])``.

    Memory: one ``float64`` ``[n, n]`` array (1.97 GB at n=15,697) plus ~32 MB of blocks.
    Raises ``ValueError`` on bad input and :class:`NoValidAssignment` when no valid
    assignment exists.
    """
    scores = np.asarray(scores)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores: expected a square [n, n] matrix, received shape {scores.shape}")
    if not np.issubdtype(scores.dtype, np.floating) and not np.issubdtype(scores.dtype, np.integer):
        raise ValueError(f"scores: expected a float matrix, received dtype {scores.dtype}")
    n = scores.shape[0]
    codes = id_codes(ids, n)
    k, epochs = _check_k_epochs(k, epochs)
    maxval = float(maxval)
    _check_feasible(codes, epochs)

    # One float64 n x n array, filled block by block: -S, finiteness check, + k * U.
    T = np.empty((n, n), dtype=np.float64)
    rows_per_block = max(1, _BLOCK_ELEMS // n)
    buf = np.empty((min(rows_per_block, n), n), dtype=np.float64)
    lo, hi = np.inf, -np.inf  # range of -S
    for a in range(0, n, rows_per_block):
        b = min(n, a + rows_per_block)
        block = T[a:b]
        np.negative(scores[a:b], out=block)
        if not np.isfinite(block).all():
            bad = a + int(np.argwhere(~np.isfinite(block))[0, 0])
            raise ValueError(f"scores: expected finite values, received a non-finite one in row {bad}")
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
        noise = buf[: b - a]
        rng.random(out=noise)
        noise *= k
        block += noise
    del buf
    if not maxval > hi + k:
        raise ValueError(
            f"maxval: expected more than the largest valid cost max(-scores) + k = {hi + k:g}, "
            f"received {maxval:g}"
        )

    T[np.arange(n), np.arange(n)] = maxval
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0, True])
    for s, t in zip(starts[:-1], starts[1:]):
        if t - s > 1:
            g = order[s:t]
            T[np.ix_(g, g)] = maxval

    rows = np.arange(n)
    forbid = maxval
    result = []
    for e in range(epochs):
        x = solve_dense(T)
        if (T[rows, x] >= maxval).any() and forbid == maxval:
            # maxval may be too small for this n and k: raise the forbidden entries to a bound
            # that any assignment using one exceeds, then solve again.
            forbid = (hi + k) + (n + 1) * (hi + k - lo + 1.0) + maxval
            for a in range(0, n, rows_per_block):
                block = T[a : a + rows_per_block]
                np.putmask(block, block >= maxval, forbid)
            x = solve_dense(T)
        if (T[rows, x] >= maxval).any():
            raise _exhausted(e, epochs, codes, "the pairs left admit no permutation")
        T[rows, x] = forbid
        result.append(np.stack([rows, x], axis=1).astype(np.int64))
    validate_negative_pairs(result, codes, n)
    return result


# --------------------------------------------------------------------------- sparse


def mine_negatives_sparse(
    rows, cols, scores, ids, k, epochs, rng: np.random.Generator, maxval: float = 10000.0
):
    """Algorithm 1 restricted to candidate pairs (pruned mining), solved with ``lap.lapmod``
    (or scipy's sparse matching when ``lap`` is missing).

    Args:
        rows, cols: ``[m]`` int candidate pairs ``(rows[t], cols[t])``, indices into ``ids``.
        scores: ``[m]`` float, finite, the model's match probability of each candidate.
        ids: ``[n]`` labels of any dtype; ``n = len(ids)``.
        k, epochs, maxval: as in :func:`mine_negatives`.
        rng: the generator; draws one uniform per kept candidate (plus fallback draws).

    Same-id candidates (the diagonal included) are dropped; a pair listed twice keeps its
    highest score. Cost ``-score + k * U(0, 1)``, noise drawn once; each epoch's used pairs are
    removed for the following epochs. When the candidates left admit no permutation, random
    valid partners are added at cost ``maxval`` (module docstring).

    Returns:
        list of ``epochs`` arrays ``(n, 2)`` int64, the pairs ``(i, x[i])``, same rules as
        :func:`mine_negatives`.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    codes = id_codes(ids)
    n = len(codes)
    rows, cols, scores = (np.asarray(v) for v in (rows, cols, scores))
    for name, v in (("rows", rows), ("cols", cols), ("scores", scores)):
        if v.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, received shape {v.shape}")
    if not (len(rows) == len(cols) == len(scores)):
        raise ValueError(
            f"rows, cols, scores: expected equal lengths, received {len(rows)}, {len(cols)}, {len(scores)}"
        )
    for name, v in (("rows", rows), ("cols", cols)):
        if len(v) and not np.issubdtype(v.dtype, np.integer):
            raise ValueError(f"{name}: expected integer indices, received dtype {v.dtype}")
        if len(v) and (v.min() < 0 or v.max() >= n):
            raise ValueError(f"{name}: expected indices in 0..{n - 1} (n = len(ids)), received {v.min()}..{v.max()}")
    scores = scores.astype(np.float64)
    if not np.isfinite(scores).all():
        bad = int(np.argmax(~np.isfinite(scores)))
        raise ValueError(f"scores: expected finite values, received {scores[bad]} at candidate {bad}")
    k, epochs = _check_k_epochs(k, epochs)
    maxval = float(maxval)
    _check_feasible(codes, epochs)

    rows, cols = rows.astype(np.int64), cols.astype(np.int64)
    keep = codes[rows] != codes[cols]
    keys, sc = rows[keep] * n + cols[keep], scores[keep]
    # Sort by key (= CSR order, columns sorted within rows); a repeated pair keeps its max.
    order = np.argsort(keys, kind="stable")
    keys, sc = keys[order], sc[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]][: len(keys)])
    keys = keys[starts]
    sc = np.maximum.reduceat(sc, starts) if len(sc) else sc
    cost = -sc + k * rng.random(len(keys))
    # lapmod wants costs >= 0: subtract the lowest one (a constant shift keeps the optimum).
    shift = float(min(cost.min(), 0.0)) if len(cost) else 0.0
    if len(cost) and not maxval > cost.max():
        raise ValueError(
            f"maxval: expected more than the largest candidate cost -score + k*U = {cost.max():g}, received {maxval:g}"
        )
    if not maxval - shift < LARGE:
        raise ValueError(
            f"maxval: lapmod needs shifted costs below {LARGE:g}; received maxval={maxval:g} "
            f"with lowest cost {shift:g}"
        )

    alive = np.ones(len(keys), dtype=bool)
    used = np.empty(0, dtype=np.int64)  # sorted keys of pairs used in earlier epochs
    result = []
    for e in range(epochs):
        ek, ec = keys[alive], cost[alive]
        for _ in range(_MAX_FILL_ROUNDS + 1):
            er = ek // n
            graph = csr_matrix((np.ones(len(ek), dtype=bool), (er, ek % n)), shape=(n, n))
            if len(ek) and (maximum_bipartite_matching(graph, perm_type="column") >= 0).all():
                break
            perm = _valid_permutation(codes, rng)
            fill = np.arange(n, dtype=np.int64) * n + perm
            fill = fill[~_member(used, fill) & ~_member(ek, fill)]
            ek = np.concatenate([ek, fill])
            ec = np.concatenate([ec, np.full(len(fill), maxval)])
            o = np.argsort(ek, kind="stable")
            ek, ec = ek[o], ec[o]
        else:
            raise _exhausted(
                e, epochs, codes,
                f"no permutation found among the candidates left plus {_MAX_FILL_ROUNDS} random "
                f"valid fallback permutations",
            )
        er, kk = ek // n, ek % n
        ii = np.searchsorted(er, np.arange(n + 1)).astype(np.int32)
        x = solve_sparse(
            n,
            np.ascontiguousarray(ec - shift, dtype=np.float64),
            ii,
            np.ascontiguousarray(kk, dtype=np.int32),
        )
        chosen = np.arange(n, dtype=np.int64) * n + x
        if (x < 0).any() or not _member(ek, chosen).all():
            raise RuntimeError(f"the sparse solver returned pairs outside the candidate set at epoch {e + 1}")
        used = np.sort(np.concatenate([used, chosen]))
        hit = np.searchsorted(keys, chosen)
        alive[hit[_member(keys, chosen)]] = False
        result.append(np.stack([np.arange(n, dtype=np.int64), x], axis=1))
    validate_negative_pairs(result, codes, n)
    return result
