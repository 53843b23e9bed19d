"""Probabilistic similarity models of seed 004 (Chen Liu 2013, Table 3.1) and the two baselines.

A siamese branch maps each image to ``h``; a similarity model turns a pair ``(h1, h2)`` into
``g = P(same | h1, h2)`` in (0, 1], a function of a weighted norm of ``Delta = h1 - h2`` with
one positive weight ``alpha_n`` per embedding dimension:

============================  ============================================  ====================
kind                          g                                             d
============================  ============================================  ====================
``gaussian``                  ``exp(-d)``                                   ``sum alpha Delta^2``
``flattened_gaussian``        ``(beta + 1) / (beta + exp(d))``              ``sum alpha Delta^2``
``laplacian``                 ``exp(-d)``                                   ``sum alpha |Delta|``
``prob_clipped_l1``           ``sigmoid(max(0, delta - d) - d)``            ``sum alpha |Delta|``
``cauchy`` (the thesis' pick) ``1 / (1 + d)``                               ``sum alpha Delta^2``
============================  ============================================  ====================

Training maximises the likelihood of the pair labels: the loss is the binary cross-entropy of
``g`` against ``same`` (eq. 3.2), with the branch and ``alpha`` learned jointly. The loss is
computed from the closed-form log-odds ``log g - log(1 - g)`` of each model (:func:`logit`) and
``softplus(z) - same * z``, so ``log g`` is exact however far apart a pair is (no clipping of
``g`` itself: a similar pair far apart keeps its gradient). ``1 - g`` is clipped below at
:data:`EPS` (1e-7) before its log, the only clip: it bounds the loss of a dissimilar pair whose
two embeddings coincide (``g = 1``), and its gradient there is zero, never NaN.

The two unnormalised baselines the thesis compares with (plain norms, no ``alpha``):

* ``clipped_l1`` (Mobahi et al. 2009, thesis eqs. 2.3-2.4): ``d = sum |Delta|``, cost ``d`` for
  a similar pair and ``max(0, delta - d)`` for a dissimilar one (:func:`clipped_l1_loss`);
* ``drlim`` (Hadsell et al. 2006): ``D = ||Delta||_2``, cost ``D^2 / 2`` for a similar pair and
  ``max(0, margin - D)^2 / 2`` for a dissimilar one (:func:`drlim_loss`).

Neither has a probability; as scores (:func:`similarity`, :func:`similarity_matrix`) they give
``exp(-d)`` and ``exp(-D)``, which rank pairs exactly as their distances do and stay in (0, 1].

``alpha`` is parameterised as ``alpha = exp(log_alpha)`` in :class:`SimilarityModel`, so it is
positive whatever a gradient step does; the thesis gives no initial value, ours is
``alpha = 1`` (``log_alpha = 0``). Everything in the Keras half uses ``keras.ops`` only (both
backends, inside a jitted train step); :func:`similarity_matrix` is NumPy, for scoring.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from whale.objectives.distances import safe_sqrt
from whale.objectives.losses import contrastive_loss

__all__ = [
    "SIMILARITIES", "BASELINES", "KINDS", "EPS", "G_MIN",
    "distance", "logit", "similarity", "pair_loss", "clipped_l1_loss", "drlim_loss",
    "SimilarityModel", "similarity_matrix",
]

SIMILARITIES = ("gaussian", "flattened_gaussian", "laplacian", "prob_clipped_l1", "cauchy")
BASELINES = ("clipped_l1", "drlim")
KINDS = SIMILARITIES + BASELINES
SQUARED = ("gaussian", "flattened_gaussian", "cauchy", "drlim")  # d is a weighted squared L2
EPS = 1e-7      # 1 - g is clipped below at EPS before its log (the loss' only clip)
G_MIN = 1e-30   # g = max(g, G_MIN): a float32 g that underflowed would leave (0, 1]
DEFAULT_BETA = 1.0    # flattened Gaussian (thesis silent)
DEFAULT_DELTA = 2.0   # clipped L1 models: the thesis searches it on validation data
DEFAULT_MARGIN = 1.0  # DrLIM


def check_kind(kind: str, allowed: tuple = KINDS) -> str:
    """``kind`` itself, or ``ValueError`` listing the valid names."""
    if kind not in allowed:
        raise ValueError(f"similarity kind: expected one of {', '.join(allowed)}, got {kind!r}")
    return kind


def _alpha(alpha, dim_like):
    if alpha is None:
        return ops.ones_like(dim_like[..., :1])
    return ops.cast(alpha, "float32")


def distance(kind: str, h1, h2, alpha=None):
    """The weighted norm ``d`` of Table 3.1 per pair.

    Args:
        kind: one of :data:`KINDS`.
        h1, h2: ``[B, D]`` float32 embeddings.
        alpha: ``[D]`` positive weights; None means all ones (the baselines' plain norms).

    Returns:
        ``[B]`` float32: ``sum alpha Delta^2`` for the Gaussian, flattened Gaussian, Cauchy and
        DrLIM (DrLIM's is its squared distance), ``sum alpha |Delta|`` for the L1 models.
    """
    check_kind(kind)
    h1, h2 = ops.cast(h1, "float32"), ops.cast(h2, "float32")
    diff = h1 - h2
    a = _alpha(alpha, h1)
    per_dim = ops.square(diff) if kind in SQUARED else ops.abs(diff)
    return ops.sum(a * per_dim, axis=-1)


def _log_g_and_one_minus_g(kind, d, beta, delta):
    """``(log g, 1 - g)`` of a probabilistic model from ``d``; both exact forms, no overflow."""
    if kind in ("gaussian", "laplacian"):
        return -d, -ops.expm1(-d)
    if kind == "cauchy":
        return -ops.log1p(d), d / (1.0 + d)
    if kind == "flattened_gaussian":
        # log(beta + e^d) = logaddexp(log beta, d); 1 - g = (1 - e^-d) / (1 + beta e^-d)
        log_g = np.float32(np.log1p(beta)) - ops.logaddexp(np.float32(np.log(beta)), d)
        return log_g, -ops.expm1(-d) / (1.0 + beta * ops.exp(-d))
    raise AssertionError(kind)


def logit(kind: str, h1, h2, alpha=None, beta: float = DEFAULT_BETA, delta: float = DEFAULT_DELTA):
    """Log-odds ``log g - log(1 - g)`` of a probabilistic model, per pair.

    Args:
        kind: one of :data:`SIMILARITIES`.
        h1, h2: ``[B, D]`` float32; alpha: ``[D]`` positive (None: ones).
        beta: the flattened Gaussian's flatness (> 0); delta: the probabilistic clipped L1's
            threshold (> 0).

    Returns:
        ``[B]`` float32. For ``prob_clipped_l1`` it is exactly ``max(0, delta - d) - d``; for the
        others ``log(1 - g)`` is taken of ``max(1 - g, EPS)`` (finite, zero gradient at g = 1).
    """
    check_kind(kind, SIMILARITIES)
    d = distance(kind, h1, h2, alpha)
    if kind == "prob_clipped_l1":
        return ops.maximum(0.0, delta - d) - d
    log_g, one_minus_g = _log_g_and_one_minus_g(kind, d, beta, delta)
    return log_g - ops.log(ops.maximum(one_minus_g, EPS))


def similarity(kind: str, h1, h2, alpha=None, beta: float = DEFAULT_BETA,
               delta: float = DEFAULT_DELTA):
    """``g(h1, h2; alpha)`` per pair, in (0, 1] (Table 3.1; the baselines' ``exp(-distance)``).

    Args:
        kind: one of :data:`KINDS`.
        h1, h2: ``[B, D]`` float32; alpha: ``[D]`` positive (None: ones).
        beta, delta: as in :func:`logit`.

    Returns:
        ``[B]`` float32, ``max(g, G_MIN)``: 1 at ``h1 == h2`` for every kind but
        ``prob_clipped_l1``, whose maximum there is ``sigmoid(delta)``.
    """
    check_kind(kind)
    if kind == "prob_clipped_l1":
        g = ops.sigmoid(logit(kind, h1, h2, alpha, beta, delta))
    elif kind == "clipped_l1":
        g = ops.exp(-distance(kind, h1, h2, alpha))
    elif kind == "drlim":
        g = ops.exp(-safe_sqrt(distance(kind, h1, h2, alpha), eps=0.0))
    else:
        log_g, _ = _log_g_and_one_minus_g(kind, distance(kind, h1, h2, alpha), beta, delta)
        g = ops.exp(log_g)
    return ops.maximum(g, G_MIN)


def clipped_l1_loss(same, h1, h2, delta: float = DEFAULT_DELTA):
    """Mobahi et al.'s unnormalised clipped L1 (thesis eqs. 2.3-2.4), per pair.

    ``d = sum_n |h1_n - h2_n|``; loss ``d`` if ``same`` else ``max(0, delta - d)``.
    same: ``[B]`` (or ``[B, 1]``) 0/1; h1, h2: ``[B, D]`` float32. Returns ``[B]`` float32.
    """
    s = ops.reshape(ops.cast(same, "float32"), (-1,))
    d = distance("clipped_l1", h1, h2)
    return s * d + (1.0 - s) * ops.maximum(0.0, delta - d)


def drlim_loss(same, h1, h2, margin: float = DEFAULT_MARGIN):
    """DrLIM's contrastive loss (Hadsell, Chopra, LeCun 2006), per pair.

    ``D = ||h1 - h2||_2``; loss ``D^2 / 2`` if ``same`` else ``max(0, margin - D)^2 / 2``: the toolkit's one
    contrastive loss (:func:`whale.objectives.losses.contrastive_loss`) with DrLIM's 1/2 kept and ``D`` exactly 0
    only at ``D^2 = 0`` (``half=True``, ``eps=0``; ``objective: contrastive`` trains without the 1/2).
    same: ``[B]`` (or ``[B, 1]``) 0/1; h1, h2: ``[B, D]`` float32. Returns ``[B]`` float32.
    """
    s = ops.reshape(ops.cast(same, "float32"), (-1,))
    return contrastive_loss(s, distance("drlim", h1, h2), margin, half=True, eps=0.0)


def pair_loss(kind: str, same, h1, h2, alpha=None, beta: float = DEFAULT_BETA,
              delta: float = DEFAULT_DELTA, margin: float = DEFAULT_MARGIN):
    """Per-pair loss: the BCE of ``g`` against ``same`` (eq. 3.2), or a baseline's own cost.

    Args:
        kind: one of :data:`KINDS` (the baselines ignore ``alpha`` and ``beta``).
        same: ``[B]`` or ``[B, 1]``, 1 for a pair of one identity, 0 otherwise.
        h1, h2: ``[B, D]`` float32; alpha: ``[D]`` positive (None: ones).

    Returns:
        ``[B]`` float32, ``-(same log g + (1 - same) log(1 - g))`` computed as
        ``softplus(z) - same z`` from :func:`logit` ``z``; finite everywhere.
    """
    check_kind(kind)
    if kind == "clipped_l1":
        return clipped_l1_loss(same, h1, h2, delta)
    if kind == "drlim":
        return drlim_loss(same, h1, h2, margin)
    s = ops.reshape(ops.cast(same, "float32"), (-1,))
    z = logit(kind, h1, h2, alpha, beta, delta)
    return ops.softplus(z) - s * z


@keras.saving.register_keras_serializable(package="whale")
class SimilarityModel(keras.layers.Layer):
    """A similarity model of Table 3.1 with its learned per-dimension weights ``alpha``.

    ``alpha = exp(log_alpha)`` (positive by construction), ``log_alpha`` a ``[dim]`` float32
    weight initialised to ``log(alpha_init)`` (ours: ``alpha_init = 1``; the thesis gives none).
    The baselines (``clipped_l1``, ``drlim``) hold no weight: their ``alpha`` is all ones.

    Args:
        kind: one of :data:`KINDS`.
        dim: the embedding size ``D``.
        beta: the flattened Gaussian's flatness; delta: the clipped L1 models' threshold;
        margin: DrLIM's margin.
        alpha_init: initial ``alpha`` (> 0), the same in every dimension.
        returns: ``"probability"`` (``g`` in (0, 1]) or ``"logit"`` (:func:`logit`, for a
            ``BinaryCrossentropy(from_logits=True)`` loss; the five models only).

    Call: ``layer([h1, h2])`` with ``[B, D]`` float32 each -> ``[B, 1]`` float32.

    Example:
        >>> g = SimilarityModel("cauchy", dim=20)([h1, h2])   # doctest: +SKIP
    """

    def __init__(self, kind: str = "cauchy", dim: int = 20, beta: float = DEFAULT_BETA,
                 delta: float = DEFAULT_DELTA, margin: float = DEFAULT_MARGIN,
                 alpha_init: float = 1.0, returns: str = "probability", **kwargs):
        super().__init__(**kwargs)
        self.kind = check_kind(kind)
        if returns not in ("probability", "logit"):
            raise ValueError(f"SimilarityModel returns: expected 'probability' or 'logit', got {returns!r}")
        if returns == "logit" and kind in BASELINES:
            raise ValueError(f"SimilarityModel: a baseline ({kind!r}) has no log-odds; use returns='probability'")
        for name, v in (("dim", dim), ("beta", beta), ("delta", delta), ("margin", margin),
                        ("alpha_init", alpha_init)):
            if not v > 0:
                raise ValueError(f"SimilarityModel {name}: expected > 0, got {v!r}")
        self.dim, self.beta, self.delta, self.margin = int(dim), float(beta), float(delta), float(margin)
        self.alpha_init, self.returns = float(alpha_init), returns
        self.log_alpha = None
        if kind in SIMILARITIES:
            self.log_alpha = self.add_weight(
                name="log_alpha", shape=(self.dim,), dtype="float32",
                initializer=keras.initializers.Constant(float(np.log(self.alpha_init))))

    @property
    def alpha(self):
        """``[dim]`` float32 tensor, ``exp(log_alpha)`` (ones for a baseline)."""
        if self.log_alpha is None:
            return ops.ones((self.dim,), dtype="float32")
        return ops.exp(self.log_alpha)

    def call(self, inputs):
        h1, h2 = inputs
        if self.returns == "logit":
            out = logit(self.kind, h1, h2, self.alpha, self.beta, self.delta)
        else:
            out = similarity(self.kind, h1, h2, self.alpha, self.beta, self.delta)
        return ops.expand_dims(out, -1)

    def loss(self, same, h1, h2):
        """:func:`pair_loss` with this layer's ``alpha`` and constants: ``[B]`` float32."""
        return pair_loss(self.kind, same, h1, h2, self.alpha, self.beta, self.delta, self.margin)

    def compute_output_shape(self, input_shape):
        return (input_shape[0][0], 1)

    def get_config(self):
        config = super().get_config()
        config.update(kind=self.kind, dim=self.dim, beta=self.beta, delta=self.delta,
                      margin=self.margin, alpha_init=self.alpha_init, returns=self.returns)
        return config


# ----------------------------------------------------------------------------- NumPy scoring
def _g_numpy(kind, d, beta, delta):
    """g from the distance matrix ``d`` (float32, modified in place where possible)."""
    if kind in ("gaussian", "laplacian", "clipped_l1"):
        np.negative(d, out=d)
        np.exp(d, out=d)
    elif kind == "drlim":
        np.sqrt(d, out=d)
        np.negative(d, out=d)
        np.exp(d, out=d)
    elif kind == "cauchy":
        d += 1.0
        np.reciprocal(d, out=d)
    elif kind == "flattened_gaussian":
        e = np.exp(-d)  # (beta + 1) e^-d / (beta e^-d + 1): no overflow for large d
        d[...] = (beta + 1.0) * e / (beta * e + 1.0)
    elif kind == "prob_clipped_l1":
        z = np.maximum(0.0, delta - d) - d
        d[...] = 0.5 * (1.0 + np.tanh(0.5 * z))  # sigmoid without overflow
    np.maximum(d, G_MIN, out=d)
    return d


def similarity_matrix(kind: str, A: np.ndarray, B: np.ndarray, alpha=None,
                      beta: float = DEFAULT_BETA, delta: float = DEFAULT_DELTA,
                      block: int = 1024) -> np.ndarray:
    """``g`` of every row of ``A`` against every row of ``B``, block by block (NumPy).

    Squared kinds (Gaussian, flattened Gaussian, Cauchy, DrLIM): with ``a = A sqrt(alpha)`` and
    ``b = B sqrt(alpha)``, ``d = |a|^2 + |b|^2 - 2 a b^T`` (one matrix product per row block,
    clipped at 0 against rounding). L1 kinds: a loop over the ``D`` dimensions adding
    ``alpha_k |A_k - B_k|`` into the block, so memory stays ``[block, m]``, never ``[n, m, D]``.

    Args:
        kind: one of :data:`KINDS`.
        A: ``[n, D]``, B: ``[m, D]`` float (computed in float32).
        alpha: ``[D]`` positive, None for ones.
        block: rows of ``A`` per block (L1 kinds: fewer, ~1M elements a block).

    Returns:
        ``[n, m]`` float32 in (0, 1], higher = more alike.
    """
    check_kind(kind)
    A = np.asarray(A, dtype=np.float32)
    B = np.asarray(B, dtype=np.float32)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[1]:
        raise ValueError(f"similarity_matrix: expected A [n, D] and B [m, D], got {A.shape} and {B.shape}")
    D = A.shape[1]
    a = np.ones(D, np.float32) if alpha is None else np.asarray(alpha, dtype=np.float32).reshape(-1)
    if a.shape != (D,) or not np.all(a > 0):
        raise ValueError(f"similarity_matrix alpha: expected {D} positive weights, got shape {a.shape}")
    out = np.empty((A.shape[0], B.shape[0]), dtype=np.float32)
    if kind in SQUARED:
        root = np.sqrt(a)
        Bs = B * root
        nb = np.einsum("ij,ij->i", Bs, Bs)
        for i in range(0, A.shape[0], block):
            As = A[i:i + block] * root
            blk = out[i:i + block]
            np.matmul(As, Bs.T, out=blk)
            blk *= -2.0
            blk += np.einsum("ij,ij->i", As, As)[:, None]
            blk += nb[None, :]
            np.maximum(blk, 0.0, out=blk)
            _g_numpy(kind, blk, beta, delta)
    else:
        Bt = np.ascontiguousarray(B.T)
        # D passes over each block: rows kept to ~1M elements so the block stays in cache
        rows = max(1, min(block, 2 ** 20 // max(B.shape[0], 1)))
        tmp = np.empty((min(rows, A.shape[0]), B.shape[0]), dtype=np.float32)
        for i in range(0, A.shape[0], rows):
            Ab = A[i:i + rows]
            blk = out[i:i + rows]
            blk[...] = 0.0
            t = tmp[:len(Ab)]
            for k in range(D):
                np.subtract(Ab[:, k:k + 1], Bt[k][None, :], out=t)
                np.abs(t, out=t)
                t *= a[k]
                blk += t
            _g_numpy(kind, blk, beta, delta)
    return out


def _time_matrix(argv=None) -> None:
    """``python -m whale.objectives.similarity [--n 15697] [--rows 1024]``: the timing in docs/orl.md.

    :func:`similarity_matrix` on ``rows`` query rows against ``n`` gallery rows, for D = 20 and
    256, one squared kind (Cauchy) and one L1 kind (Laplacian), each beside the plain NumPy broadcast
    of its distance, ``(alpha * (A[:, None] - B[None]) ** 2).sum(-1)`` (``abs`` for L1), on ``rows / 16`` rows (its ``[rows, n, D]``
    temporary is the reason for blocks); every time is extrapolated to ``n x n`` by row count.
    """
    import argparse
    import time

    p = argparse.ArgumentParser(description=_time_matrix.__doc__)
    p.add_argument("--n", type=int, default=15697)
    p.add_argument("--rows", type=int, default=1024)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"similarity_matrix, {args.rows} x {args.n} block, times extrapolated to {args.n} x {args.n}")
    for D in (20, 256):
        A = rng.normal(size=(args.rows, D)).astype(np.float32)
        B = rng.normal(size=(args.n, D)).astype(np.float32)
        alpha = rng.uniform(0.5, 2, D).astype(np.float32)
        scale = args.n / args.rows
        small = max(args.rows // 16, 1)
        for kind, per_dim in (("cauchy", np.square), ("laplacian", np.abs)):
            t0 = time.perf_counter()
            for i in range(0, small, 8):
                (alpha * per_dim(A[i:i + 8, None] - B[None])).sum(-1)
            base = (time.perf_counter() - t0) * args.n / small
            t0 = time.perf_counter()
            similarity_matrix(kind, A, B, alpha)
            ours = (time.perf_counter() - t0) * scale
            print(f"  D={D:3d} {kind:9s}: blocked {ours:7.1f} s   NumPy broadcast {base:7.1f} s"
                  f"   ratio {base / ours:5.1f}x")


if __name__ == "__main__":
    _time_matrix()
