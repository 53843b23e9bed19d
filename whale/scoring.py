"""Features and score matrices at scale: exact head scoring, pruned mining, streaming top-k.

The siamese model splits into a branch (image -> feature ``[d]``) and a head (two features ->
match probability). Branch features are computed once per image (:func:`compute_features`);
everything else here is head work on feature pairs.

Exact head scoring (:class:`HeadScorer`). The head of :func:`whale.models.build_head` is one
small network shared by the ``d`` feature positions followed by a weighted sum::

    z_m(x, y) = c0_m*x*y + c1_m*(x+y) + c2_m*|x-y| + c3_m*(x-y)^2 + b_m      (Conv2D (4,1))
    g(x, y)   = sum_m v_m * relu(z_m) + b2                                   (Conv2D (1,mid))
    p         = sigmoid(Dense(... relu(Dense(g(x_1, y_1) .. g(x_d, y_d))) ...))

:class:`HeadScorer` reads those weights from the Keras head (by layer type and order) and
evaluates the formula directly on broadcast blocks ``[a, 1, d] x [1, b, d]`` with one
XLA-compiled TensorFlow function per block shape (blocks are padded to a fixed shape, so it
compiles once). XLA fuses the ``mid`` units into a single loop, so the ``[a, b, d, mid]``
intermediate is never written to memory and no pair of features is ever gathered: about
0.5-1 M pairs/s at d=512, mid=32 on 2 CPU cores, against ~18 k pairs/s for the reference style
(gather every pair, ``head.predict(batch_size=2048)``). The head is symmetric in its two
inputs (every stacked feature is), so a train-vs-train matrix computes the upper triangle of
blocks once and mirrors it exactly. A head whose layers do not follow the contract is
evaluated through the Keras model itself on pair blocks (same blocking, slower); the choice is
verified numerically against the model when the scorer is built.

Pruned mining (:func:`candidates`, :func:`mine_pruned`). Algorithm 1 picks, per image, a
partner of another id with a high score plus ``K * U(0, 1)`` noise. With ``K`` below the score
range only high-scoring pairs can win, so the head needs to score only each image's top ``m``
partners by a cheap proxy (a matrix product of branch features) and ``lap.lapmod`` solves the
sparse assignment. Random partners are added so that the choice stays spread over all images
when the noise dominates (rule in :func:`candidate_counts`).

Streaming top-k (:func:`topk_stream`). Test-vs-gallery scores are reduced to a per-id maximum
block by block (``[query block, n_ids]`` float32 running maximum), then the top ``k_ids`` ids
per query are kept; no ``[n_query, n_gallery]`` matrix exists. ``prune=P`` re-ranks only each
query's top ``P`` gallery images by the proxy.

Proxy similarity (``similarity=``): ``"cosine"`` (L2-normalised features, inner product; the
default for mining candidates), ``"dot"`` (raw inner product), ``"euclidean"`` (minus the squared
distance, up to a per-row constant) or ``"head"`` (the head's own logit, factorised to rank 4:
:meth:`HeadScorer.proxy_features`; the default, ``"auto"``, of :func:`topk_stream` for a hidden=0
head). Cosine over raw features because the branch ends in a global max pooling of ReLU
activations: vectors are non-negative with norms that vary with contrast and size, while identity
lives in the direction. Measured on the clustered features of ``benchmarks/bench_scoring.py``
(top-5 agreement with exact scoring, 200 queries x 1,568 gallery, P re-ranked): cosine 0.48 /
0.92 / 1.0 at P = 100 / 300 / 600, euclidean 0.04 / 0.14 / 0.35, dot 0.02 / 0.09 / 0.26, head
rank-4 1.0 already at P = 50. Mining uses cosine: its candidates are ``m`` per row out of all
``n``, the head proxy's 4x wider matrix product would cost ~4x the candidate time at n=15,697,
and cosine already keeps 97% of the dense selection's mean score (benchmark).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from whale import NEW_WHALE

__all__ = [
    "compute_features",
    "HeadScorer",
    "proxy_scores",
    "candidate_counts",
    "candidates",
    "mine_pruned",
    "topk_stream",
    "topk_to_predictions",
]

SIMILARITIES = ("cosine", "dot", "euclidean", "head")
DEFAULT_TILE = (64, 256)
DEFAULT_PAIR_CHUNK = 16384


# --------------------------------------------------------------------------- helpers


def _progress(iterable, total=None, desc=None, enabled=True):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)


def _as_features(f, name: str, d: int | None = None) -> np.ndarray:
    f = np.asarray(f)
    if f.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D [n, d] feature array, received shape {f.shape}")
    if d is not None and f.shape[1] != d:
        raise ValueError(f"{name}: expected feature dimension d={d}, received shape {f.shape}")
    if not np.issubdtype(f.dtype, np.floating):
        raise ValueError(f"{name}: expected float features, received dtype {f.dtype}")
    return np.ascontiguousarray(f, dtype=np.float32)


def _codes(ids, n: int, name: str = "ids") -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) != n:
        raise ValueError(f"{name}: expected {n} labels (one per feature row), received shape {ids.shape}")
    return np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)


# --------------------------------------------------------------------------- features


def compute_features(branch, batches, n: int | None = None, batch_size: int = 64, progress: bool = True):
    """Branch features of every image, computed once, batch by batch.

    Args:
        branch: Keras model, float32 images ``[b, S, S, C]`` (raw 0..255) -> ``[b, d]``.
        batches: an iterable of float32 image batches ``[b, S, S, C]`` (or ``(x, ...)``
            tuples, whose first element is used), a ``keras.utils.PyDataset``, or one
            ``[n, S, S, C]`` array that is cut into ``batch_size`` batches.
        n: number of images expected in total (progress bar; checked at the end). ``None``:
            not checked.
        batch_size: batch size when ``batches`` is one array.
        progress: show a tqdm bar.

    Returns:
        ``[n, d]`` float32.
    """
    if isinstance(batches, np.ndarray):
        arr = batches
        if arr.ndim != 4:
            raise ValueError(f"batches: expected an [n, S, S, C] image array, received shape {arr.shape}")
        n = arr.shape[0] if n is None else n
        batches = (arr[i : i + batch_size] for i in range(0, arr.shape[0], batch_size))
        total = math.ceil(arr.shape[0] / batch_size)
    elif hasattr(batches, "__getitem__") and hasattr(batches, "__len__") and not isinstance(batches, (list, tuple)):
        ds = batches  # keras PyDataset (or any Sequence-like of batches)
        total = len(ds)
        batches = (ds[i] for i in range(total))
    else:
        total = len(batches) if hasattr(batches, "__len__") else None

    out = []
    count = 0
    for batch in _progress(batches, total=total, desc="features", enabled=progress):
        if isinstance(batch, (tuple, list)):
            batch = batch[0]
        x = np.asarray(batch, dtype=np.float32)
        # Under a multi-replica MirroredStrategy, Keras 3.15's predict_on_batch returns each
        # row once per replica and predict() fails on batches smaller than the replica
        # count; a direct call runs the batch whole on one device.
        if branch.distribute_strategy.num_replicas_in_sync > 1:
            f = np.asarray(branch(x, training=False), dtype=np.float32)
        else:
            f = np.asarray(branch.predict_on_batch(x), dtype=np.float32)
        if f.ndim != 2 or f.shape[0] != x.shape[0]:
            raise ValueError(f"branch: expected [b, d] features for a batch of {x.shape[0]}, received {f.shape}")
        out.append(f)
        count += f.shape[0]
    if n is not None and count != n:
        raise ValueError(f"batches: expected {n} images in total, received {count}")
    if not out:
        raise ValueError("batches: expected at least one batch of images, received none")
    return np.concatenate(out, axis=0)


# --------------------------------------------------------------------------- exact head


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
    act1 = keras.activations.serialize(convs[0].activation)
    act2 = keras.activations.serialize(convs[1].activation)
    name = lambda a: a if isinstance(a, str) else a.get("config", {}).get("name", a.get("class_name"))
    if name(act1) != "relu" or name(act2) != "linear":
        return None
    dense = []
    for layer in denses:
        ws = layer.get_weights()
        if len(ws) != 2:
            return None
        act = name(keras.activations.serialize(layer.activation))
        if act not in ("relu", "linear", "sigmoid", "tanh"):
            return None
        dense.append((np.asarray(ws[0], np.float32), np.asarray(ws[1], np.float32), act))
    if dense[-1][0].shape[1] != 1 or dense[-1][2] != "sigmoid":
        return None
    d = dense[0][0].shape[0]
    return {"d": d, "C": k1[:, 0, 0, :], "b1": b1, "v": k2[0, :, 0, 0], "b2": float(b2[0]), "dense": dense}


class HeadScorer:
    """Exact, blockwise evaluation of a siamese head on many feature pairs.

    Args:
        head: the Keras head, inputs ``(x, y)`` each ``[d]`` float32 -> ``[1]`` probability.
        tile: ``(a, b)`` query x gallery block evaluated per call of the compiled function;
            memory of one call ~ ``a * b * d * 4`` bytes times a few.
        pair_chunk: row-aligned pairs per call in :meth:`pairs`.
        jit: compile with XLA (much faster on CPU); falls back to plain ``tf.function``
            if XLA is unavailable.
        check: compare with ``head`` on random pairs when built; a mismatch (a head that does
            not follow the contract) switches to the generic path through the Keras model.

    Attributes:
        d: feature dimension. ``exact_formula``: True if the fast formula path is used.
        pairs_computed: running count of pairs evaluated (for benchmarks).
    """

    def __init__(self, head, tile=DEFAULT_TILE, pair_chunk=DEFAULT_PAIR_CHUNK, jit=True, check=True):
        self.head = head
        self.tile = (int(tile[0]), int(tile[1]))
        self.pair_chunk = int(pair_chunk)
        if min(self.tile) < 1 or self.pair_chunk < 1:
            raise ValueError(f"tile, pair_chunk: expected positive sizes, received {tile}, {pair_chunk}")
        self.jit = bool(jit)
        self.params = _extract_head(head)
        self.d = self.params["d"] if self.params else int(head.inputs[0].shape[-1])
        self.exact_formula = self.params is not None
        self.pairs_computed = 0
        self._fns = {}
        if check:
            self._verify()

    # ---- the compiled core

    def _core(self, X, Y):
        """Broadcastable tf tensors ``[..., d]`` -> probabilities ``[...]`` (float32)."""
        import tensorflow as tf

        if not self.exact_formula:
            shape = tf.shape(X + Y)
            Xb = tf.reshape(tf.broadcast_to(X, shape), (-1, self.d))
            Yb = tf.reshape(tf.broadcast_to(Y, shape), (-1, self.d))
            out = self.head([Xb, Yb], training=False)
            return tf.reshape(tf.cast(out, tf.float32), shape[:-1])
        p = self.params
        C, b1, v = p["C"].astype(np.float64), p["b1"].astype(np.float64), p["v"].astype(np.float64)
        xy = X * Y
        s = X + Y
        df = X - Y
        ad = tf.abs(df)
        sq = df * df
        acc = None
        # Unrolled over the mid units with the weights as constants: XLA fuses the whole loop,
        # so [.., d, mid] never exists in memory.
        for m in range(C.shape[1]):
            z = float(C[0, m]) * xy + float(C[1, m]) * s + float(C[2, m]) * ad + float(C[3, m]) * sq + float(b1[m])
            t = float(v[m]) * tf.nn.relu(z)
            acc = t if acc is None else acc + t
        h = acc + p["b2"]
        acts = {"relu": tf.nn.relu, "linear": lambda t: t, "sigmoid": tf.sigmoid, "tanh": tf.tanh}
        for W, b, act in p["dense"]:
            if W.shape[1] == 1:
                h = tf.reduce_sum(h * tf.constant(W[:, 0]), axis=-1, keepdims=True) + float(b[0])
            else:
                h = tf.tensordot(h, tf.constant(W), axes=1) + tf.constant(b)
            h = acts[act](h)
        return h[..., 0]

    def _fn(self, kind: str, shape: tuple):
        """One compiled function per (kind, fixed shape): XLA compiles each shape once."""
        key = (kind, shape)
        if key in self._fns:
            return self._fns[key]
        import tensorflow as tf

        d = self.d
        if kind == "block":
            sig = [tf.TensorSpec((shape[0], d), tf.float32), tf.TensorSpec((shape[1], d), tf.float32)]
            body = lambda x, y: self._core(x[:, None, :], y[None, :, :])
        else:
            sig = [tf.TensorSpec((shape[0], d), tf.float32), tf.TensorSpec((shape[0], d), tf.float32)]
            body = lambda x, y: self._core(x, y)
        fn = None
        if self.jit:
            try:
                fn = tf.function(body, input_signature=sig, jit_compile=True)
                fn.get_concrete_function()
                fn(tf.zeros(sig[0].shape), tf.zeros(sig[1].shape))
            except Exception as err:  # XLA missing or unsupported op: plain graph instead
                warnings.warn(f"HeadScorer: XLA compilation failed ({type(err).__name__}); using tf.function")
                fn = None
        if fn is None:
            fn = tf.function(body, input_signature=sig)
        self._fns[key] = fn
        return fn

    def _verify(self):
        if not self.exact_formula:
            return
        rng = np.random.default_rng(0)
        x = rng.random((64, self.d), dtype=np.float32) * 2
        y = np.concatenate([x[:32] + 0.05 * rng.standard_normal((32, self.d), dtype=np.float32),
                            rng.random((32, self.d), dtype=np.float32) * 2]).astype(np.float32)
        ref = np.asarray(self.head([x, y], training=False), dtype=np.float32).reshape(-1)
        got = self.pairs(x, y)
        if not np.allclose(got, ref, atol=1e-5, rtol=1e-4):
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
        f = _as_features(f, "f", self.d)
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
        fa = _as_features(fa, "fa", self.d)
        fb = _as_features(fb, "fb", self.d)
        if fa.shape != fb.shape:
            raise ValueError(f"fa, fb: expected equal shapes [m, d], received {fa.shape} and {fb.shape}")
        return self._pairs_gather(fa, fb, None, None, progress)

    def pairs_index(self, fa, fb, ia, ib, progress: bool = False) -> np.ndarray:
        """Scores of pairs ``(fa[ia[t]], fb[ib[t]])`` without gathering all pairs at once.

        ``fa`` ``[na, d]``, ``fb`` ``[nb, d]`` float; ``ia``, ``ib`` ``[m]`` int. Returns ``[m]`` float32.
        """
        fa = _as_features(fa, "fa", self.d)
        fb = _as_features(fb, "fb", self.d)
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
        for s in _progress(starts, total=len(starts), desc="pairs", enabled=progress):
            e = min(m, s + chunk)
            if ia is None:
                xa[: e - s], xb[: e - s] = fa[s:e], fb[s:e]
            else:
                np.take(fa, ia[s:e], axis=0, out=xa[: e - s])
                np.take(fb, ib[s:e], axis=0, out=xb[: e - s])
            out[s:e] = fn(xa, xb).numpy()[: e - s]
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
            out_row[:, s - c0 : e - c0] = fn(xa, yb).numpy()[:, : e - s]

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
        fa = _as_features(fa, "fa", self.d)
        sym = fb is None
        fb = fa if sym else _as_features(fb, "fb", self.d)
        na, nb = len(fa), len(fb)
        out = np.empty((na, nb), dtype=dtype)
        xa = np.zeros((ta, self.d), np.float32)
        starts = range(0, na, ta)
        for r0 in _progress(starts, total=len(starts), desc="scores", enabled=progress):
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


# --------------------------------------------------------------------------- proxy


def _proxy_prep(f: np.ndarray, similarity: str, scorer=None, side: str = "g"):
    """``(vectors, column bias)``: proxy(i, j) = left[i] . right[j] + bias[j].

    ``side`` = ``"q"`` for the left (query/row) factor, ``"g"`` for the right one; they differ
    only for ``"head"``.
    """
    if similarity == "head":
        if scorer is None or not scorer.has_head_proxy:
            warnings.warn("similarity='head' needs a hidden=0 contract head; using 'cosine'")
            return _proxy_prep(f, "cosine")
        return scorer.proxy_features(f, side), None
    if similarity == "cosine":
        norm = np.linalg.norm(f, axis=1, keepdims=True)
        return f / np.maximum(norm, 1e-12), None
    if similarity == "dot":
        return f, None
    if similarity == "euclidean":
        return f, (-0.5 * np.einsum("ij,ij->i", f, f)).astype(np.float32)
    raise ValueError(f"similarity: expected one of {SIMILARITIES}, received {similarity!r}")


def proxy_scores(fa, fb, similarity: str = "cosine") -> np.ndarray:
    """Cheap proxy similarity ``[na, nb]`` float32 (higher = more alike) for ranking rows.

    ``"euclidean"`` is ``x.y - |y|^2 / 2``: minus half the squared distance up to a per-row
    constant, so it ranks each row like the distance does.
    """
    fa = _as_features(fa, "fa")
    fb = _as_features(fb, "fb", fa.shape[1])
    va, _ = _proxy_prep(fa, similarity)
    vb, bias = _proxy_prep(fb, similarity)
    out = va @ vb.T
    if bias is not None:
        out += bias
    return out


def _top_cols(sim: np.ndarray, m: int) -> np.ndarray:
    """Per row, the columns of the ``m`` highest finite values (unordered), ``[b, m]`` int64."""
    n = sim.shape[1]
    m = min(m, n)
    if m == n:
        return np.broadcast_to(np.arange(n), sim.shape).copy()
    return np.argpartition(sim, n - m, axis=1)[:, n - m :].astype(np.int64)


# --------------------------------------------------------------------------- mining


def candidate_counts(m: int, k: float, n_random: int | None = None) -> tuple[int, int]:
    """``(m_top, n_random)`` per image for pruned mining at noise scale ``k``.

    The cost is ``-S + k * U(0, 1)`` with ``S`` in ``[0, 1]``:

    * ``k < 1``: the noise is smaller than the score range, so the winners are high-scoring
      pairs: all ``m`` proxy candidates, plus ``max(8, ceil(m * k))`` random partners to catch
      what the proxy misses and keep some randomness.
    * ``k >= 1``: the noise dominates; a top candidate's advantage over a random partner is at
      most 1, i.e. ``1/k`` of the noise range, so only ``ceil(m / k)`` proxy candidates are kept
      next to ``m`` random partners. At ``k = 1000`` the choice is (like the dense one) a
      near-uniform draw over all images of other ids.

    ``n_random`` given: used as is (``m_top`` still follows the rule).
    """
    m = int(m)
    if m < 1:
        raise ValueError(f"m: expected an integer >= 1, received {m}")
    k = float(k)
    if not (k >= 0 and np.isfinite(k)):
        raise ValueError(f"k: expected a finite number >= 0, received {k}")
    if k < 1:
        m_top, r = m, max(8, math.ceil(m * k))
    else:
        m_top, r = max(1, math.ceil(m / k)), m
    if n_random is not None:
        r = int(n_random)
        if r < 0:
            raise ValueError(f"n_random: expected an integer >= 0, received {n_random}")
    return m_top, r


def candidates(features, ids, m: int = 100, n_random: int = 0, rng=None, block: int = 1024,
               similarity: str = "cosine", progress: bool = False, scorer=None):
    """Candidate partners per image for pruned mining.

    Args:
        features: ``[n, d]`` float branch features.
        ids: ``[n]`` labels; same-id pairs (and self) are never candidates.
        m: per image, its ``m`` partners of other ids with the highest proxy similarity.
        n_random: per image, plus this many uniformly random partners of other ids.
        rng: ``np.random.Generator`` (needed when ``n_random > 0``).
        block: rows per proxy block (memory ``block * n * 4`` bytes).
        similarity: proxy, one of ``"cosine"``, ``"dot"``, ``"euclidean"``.

    Returns:
        ``(rows, cols)``: ``[c]`` int64 each, deduplicated, sorted by row then column (CSR
        order); every image appears as a row at least once when it has another-id partner.
    """
    f = _as_features(features, "features")
    n = len(f)
    codes = _codes(ids, n)
    m, n_random, block = int(m), int(n_random), int(block)
    if m < 0 or n_random < 0 or block < 1:
        raise ValueError(f"m, n_random, block: expected m >= 0, n_random >= 0, block >= 1, received {m}, {n_random}, {block}")
    if n_random and rng is None:
        raise ValueError("rng: expected a np.random.Generator when n_random > 0, received None")
    keys = []
    if m:
        vec, bias = _proxy_prep(f, similarity, scorer, "g")
        left = _proxy_prep(f, similarity, scorer, "q")[0] if similarity == "head" else vec
        starts = range(0, n, block)
        for r0 in _progress(starts, total=len(starts), desc="candidates", enabled=progress):
            r1 = min(n, r0 + block)
            sim = left[r0:r1] @ vec.T
            if bias is not None:
                sim += bias
            sim[codes[r0:r1, None] == codes[None, :]] = -np.inf  # same id, self included
            cols = _top_cols(sim, m)
            ok = np.isfinite(np.take_along_axis(sim, cols, axis=1))
            rows = np.broadcast_to(np.arange(r0, r1)[:, None], cols.shape)
            keys.append(rows[ok] * n + cols[ok])
    if n_random:
        rows = np.repeat(np.arange(n, dtype=np.int64), n_random)
        cols = rng.integers(0, n, size=rows.size)
        for _ in range(8):  # redraw same-id partners (a few rounds suffice unless one id dominates)
            bad = codes[rows] == codes[cols]
            if not bad.any():
                break
            cols[bad] = rng.integers(0, n, size=int(bad.sum()))
        ok = codes[rows] != codes[cols]
        keys.append(rows[ok] * n + cols[ok])
    if not keys:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys = np.unique(np.concatenate(keys))
    return keys // n, keys % n


def mine_pruned(scorer: HeadScorer, features, ids, k, epochs, rng, m: int = 100, n_random: int | None = None,
                similarity: str = "cosine", maxval: float = 10000.0, progress: bool = False):
    """Algorithm 1 on candidate pairs only: proxy top-``m`` + random partners, exact head scores.

    Args:
        scorer: :class:`HeadScorer` of the current head.
        features: ``[n, d]`` float branch features of the training images (no ``new_whale``).
        ids: ``[n]`` labels.
        k: noise scale ``K``; epochs: epochs to mine; rng: ``np.random.Generator``.
        m, n_random: candidate counts; ``n_random=None`` applies :func:`candidate_counts`
            (which also shrinks the proxy part when ``k >= 1``).
        similarity: proxy for the top candidates.

    Returns:
        list of ``epochs`` arrays ``(n, 2)`` int64 ``(i, x[i])``: every image once per column
        per epoch, never a same-id pair, no ordered pair repeated across epochs (the rules of
        :func:`whale.miner.mine_negatives_sparse`, which solves the assignment).
    """
    from whale.miner import mine_negatives_sparse

    f = _as_features(features, "features", scorer.d)
    m_top, r = candidate_counts(m, k, n_random)
    rows, cols = candidates(f, ids, m=m_top, n_random=r, rng=rng, similarity=similarity, progress=progress,
                            scorer=scorer)
    scores = scorer.pairs_index(f, f, rows, cols, progress=progress)
    return mine_negatives_sparse(rows, cols, scores, ids, k, epochs, rng, maxval=maxval)


# --------------------------------------------------------------------------- top-k inference


def topk_stream(scorer: HeadScorer, fq, fg, gallery_ids, k_ids: int = 20, block: int = 256,
                prune: int | None = None, similarity: str = "auto", progress: bool = True):
    """Top ``k_ids`` ids per query by per-id maximum probability, streamed over the gallery.

    Args:
        scorer: :class:`HeadScorer`.
        fq: ``[nq, d]`` float query features; fg: ``[ng, d]`` float gallery features.
        gallery_ids: ``[ng]`` str labels; ``new_whale`` images are dropped (never returned).
        k_ids: ids kept per query (``min(k_ids, n_ids)``).
        block: queries per step; memory ~ ``block * n_ids * 4`` bytes for the running maximum
            plus one scorer tile (and ``block * ng * 4`` for the proxy when pruning).
        prune: ``None`` = exact (every gallery image scored by the head); ``P`` = per query only
            its top ``P`` gallery images by the proxy are scored by the head.
        similarity: proxy for ``prune``; ``"auto"`` = ``"head"`` (rank-4 factorisation of the
            head's own logit, :meth:`HeadScorer.proxy_features`) for a hidden=0 contract head,
            else ``"cosine"``.

    Returns:
        ``(id_names, id_scores)``: ``[nq, k]`` str and ``[nq, k]`` float32, descending per row
        (ties by id name). With ``prune``, a query whose ``P`` images hold fewer than ``k``
        distinct ids is padded with other ids at probability 0.0 (the sigmoid's floor). Feed
        them to :func:`topk_to_predictions` (or row-wise to ``rank_from_id_scores``).
    """
    fq = _as_features(fq, "fq", scorer.d)
    fg = _as_features(fg, "fg", scorer.d)
    gids = np.asarray(list(gallery_ids), dtype=str)
    if gids.shape != (len(fg),):
        raise ValueError(f"gallery_ids: expected {len(fg)} labels (one per gallery row), received {gids.shape}")
    keep = gids != NEW_WHALE
    fg, gids = fg[keep], gids[keep]
    names, codes = np.unique(gids, return_inverse=True)
    n_ids = names.size
    if n_ids == 0:
        raise ValueError("gallery_ids: expected at least one id other than new_whale")
    kk = min(int(k_ids), n_ids)
    nq = len(fq)
    out_idx = np.empty((nq, kk), np.int64)
    out_val = np.empty((nq, kk), np.float32)
    # Gallery sorted by id so a block's per-id max is one reduceat over contiguous runs.
    order = np.argsort(codes, kind="stable")
    fg_s, codes_s = fg[order], codes[order]
    if prune is not None:
        if similarity == "auto":
            similarity = "head" if scorer.has_head_proxy else "cosine"
        prune = int(prune)
        if prune < 1:
            raise ValueError(f"prune: expected None or an integer >= 1, received {prune}")
        vg, bias = _proxy_prep(fg_s, similarity, scorer, "g")
        vq, _ = _proxy_prep(fq, similarity, scorer, "q")
    ta = scorer.tile[0]
    block = max(1, int(block))
    starts = range(0, nq, block)
    for q0 in _progress(starts, total=len(starts), desc="top-k", enabled=progress):
        q1 = min(nq, q0 + block)
        best = np.full((q1 - q0, n_ids), -np.inf, np.float32)
        if prune is None:
            gb = max(scorer.tile[1], 2048)
            xa = np.zeros((ta, scorer.d), np.float32)
            for r0 in range(q0, q1, ta):
                r1 = min(q1, r0 + ta)
                xa[: r1 - r0] = fq[r0:r1]
                xa[r1 - r0 :] = 0.0
                row = np.empty((ta, gb), np.float32)
                for c0 in range(0, len(fg_s), gb):
                    c1 = min(len(fg_s), c0 + gb)
                    scorer._block(xa, fg_s, c0, c1, row[:, : c1 - c0])
                    seg = codes_s[c0:c1]
                    heads = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
                    red = np.maximum.reduceat(row[: r1 - r0, : c1 - c0], heads, axis=1)
                    cols = seg[heads]
                    sub = best[r0 - q0 : r1 - q0]
                    sub[:, cols] = np.maximum(sub[:, cols], red)
                    scorer.pairs_computed += (r1 - r0) * (c1 - c0)
        else:
            sim = vq[q0:q1] @ vg.T
            if bias is not None:
                sim += bias
            top = _top_cols(sim, prune)  # [b, P]
            top.sort(axis=1)  # ascending gallery index = grouped by id
            qrow = np.broadcast_to(np.arange(q0, q1)[:, None], top.shape).reshape(-1)
            s = scorer.pairs_index(fq, fg_s, qrow, top.reshape(-1)).reshape(top.shape)
            np.maximum.at(best, (qrow - q0, codes_s[top.reshape(-1)]), s.reshape(-1))
        best[~np.isfinite(best)] = -1.0  # ids never scored: below any probability
        idx = _topk_rows(best, kk)
        val = np.take_along_axis(best, idx, axis=1)
        out_idx[q0:q1] = idx
        out_val[q0:q1] = np.maximum(val, 0.0)
    return names[out_idx], out_val


def _topk_rows(vals: np.ndarray, k: int) -> np.ndarray:
    """``[b, k]`` column indices of the ``k`` largest values per row, descending, ties by column."""
    n = vals.shape[1]
    if k < n:
        part = np.argpartition(-vals, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(vals, part, axis=1).min(axis=1)
        tied = np.flatnonzero((vals >= kth[:, None]).sum(axis=1) > k)
        if tied.size:  # resolve ties at the k-th value by lowest column
            for i in tied:
                part[i] = np.lexsort((np.arange(n), -vals[i].astype(np.float64)))[:k]
    else:
        part = np.broadcast_to(np.arange(n), vals.shape).copy()
    v = np.take_along_axis(vals, part, axis=1).astype(np.float64)
    o = np.lexsort((part, -v), axis=1)
    return np.take_along_axis(part, o, axis=1)


def topk_to_predictions(id_names, id_scores, threshold: float) -> list[list[str]]:
    """Per-query top ids (``topk_stream`` output) -> five labels with ``new_whale`` inserted.

    ``id_names`` ``[nq, k]`` str, ``id_scores`` ``[nq, k]`` float. Applies
    :func:`whale.ranking.rank_from_id_scores` row by row (same insertion rule and tie order).
    """
    from whale.ranking import rank_from_id_scores

    id_names = np.asarray(id_names, dtype=str)
    id_scores = np.asarray(id_scores, dtype=np.float32)
    if id_names.shape != id_scores.shape or id_names.ndim != 2:
        raise ValueError(f"id_names, id_scores: expected equal [nq, k] shapes, received {id_names.shape}, {id_scores.shape}")
    return [rank_from_id_scores(n, s[None, :], threshold)[0] for n, s in zip(id_names, id_scores)]
