"""The head as a compiled scorer: exact head scores of many feature pairs, block by block.

The siamese model splits into a branch (image -> feature ``[d]``) and a head (two features ->
match probability). Branch features are computed once per image (:func:`whale.inference.features.compute_features`);
everything else here is head work on feature pairs.

Exact head scoring (:class:`HeadScorer`). The head of :func:`whale.models.build_head` is one
small network shared by the ``d`` feature positions followed by a weighted sum::

    z_m(x, y) = c0_m*x*y + c1_m*(x+y) + c2_m*|x-y| + c3_m*(x-y)^2 + b_m      (Conv2D (4,1))
    g(x, y)   = sum_m v_m * relu(z_m) + b2                                   (Conv2D (1,mid))
    p         = sigmoid(Dense(... relu(Dense(g(x_1, y_1) .. g(x_d, y_d))) ...))

:class:`HeadScorer` reads those weights from the Keras head (by layer type and order) and
evaluates the formula directly on broadcast blocks ``[a, 1, d] x [1, b, d]`` with one
XLA-compiled function per block shape (written once in ``keras.ops``; compiled by
``tf.function(jit_compile=True)`` on TensorFlow, ``jax.jit`` on JAX; blocks are padded to a
fixed shape, so it compiles once). The weights are the compiled function's arguments, not
constants baked into it: a training run scores with a new head every mining and validation,
and each reuses the functions compiled for the first (``benchmarks/speed/scorer_rebuild.py``
measures the saving). The formula runs in float32 whatever the head's dtype
policy: under mixed precision it is the head's exact float32 value. XLA fuses the ``mid`` units into a single loop, so the ``[a, b, d, mid]``
intermediate is never written to memory and no pair of features is ever gathered; the speed
against the reference style (gather every pair, ``head.predict(batch_size=2048)``) is
measured in one run by ``python benchmarks/speed/bench_scoring.py`` (docs/scoring.md). The head is symmetric in its two
inputs (every stacked feature is), so a train-vs-train matrix computes the upper triangle of
blocks once and mirrors it exactly. A head whose layers do not follow the contract is
evaluated through the Keras model itself on pair blocks (same blocking, slower); the choice is
verified numerically against the model when the scorer is built.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from whale.core.arrays import as_features
from whale.core.progress import progress_bar

__all__ = ["HeadScorer"]

DEFAULT_TILE = (64, 256)
DEFAULT_PAIR_CHUNK = 16384


def _extract_head(head):
    """Weights of a contract head, or ``None`` if its layers do not follow the contract.

    Returns a dict: ``d``, ``C`` ``[4, mid]``, ``b1`` ``[mid]``, ``v`` ``[mid]``, ``b2`` float,
    ``dense`` list of ``(W [in, out], b [out], activation name)`` (last one = output layer).
    """
    import keras

    convs, denses = [], []
    for layer in head.layers:
        if isinstance(layer, keras.layers.Conv2D):
            convs.append(layer)
        elif isinstance(layer, keras.layers.Dense):
            denses.append(layer)
    if len(convs) != 2 or not denses:
        return None
    k1, b1 = (np.asarray(w, dtype=np.float32) for w in convs[0].get_weights())
    k2, b2 = (np.asarray(w, dtype=np.float32) for w in convs[1].get_weights())
    if k1.ndim != 4 or k1.shape[:3] != (4, 1, 1):
        return None
    mid = k1.shape[3]
    if k2.shape != (1, mid, 1, 1):
        return None
    # By the function's name: keras.activations.serialize would import TensorFlow when installed.
    name = lambda a: getattr(a, "__name__", type(a).__name__)
    if name(convs[0].activation) != "relu" or name(convs[1].activation) != "linear":
        return None
    dense = []
    for layer in denses:
        ws = layer.get_weights()
        if len(ws) != 2:
            return None
        act = name(layer.activation)
        if act not in ("relu", "linear", "sigmoid", "tanh"):
            return None
        dense.append((np.asarray(ws[0], np.float32), np.asarray(ws[1], np.float32), act))
    if dense[-1][0].shape[1] != 1 or dense[-1][2] != "sigmoid":
        return None
    d = dense[0][0].shape[0]
    return {"d": d, "C": k1[:, 0, 0, :], "b1": b1, "v": k2[0, :, 0, 0], "b2": float(b2[0]), "dense": dense}


def _compile(body, shapes, jit: bool = True):
    """``body`` (float32 backend tensors of ``shapes`` -> one tensor) as a numpy function.

    Compiled with the backend's compiler: ``tf.function(jit_compile=True)`` on TensorFlow
    (plain ``tf.function`` when XLA fails or ``jit`` is false), ``jax.jit`` on JAX; other
    backends (PyTorch) run it eagerly. TensorFlow is imported only on its own backend.
    """
    import keras

    backend = keras.backend.backend()
    zeros = [np.zeros(s, np.float32) for s in shapes]
    if backend == "tensorflow":
        import tensorflow as tf

        sig = [tf.TensorSpec(s, tf.float32) for s in shapes]
        fn = None
        if jit:
            try:
                fn = tf.function(body, input_signature=sig, jit_compile=True)
                fn(*zeros)
            except Exception as err:  # XLA missing or an unsupported op: a plain graph instead
                warnings.warn(f"HeadScorer: XLA compilation failed ({type(err).__name__}); using tf.function")
                fn = None
        if fn is None:
            fn = tf.function(body, input_signature=sig)
        return lambda *args: fn(*args).numpy()
    if backend == "jax":
        import jax

        fn = jax.jit(body) if jit else body
        return lambda *args: np.asarray(fn(*args))
    from keras import ops

    return lambda *args: ops.convert_to_numpy(body(*(ops.convert_to_tensor(a) for a in args)))


_FORMULAS: dict = {}
"""Compiled formulas shared by every :class:`HeadScorer` of the process, keyed by backend, kind,
block shape, the head's weight shapes and activations and ``jit``: the weights are arguments,
so a head with new weights (every mining and validation of a training run) reuses them."""


def _weight_arrays(p: dict) -> list[np.ndarray]:
    """A contract head's weights (:func:`_extract_head`) as the formula's float32 arguments:
    ``C [4, mid], b1 [mid], v [mid], b2 [1]``, then ``W, b`` of each dense layer."""
    arrays = [p["C"], p["b1"], p["v"], np.array([p["b2"]])]
    for W, b, _ in p["dense"]:
        arrays += [W, b]
    return [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]


def _formula(X, Y, weights, acts):
    """The contract head on broadcastable backend tensors ``[..., d]`` -> ``[...]`` float32.

    ``weights`` as :func:`_weight_arrays` lays them out (backend tensors), ``acts`` the dense
    layers' activation names. Unrolled over the ``mid`` units (a static shape): XLA fuses the
    loop, so ``[.., d, mid]`` never exists in memory.
    """
    from keras import ops

    C, b1, v, b2 = weights[:4]
    xy = X * Y
    s = X + Y
    df = X - Y
    ad = ops.abs(df)
    sq = df * df
    acc = None
    for m in range(C.shape[1]):
        z = C[0, m] * xy + C[1, m] * s + C[2, m] * ad + C[3, m] * sq + b1[m]
        t = v[m] * ops.relu(z)
        acc = t if acc is None else acc + t
    h = acc + b2[0]
    fns = {"relu": ops.relu, "linear": lambda t: t, "sigmoid": ops.sigmoid, "tanh": ops.tanh}
    for i, act in enumerate(acts):
        W, b = weights[4 + 2 * i], weights[5 + 2 * i]
        if W.shape[1] == 1:
            h = ops.sum(h * W[:, 0], axis=-1, keepdims=True) + b[0]
        else:
            h = ops.tensordot(h, W, axes=1) + b
        h = fns[act](h)
    return h[..., 0]


class HeadScorer:
    """Exact, blockwise evaluation of a siamese head on many feature pairs.

    Args:
        head: the Keras head, inputs ``(x, y)`` each ``[d]`` float32 -> ``[1]`` probability.
        tile: ``(a, b)`` query x gallery block evaluated per call of the compiled function;
            memory of one call ~ ``a * b * d * 4`` bytes times a few.
        pair_chunk: row-aligned pairs per call in :meth:`pairs`.
        jit: compile with the backend's compiler (XLA through ``tf.function(jit_compile=True)``
            or ``jax.jit``; much faster); on TensorFlow falls back to plain ``tf.function`` if
            XLA is unavailable.
        check: compare with ``head`` on random pairs when built; a mismatch (a head that does
            not follow the contract) switches to the generic path through the Keras model.
        constants: fold the weights into the compiled functions as constants (the scorer's
            original form; faster per pair, 1.11x in ``benchmarks/speed/scorer_rebuild.py`` on a
            2-core CPU under TensorFlow), compiled anew for every scorer (seconds): for one
            head scoring many pairs (inference). Without it the weights are arguments and
            every scorer of the same head shapes reuses one compilation (training: a new head
            every mining and validation).

    Attributes:
        d: feature dimension. ``exact_formula``: True if the fast formula path is used.
        pairs_computed: running count of pairs evaluated (for benchmarks).
    """

    def __init__(self, head, tile=DEFAULT_TILE, pair_chunk=DEFAULT_PAIR_CHUNK, jit=True, check=True,
                 constants=False):
        self.head = head
        self.tile = (int(tile[0]), int(tile[1]))
        self.pair_chunk = int(pair_chunk)
        if min(self.tile) < 1 or self.pair_chunk < 1:
            raise ValueError(f"tile, pair_chunk: expected positive sizes, received {tile}, {pair_chunk}")
        self.jit = bool(jit)
        self.constants = bool(constants)
        self.params = _extract_head(head)
        self.d = self.params["d"] if self.params else int(head.inputs[0].shape[-1])
        self.exact_formula = self.params is not None
        self.pairs_computed = 0
        self._fns = {}
        if check:
            self._verify()

    # ---- the compiled functions

    def _core(self, X, Y):
        """The generic path: broadcastable backend tensors ``[..., d]`` float32 -> probabilities
        ``[...]`` float32 through the Keras head itself (a head off the contract)."""
        from keras import ops

        shape = tuple(ops.shape(X + Y))
        Xb = ops.reshape(ops.broadcast_to(X, shape), (-1, self.d))
        Yb = ops.reshape(ops.broadcast_to(Y, shape), (-1, self.d))
        out = self.head([Xb, Yb], training=False)
        return ops.reshape(ops.cast(out, "float32"), shape[:-1])

    def _fn(self, kind: str, shape: tuple):
        """One compiled function per (kind, fixed shape): numpy ``[a, d]``, ``[b, d]`` float32 ->
        numpy float32 (``[a, b]`` for ``"block"``, ``[a]`` for ``"pairs"``). The contract formula
        takes the head's weights as arguments and is compiled once per process for each shape
        (:data:`_FORMULAS`), or with ``constants`` once per scorer with the weights folded in;
        the generic path compiles once per scorer."""
        key = (kind, shape)
        if key not in self._fns:
            if kind == "block":
                shapes = ((shape[0], self.d), (shape[1], self.d))
                pair = lambda x, y: (x[:, None, :], y[None, :, :])  # noqa: E731
            else:
                shapes = ((shape[0], self.d), (shape[0], self.d))
                pair = lambda x, y: (x, y)  # noqa: E731
            if self.exact_formula:
                acts = tuple(act for _, _, act in self.params["dense"])
                weights = _weight_arrays(self.params)
            if self.exact_formula and self.constants:
                self._fns[key] = _compile(lambda x, y: _formula(*pair(x, y), weights, acts), shapes, self.jit)
            elif self.exact_formula:
                import keras

                wshapes = tuple(w.shape for w in weights)
                fkey = (keras.backend.backend(), kind, shapes, wshapes, acts, self.jit)
                if fkey not in _FORMULAS:
                    body = lambda x, y, *w: _formula(*pair(x, y), w, acts)  # noqa: E731
                    _FORMULAS[fkey] = _compile(body, shapes + wshapes, self.jit)
                compiled = _FORMULAS[fkey]
                self._fns[key] = lambda x, y: compiled(x, y, *weights)
            else:
                self._fns[key] = _compile(lambda x, y: self._core(*pair(x, y)), shapes, self.jit)
        return self._fns[key]

    def _verify(self):
        if not self.exact_formula:
            return
        rng = np.random.default_rng(0)
        x = rng.random((64, self.d), dtype=np.float32) * 2
        y = np.concatenate([x[:32] + 0.05 * rng.standard_normal((32, self.d), dtype=np.float32),
                            rng.random((32, self.d), dtype=np.float32) * 2]).astype(np.float32)
        ref = np.asarray(self.head([x, y], training=False), dtype=np.float32).reshape(-1)
        got = self.pairs(x, y)
        # A mixed-precision head computes in float16/bfloat16 (about 3 significant digits);
        # the formula in float32 is then compared at that precision.
        mixed = str(getattr(self.head.dtype_policy, "compute_dtype", "float32")) != "float32"
        atol, rtol = (2e-2, 2e-2) if mixed else (1e-5, 1e-4)
        if not np.allclose(got, ref, atol=atol, rtol=rtol):
            warnings.warn("HeadScorer: head does not follow the build_head contract; using the Keras model")
            self.exact_formula = False
            self._fns.clear()

    # ---- low-rank proxy of the head

    @property
    def has_head_proxy(self) -> bool:
        """True for a hidden=0 contract head (the low-rank logit proxy exists)."""
        return self.exact_formula and len(self.params["dense"]) == 1

    def head_factors(self, rank: int = 4, grid: int = 256, lo: float | None = None, hi: float | None = None):
        """Low-rank separable approximation ``g(x, y) ~ sum_r lam_r u_r(x) u_r(y)``.

        ``g`` (the per-position network) is tabulated on a ``grid`` x ``grid`` grid of values
        in ``[lo, hi]`` and eigen-decomposed (it is symmetric); ``u_r`` are the top-``rank``
        eigenvectors by ``|lam|``. Then the head's logit is approximately
        ``sum_r lam_r sum_j w_j u_r(x_j) u_r(y_j)``: an inner product of ``rank * d``-dim
        vectors (:meth:`proxy_features`). ``None`` for heads with hidden layers.
        """
        if not self.has_head_proxy:
            return None
        if lo is None or hi is None:
            if getattr(self, "_factors", None) is not None:
                return self._factors
            return None
        p = self.params
        t = np.linspace(lo, hi, grid)
        X, Y = t[:, None, None], t[None, :, None]
        C, b1, v = (p[k].astype(np.float64) for k in ("C", "b1", "v"))
        z = C[0] * X * Y + C[1] * (X + Y) + C[2] * np.abs(X - Y) + C[3] * (X - Y) ** 2 + b1
        G = np.maximum(z, 0) @ v
        lam, U = np.linalg.eigh((G + G.T) / 2)
        top = np.argsort(-np.abs(lam))[:rank]
        self._factors = (t, lam[top], U[:, top])
        return self._factors

    def proxy_features(self, f, side: str = "g", rank: int = 4) -> np.ndarray:
        """``[n, rank * d]`` float32 factor of the head's low-rank logit proxy.

        ``side="q"`` carries the eigenvalues and the output weights ``w``; ``side="g"`` is
        plain, so ``proxy_features(x, "q") @ proxy_features(y, "g").T`` ~ the logit up to a
        constant. Call the ``"g"`` side first: it sets the grid to its features' range.
        """
        f = as_features(f, "f", self.d)
        fac = self.head_factors()
        if fac is None or side == "g":  # the gallery side sets the grid (cheap: one 256^2 eigh)
            lo, hi = float(min(f.min(), 0.0)), float(f.max()) * 1.05 + 1e-6
            fac = self.head_factors(rank=rank, lo=lo, hi=hi)
        if fac is None:
            raise ValueError("proxy_features: the head has hidden layers; no low-rank proxy")
        t, lam, U = fac
        w = self.params["dense"][0][0][:, 0].astype(np.float64)
        parts = []
        for r in range(U.shape[1]):
            u = np.interp(f, t, U[:, r])  # values beyond the grid take the edge value
            parts.append((u * (lam[r] * w) if side == "q" else u).astype(np.float32))
        return np.concatenate(parts, axis=1)

    # ---- public API

    def pairs(self, fa, fb, progress: bool = False) -> np.ndarray:
        """Scores of row-aligned pairs.

        Args:
            fa, fb: ``[m, d]`` float features; pair ``t`` is ``(fa[t], fb[t])``.

        Returns:
            ``[m]`` float32 probabilities.
        """
        fa = as_features(fa, "fa", self.d)
        fb = as_features(fb, "fb", self.d)
        if fa.shape != fb.shape:
            raise ValueError(f"fa, fb: expected equal shapes [m, d], received {fa.shape} and {fb.shape}")
        return self._pairs_gather(fa, fb, None, None, progress)

    def pairs_index(self, fa, fb, ia, ib, progress: bool = False) -> np.ndarray:
        """Scores of pairs ``(fa[ia[t]], fb[ib[t]])`` without gathering all pairs at once.

        ``fa`` ``[na, d]``, ``fb`` ``[nb, d]`` float; ``ia``, ``ib`` ``[m]`` int. Returns ``[m]`` float32.
        """
        fa = as_features(fa, "fa", self.d)
        fb = as_features(fb, "fb", self.d)
        ia, ib = np.asarray(ia, dtype=np.int64), np.asarray(ib, dtype=np.int64)
        if ia.shape != ib.shape or ia.ndim != 1:
            raise ValueError(f"ia, ib: expected equal 1-D index arrays, received {ia.shape}, {ib.shape}")
        return self._pairs_gather(fa, fb, ia, ib, progress)

    def _pairs_gather(self, fa, fb, ia, ib, progress):
        m = len(fa) if ia is None else len(ia)
        out = np.empty(m, dtype=np.float32)
        if m == 0:
            return out
        chunk = min(self.pair_chunk, max(256, 1 << int(math.ceil(math.log2(m)))))
        fn = self._fn("pairs", (chunk,))
        xa = np.zeros((chunk, self.d), np.float32)
        xb = np.zeros((chunk, self.d), np.float32)
        starts = range(0, m, chunk)
        for s in progress_bar(starts, total=len(starts), desc="pairs", enabled=progress):
            e = min(m, s + chunk)
            if ia is None:
                xa[: e - s], xb[: e - s] = fa[s:e], fb[s:e]
            else:
                np.take(fa, ia[s:e], axis=0, out=xa[: e - s])
                np.take(fb, ib[s:e], axis=0, out=xb[: e - s])
            out[s:e] = fn(xa, xb)[: e - s]
        self.pairs_computed += m
        return out

    def _block(self, xa, fb, c0, c1, out_row, tb=None):
        """Scores of ``xa`` (a padded [ta, d] tile) vs ``fb[c0:c1]`` into ``out_row`` [ta, c1-c0]."""
        ta = xa.shape[0]
        tb = self.tile[1] if tb is None else tb
        fn = self._fn("block", (ta, tb))
        yb = np.zeros((tb, self.d), np.float32)
        for s in range(c0, c1, tb):
            e = min(c1, s + tb)
            yb[: e - s] = fb[s:e]
            if e - s < tb:
                yb[e - s :] = 0.0
            out_row[:, s - c0 : e - c0] = fn(xa, yb)[:, : e - s]

    def matrix(self, fa, fb=None, block=None, dtype=np.float32, progress: bool = True) -> np.ndarray:
        """Score matrix of every pair.

        Args:
            fa: ``[na, d]`` float query features.
            fb: ``[nb, d]`` gallery features, or ``None`` for the symmetric train-vs-train
                matrix of ``fa`` against itself: only blocks on or above the diagonal are
                computed and mirrored (the head is symmetric), the diagonal is computed too.
            block: ``(a, b)`` tile, default the scorer's ``tile``.
            dtype: ``np.float32`` or ``np.float16`` result.
            progress: tqdm bar over row tiles.

        Returns:
            ``[na, nb]`` (``[na, na]`` if symmetric) array of ``dtype``. Memory: the result plus
            one tile; never a float64 ``n x n``.
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float16):
            raise ValueError(f"dtype: expected float32 or float16, received {dtype}")
        if block is None:
            ta, tb = self.tile
        elif isinstance(block, (int, np.integer)):
            ta = tb = int(block)
        else:
            ta, tb = (int(b) for b in block)
        if min(ta, tb) < 1:
            raise ValueError(f"block: expected positive tile sizes, received {block}")
        fa = as_features(fa, "fa", self.d)
        sym = fb is None
        fb = fa if sym else as_features(fb, "fb", self.d)
        na, nb = len(fa), len(fb)
        out = np.empty((na, nb), dtype=dtype)
        xa = np.zeros((ta, self.d), np.float32)
        starts = range(0, na, ta)
        for r0 in progress_bar(starts, total=len(starts), desc="scores", enabled=progress):
            r1 = min(na, r0 + ta)
            xa[: r1 - r0] = fa[r0:r1]
            if r1 - r0 < ta:
                xa[r1 - r0 :] = 0.0
            c0 = r0 if sym else 0
            row = np.empty((ta, nb - c0), dtype=np.float32)
            self._block(xa, fb, c0, nb, row, tb)
            out[r0:r1, c0:] = row[: r1 - r0]
            if sym and r1 < nb:
                out[r1:, r0:r1] = row[: r1 - r0, r1 - c0 :].T
            self.pairs_computed += (r1 - r0) * (nb - c0)
        return out
