"""A fitted gradient-boosted tree classifier as plain arrays, and a NumPy predictor that reads them back.

scikit-learn's models have no format but pickle, and a pickle read back from a cache runs whatever its writer put
in it. A binary :class:`sklearn.ensemble.HistGradientBoostingClassifier` on numeric features is, once fitted, a
baseline (its raw prediction before any tree) and a list of trees whose nodes say: the feature, the threshold,
where a missing value goes, the two children, and a leaf's value. :func:`tree_arrays` takes exactly that out as
arrays (for :func:`whale.core.sealed.write_sealed`), and :class:`TreeEnsemble` predicts from them what the model
predicts: the same float64 sums in the same order, so ``predict_proba`` agrees with scikit-learn's to the bit on
every input scikit-learn accepts, NaN included (``tests/test_trees.py``).

Example:
    >>> model = HistGradientBoostingClassifier().fit(x, y)              # doctest: +SKIP
    >>> write_sealed(path, tree_arrays(model))                          # doctest: +SKIP
    >>> TreeEnsemble.from_arrays(read_sealed(path)).predict_proba(x)    # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

NAMES = ("baseline", "n_features", "tree_starts", "value", "feature", "threshold", "missing_left", "left", "right",
         "is_leaf")
"""The arrays :func:`tree_arrays` gives (a prefix, :func:`prefixed`, keeps several ensembles in one file)."""


def tree_arrays(model) -> dict[str, np.ndarray]:
    """The arrays of a fitted binary ``HistGradientBoostingClassifier`` on numeric features (:data:`NAMES`):

    ``baseline [1] float64`` (the raw prediction before any tree), ``n_features [] int64``, ``tree_starts [T + 1]
    int64`` (tree ``t``'s nodes are rows ``tree_starts[t]:tree_starts[t + 1]`` of the node arrays, its children
    numbered within the tree), and per node ``value float64``, ``feature int64``, ``threshold float64``,
    ``missing_left bool``, ``left int64``, ``right int64``, ``is_leaf bool``.

    Raises:
        ValueError: not a fitted binary classifier of that kind, or one with categorical features.
    """
    predictors = getattr(model, "_predictors", None)
    if predictors is None or getattr(model, "n_trees_per_iteration_", None) != 1 or len(model.classes_) != 2:
        raise ValueError(f"tree_arrays: expected a fitted binary HistGradientBoostingClassifier, "
                         f"received {type(model).__name__}")
    nodes = [it[0].nodes for it in predictors]
    if any(n["is_categorical"].any() for n in nodes if "is_categorical" in n.dtype.names):
        raise ValueError("tree_arrays: a model with categorical features (only numeric ones are supported)")
    cat = np.concatenate(nodes) if nodes else np.zeros(0, nodes_dtype())
    return {"baseline": np.asarray(model._baseline_prediction, np.float64).reshape(1),
            "n_features": np.asarray(model.n_features_in_, np.int64),
            "tree_starts": np.concatenate([[0], np.cumsum([len(n) for n in nodes])]).astype(np.int64),
            "value": cat["value"].astype(np.float64), "feature": cat["feature_idx"].astype(np.int64),
            "threshold": cat["num_threshold"].astype(np.float64),
            "missing_left": cat["missing_go_to_left"].astype(bool), "left": cat["left"].astype(np.int64),
            "right": cat["right"].astype(np.int64), "is_leaf": cat["is_leaf"].astype(bool)}


def nodes_dtype() -> np.dtype:
    return np.dtype([("value", "f8"), ("feature_idx", "i8"), ("num_threshold", "f8"), ("missing_go_to_left", "u1"),
                     ("left", "u4"), ("right", "u4"), ("is_leaf", "u1")])


def prefixed(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """``arrays`` with ``prefix`` before each name (several ensembles in one file)."""
    return {f"{prefix}{k}": v for k, v in arrays.items()}


def unprefixed(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays of ``arrays`` named ``prefix`` + one of :data:`NAMES`, without the prefix."""
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix) and k[len(prefix):] in NAMES}


class TreeEnsemble:
    """A binary tree ensemble read from :func:`tree_arrays`' arrays: :meth:`predict_proba` as the model's.

    The arrays are checked when read (:meth:`from_arrays`): each tree's children come after their parent within it
    (so every walk ends, as scikit-learn numbers them), features lie among ``n_features``, values are finite.
    """

    def __init__(self, baseline: float, n_features: int, trees: list[tuple[np.ndarray, ...]],
                 arrays: Mapping[str, np.ndarray]):
        """Use :meth:`from_arrays` or :meth:`from_model`; ``arrays``: what :meth:`arrays` gives back."""
        self.baseline, self.n_features, self._trees = float(baseline), int(n_features), trees
        self._walk = None  # scikit-learn's compiled walk of these trees (:meth:`compiled`), once asked for
        self._arrays = dict(arrays)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays this ensemble was read from (:func:`tree_arrays`' layout), to write it again."""
        return dict(self._arrays)

    @property
    def n_trees(self) -> int:
        return len(self._trees)

    @classmethod
    def from_model(cls, model) -> "TreeEnsemble":
        """The ensemble of a fitted ``HistGradientBoostingClassifier`` (:func:`tree_arrays`)."""
        return cls.from_arrays(tree_arrays(model))

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "TreeEnsemble":
        """The ensemble :func:`tree_arrays` described.

        Raises:
            ValueError: arrays missing, of the wrong shape or type, or not describing trees (the message says which).
        """
        missing = [k for k in NAMES if k not in arrays]
        if missing:
            raise ValueError(f"tree arrays: missing {', '.join(missing)}")
        a = {k: np.asarray(arrays[k]) for k in NAMES}
        starts, n = a["tree_starts"], len(a["value"])
        if a["baseline"].shape != (1,) or not np.isfinite(a["baseline"]).all() or a["n_features"].shape != () \
                or a["n_features"].dtype.kind != "i" or int(a["n_features"]) < 1:
            raise ValueError("tree arrays: baseline or n_features is not one finite number")
        if starts.ndim != 1 or starts.dtype.kind != "i" or len(starts) < 1 or starts[0] != 0 or starts[-1] != n \
                or (np.diff(starts) < 1).any():
            raise ValueError("tree arrays: tree_starts does not split the nodes into trees")
        for k in NAMES[3:]:
            if a[k].shape != (n,) or a[k].dtype.kind not in ("b" if k in ("missing_left", "is_leaf") else "if"):
                raise ValueError(f"tree arrays: {k} is {a[k].dtype} {a[k].shape}, expected {n} per-node values")
        if not np.isfinite(a["value"]).all():
            raise ValueError("tree arrays: a node value is not finite")
        n_features = int(a["n_features"])
        trees = []
        for t in range(len(starts) - 1):
            lo, hi = int(starts[t]), int(starts[t + 1])
            size = hi - lo
            leaf = a["is_leaf"][lo:hi].copy()
            own = np.arange(size)
            left, right = a["left"][lo:hi].astype(np.intp), a["right"][lo:hi].astype(np.intp)
            feature = a["feature"][lo:hi].astype(np.intp)
            inner = ~leaf
            if ((left[inner] <= own[inner]) | (right[inner] <= own[inner]) | (left[inner] >= size)
                    | (right[inner] >= size) | (feature[inner] < 0) | (feature[inner] >= n_features)).any():
                raise ValueError(f"tree arrays: tree {t} has a child out of order or a feature out of range")
            left, right = np.where(leaf, own, left), np.where(leaf, own, right)  # a leaf is its own child
            feature = np.where(leaf, 0, feature)
            depth = np.zeros(size, np.intp)
            for i in np.flatnonzero(inner):  # children after parents: one pass in order
                depth[left[i]] = depth[right[i]] = depth[i] + 1
            trees.append((feature, a["threshold"][lo:hi].astype(np.float64), a["missing_left"][lo:hi].astype(bool),
                          left, right, a["value"][lo:hi].astype(np.float64), int(depth.max())))
        return cls(float(a["baseline"][0]), n_features, trees, a)

    def raw(self, x) -> np.ndarray:
        """``[n] float64``: the baseline plus every tree's leaf value for each row of ``x`` (``[n, n_features]``,
        cast to float64 as scikit-learn does; NaN goes where the tree sends missing values): scikit-learn's own
        compiled walk of these arrays where it has one (:meth:`compiled`, 8-9x as fast:
        ``benchmarks/speed/tree_walk.py``), else :meth:`numpy_raw`."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"predict: expected [n, {self.n_features}] features, received {list(x.shape)}")
        walk = self.compiled()
        return walk(x) if walk is not None else self.numpy_raw(x)

    def compiled(self):
        """``f(x) -> [n] float64``, :meth:`raw` by scikit-learn's compiled tree walk (its ``TreePredictor``) over
        nodes made from these arrays, the trees' sums added one after the other from the baseline as scikit-learn
        adds them; None where this scikit-learn has no such walk or it gives other values than :meth:`numpy_raw`
        on a probe (random rows, NaN among them): then the NumPy walk serves, a tree at a time."""
        if self._walk is None:
            self._walk = self._compile() or False
        return self._walk or None

    def _compile(self):
        try:
            from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE, X_BITSET_INNER_DTYPE
            from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor
            from sklearn.utils._openmp_helpers import _openmp_effective_n_threads

            no_categories = np.zeros((0, 8), X_BITSET_INNER_DTYPE)
            known, f_idx_map = no_categories, np.zeros(self.n_features, np.uint32)
            threads = _openmp_effective_n_threads()
            predictors = []
            for feature, threshold, missing_left, left, right, value, _ in self._trees:
                nodes = np.zeros(len(value), PREDICTOR_RECORD_DTYPE)
                nodes["value"], nodes["feature_idx"], nodes["num_threshold"] = value, feature, threshold
                nodes["missing_go_to_left"], nodes["left"], nodes["right"] = missing_left, left, right
                nodes["is_leaf"] = left == np.arange(len(left))  # a leaf is its own child here (from_arrays)
                predictors.append(TreePredictor(nodes, no_categories, no_categories))

            def walk(x: np.ndarray) -> np.ndarray:
                x = np.ascontiguousarray(x, dtype=np.float64)
                out = np.zeros(len(x), np.float64)
                out += self.baseline
                for predictor in predictors:
                    out += predictor.predict(x, known, f_idx_map, threads)
                return out

            probe = np.random.default_rng(0).normal(size=(256, self.n_features)) * 3
            probe[np.random.default_rng(1).random(probe.shape) < 0.1] = np.nan
            return walk if np.array_equal(walk(probe), self.numpy_raw(probe)) else None
        except Exception:  # another scikit-learn's internals: the NumPy walk serves
            return None

    def numpy_raw(self, x) -> np.ndarray:
        """:meth:`raw` by NumPy alone: one tree at a time over every row, a level a step."""
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros(len(x), np.float64)
        out += self.baseline
        rows = np.arange(len(x))
        nan = np.isnan(x)
        for feature, threshold, missing_left, left, right, value, depth in self._trees:
            node = np.zeros(len(x), np.intp)
            for _ in range(depth):
                f = feature[node]
                v = x[rows, f]
                go_left = np.where(nan[rows, f], missing_left[node], v <= threshold[node])
                node = np.where(go_left, left[node], right[node])
            out += value[node]
        return out

    def predict_proba(self, x) -> np.ndarray:
        """``[n, 2] float64``: P(class 0), P(class 1) of each row of ``x``, as the model's ``predict_proba``."""
        from scipy.special import expit

        proba = np.empty((len(x), 2), np.float64)
        proba[:, 1] = expit(self.raw(x))
        proba[:, 0] = 1 - proba[:, 1]
        return proba
