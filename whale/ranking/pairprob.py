"""P(same individual | score): one run's pair scores calibrated on its own labelled pairs.

:meth:`PairCalibration.fit` reads a score matrix whose rows (queries) and columns (gallery photos) carry
their individuals, e.g. a run's ``val.npz`` or a catalogue matched against itself with each photo left out
of its own row (``skip``), and learns the probability that a pair of photos shows one individual given the
pair's score:

* **pairs**: every (query, gallery photo) pair, except gallery photos labelled ``open_label`` (no
  individual: they never count as the same) and the ``skip`` pairs; positive when both name the same
  individual (a query labelled ``open_label`` has only negatives);
* **negatives subsampled**: at most ``max_negatives`` of them, drawn with a seeded generator, each weighing
  ``negatives / drawn`` so the probabilities are for the true share of positive pairs (``base_rate``), not
  for the sample's; every positive is kept;
* **isotonic** (default): the pool-adjacent-violators fit of the positive share on the distinct scores,
  weighted by their pairs (scikit-learn's compiled :func:`sklearn.isotonic.isotonic_regression`: 0.35 s and
  158 MB at 5 M distinct scores; :func:`pava` says why not its ``IsotonicRegression`` class; a matrix where
  most scores are exactly 0, as the keypoint matcher's, is one value of large weight, so nothing is slow or
  degenerate); each pooled block is shrunk towards the base rate by
  :data:`PRIOR_PAIRS` pairs (a block of 3 positives and no negative is not certainty), and the map
  interpolates linearly between the blocks' weighted mean scores, so it is flat only below the first and
  above the last block;
* **logistic**: ``P = sigmoid(a * logit(score) + b)`` by scikit-learn's weighted logistic fit (Platt scaling
  on the score's log-odds: a head's sigmoid output has its logit as its pre-activation, the keypoint
  matcher's ``t / (t + 1)`` has ``log t``); scores clipped to [:data:`EPS`, 1 - :data:`EPS`] first.

Both maps are monotone non-decreasing, and a run whose scores are all equal gets its base rate everywhere.
:meth:`PairCalibration.to_dict` / :meth:`PairCalibration.from_dict` keep it as JSON-ready data (stored beside
an ensemble's submission, in a catalogue).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whale import NEW_WHALE
from whale.core.errors import DataError

METHODS = ("isotonic", "logistic")
MAX_NEGATIVES = 500_000
"""Negative pairs drawn at most (the rest are represented by their weight)."""
PRIOR_PAIRS = 2.0
"""Pairs at the base rate added to every isotonic block: a block of a few pairs stays near the base rate."""
EPS = 1e-6
"""Scores are clipped to [EPS, 1 - EPS] before the logistic map's logit."""
_CHUNK = 1 << 22  # elements mapped at a time: bounds the float64 temporaries of a large matrix
_TIE = 1e-12  # block means closer than this (relative) are one mean: the fit's rounding, not two blocks


def logit(p) -> np.ndarray:
    """``log(p / (1 - p))`` as float64, ``p`` clipped to [EPS, 1 - EPS]."""
    p = np.clip(np.asarray(p, np.float64), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def _sigmoid(z) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, np.float64)))


def pair_counts(scores: np.ndarray, query_ids, gallery_ids, open_label: str = NEW_WHALE, skip=None,
                max_negatives: int = MAX_NEGATIVES, seed: int = 0, block: int = 1024):
    """The labelled pairs of ``scores`` as weighted distinct values (module docstring).

    Args:
        scores: ``[n_query, n_gallery]`` float (float16 is fine), no NaN.
        query_ids: ``[n_query]`` str; gallery_ids: ``[n_gallery]`` str.
        skip: ``[n_query]`` int gallery column left out of each row (-1: none), or None.
        max_negatives: negatives drawn at most; seed: the draw's generator seed.

    Returns:
        ``(values [m] float64 ascending distinct scores, positive [m] float64, negative [m] float64 weights,
        n_positive int, n_negative int, n_drawn int)``.
    """
    scores = np.asarray(scores)
    q = np.asarray(query_ids, dtype=str)
    g = np.asarray(gallery_ids, dtype=str)
    if scores.ndim != 2 or scores.shape != (q.size, g.size):
        raise DataError(f"scores: expected [n_query, n_gallery] = [{q.size}, {g.size}] (one id per row and "
                        f"column), received shape {scores.shape}")
    if not np.issubdtype(scores.dtype, np.floating):
        raise DataError(f"scores: expected floats, received dtype {scores.dtype}")
    skip = None if skip is None else np.asarray(skip, np.int64)
    if skip is not None and skip.shape != (q.size,):
        raise DataError(f"skip: expected [{q.size}] gallery columns (-1: none), received shape {skip.shape}")
    cols = g != open_label
    codes = np.unique(np.concatenate([q, g]), return_inverse=True)[1]
    qc, gc = codes[: q.size], codes[q.size:]
    qc = np.where(q == open_label, -1, qc)  # an open-set query is nobody's: only negatives
    gc = np.where(cols, gc, -2)
    n_pos = n_neg = 0
    for start in range(0, q.size, block):
        same, valid = _pairs(qc, gc, skip, start, block)
        n_pos += int((same & valid).sum())
        n_neg += int((~same & valid).sum())
    if n_pos == 0 or n_neg == 0:
        raise DataError(f"calibration needs pairs of the same individual and of different ones; got {n_pos} "
                        f"same and {n_neg} different among {q.size} queries x {int(cols.sum())} gallery photos")
    rate = min(1.0, max_negatives / n_neg)
    rng = np.random.default_rng(seed)
    pos_parts, neg_parts = [], []
    for start in range(0, q.size, block):
        same, valid = _pairs(qc, gc, skip, start, block)
        s = scores[start:start + block]
        if np.isnan(s).any():
            raise DataError(f"scores: NaN in rows {start}..{start + len(s) - 1}")
        pos_parts.append(s[same & valid].astype(np.float64))
        neg = ~same & valid
        if rate < 1.0:
            neg &= rng.random(neg.shape) < rate
        neg_parts.append(s[neg].astype(np.float64))
    pos, neg = np.concatenate(pos_parts), np.concatenate(neg_parts)
    n_drawn = max(1, neg.size)
    values, inv = np.unique(np.concatenate([pos, neg]), return_inverse=True)
    positive = np.bincount(inv[: pos.size], minlength=values.size).astype(np.float64)
    negative = np.bincount(inv[pos.size:], minlength=values.size) * (n_neg / n_drawn)
    return values, positive, negative, n_pos, n_neg, int(neg.size)


def _pairs(qc, gc, skip, start, block):
    rows = slice(start, start + block)
    same = qc[rows, None] == gc[None, :]
    valid = np.broadcast_to(gc[None, :] != -2, same.shape).copy()
    if skip is not None:
        r = np.arange(same.shape[0])
        s = skip[rows]
        ok = s >= 0
        valid[r[ok], s[ok]] = False
    return same, valid


def pava(y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pool adjacent violators: ``(starts [b] int64, ends [b] int64)`` of the blocks (``[start, end)`` into
    ``y``) whose weighted means of ``y`` ``[m]`` (weights ``w`` ``[m]`` > 0) increase strictly.

    scikit-learn's :func:`sklearn.isotonic.isotonic_regression` (what ``IsotonicRegression`` fits with, compiled)
    gives every value its block's weighted mean; a block is a run of equal means (equal within :data:`_TIE`,
    relative: two blocks of one mean, which a pooling loop merges on ``>=``, are one here too). The estimator
    class itself is not used: its ``fit`` merges scores closer than float64's resolution (1e-15, so float32
    scores near 0 would pool before the fit) and keeps only each block's end points, where this map needs each
    block's pairs (their weighted mean score and their counts, shrunk to the base rate). Measured on 5 M
    distinct scores with weights (one CPU core): 0.35 s and 158 MB above its input (float64 copies of ``y``,
    ``w`` and the fit); the Python loop it replaced took 8.2 s (it held only the blocks). The weighted counts
    (negatives weighing ``negatives / drawn``, not whole numbers) go in as they are: sample weights are floats.
    """
    from sklearn.isotonic import isotonic_regression

    y, w = np.asarray(y, np.float64), np.asarray(w, np.float64)
    if y.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    fitted = isotonic_regression(y, sample_weight=w, increasing=True)
    cuts = np.flatnonzero(np.diff(fitted) > _TIE * np.maximum(1.0, np.abs(fitted[1:]))) + 1
    return np.concatenate([[0], cuts]).astype(np.int64), np.concatenate([cuts, [y.size]]).astype(np.int64)


@dataclass(frozen=True)
class PairCalibration:
    """A fitted map from a run's pair score to P(same individual) (module docstring).

    Attributes:
        method: ``isotonic`` or ``logistic``.
        base_rate: the share of positive pairs among the labelled pairs (the prior).
        knots, probs: the isotonic map's scores (ascending) and probabilities there (empty for logistic).
        coef: the logistic map's ``(a, b)`` (``(0, 0)`` for isotonic).
        n_positive, n_negative, n_drawn: the positive pairs, negative pairs, negatives drawn.

    Example:
        >>> cal = PairCalibration.fit(val.scores, val.query_ids, val.gallery_ids)   # doctest: +SKIP
        >>> p = cal.transform(test.scores)          # [n_query, n_gallery] float32 P(same individual)
    """

    method: str
    base_rate: float
    knots: tuple[float, ...]
    probs: tuple[float, ...]
    coef: tuple[float, float]
    n_positive: int
    n_negative: int
    n_drawn: int

    @classmethod
    def fit(cls, scores: np.ndarray, query_ids: Sequence[str], gallery_ids: Sequence[str],
            open_label: str = NEW_WHALE, method: str = "isotonic", skip=None,
            max_negatives: int = MAX_NEGATIVES, seed: int = 0) -> "PairCalibration":
        """Learn P(same individual | score) from ``scores`` ``[n_query, n_gallery]`` and the rows' and
        columns' individuals (:func:`pair_counts`: ``skip``, ``max_negatives``, ``seed``).

        Raises:
            DataError: a bad ``method``, shapes that disagree, NaN scores, no positive or no negative pair.
        """
        if method not in METHODS:
            raise DataError(f"calibration method: expected one of {', '.join(METHODS)}, received {method!r}")
        values, pos, neg, n_pos, n_neg, drawn = pair_counts(scores, query_ids, gallery_ids, open_label, skip,
                                                            max_negatives, seed)
        base = n_pos / (n_pos + n_neg)
        if method == "logistic":
            a, b = _fit_logistic(logit(values), pos, neg)
            return cls(method, base, (), (), (a, b), n_pos, n_neg, drawn)
        total = pos + neg
        starts, ends = pava(pos / total, total)
        cum = np.concatenate([[0.0], np.cumsum(total)])
        cum_pos = np.concatenate([[0.0], np.cumsum(pos)])
        cum_x = np.concatenate([[0.0], np.cumsum(values * total)])
        weight = cum[ends] - cum[starts]
        centre = (cum_x[ends] - cum_x[starts]) / weight
        p = (cum_pos[ends] - cum_pos[starts] + PRIOR_PAIRS * base) / (weight + PRIOR_PAIRS)
        p = np.maximum.accumulate(p)  # shrinking may undo the order of a small block and a large one
        return cls(method, base, tuple(centre.tolist()), tuple(p.tolist()), (0.0, 0.0), n_pos, n_neg, drawn)

    def transform(self, scores) -> np.ndarray:
        """``P(same individual)`` of every score: float32, the shape of ``scores`` (any float array)."""
        s = np.asarray(scores)
        out = np.empty(s.shape, np.float32)
        flat_in, flat_out = s.reshape(-1), out.reshape(-1)
        for start in range(0, flat_in.size, _CHUNK):
            x = flat_in[start:start + _CHUNK].astype(np.float64)
            if self.method == "logistic":
                flat_out[start:start + _CHUNK] = _sigmoid(self.coef[0] * logit(x) + self.coef[1])
            else:
                flat_out[start:start + _CHUNK] = np.interp(x, self.knots, self.probs)
        return out

    def score_for(self, probability: float) -> float:
        """The lowest score whose probability reaches ``probability`` (inf when none does): a probability
        threshold as a threshold on this run's scores."""
        p = float(probability)
        if self.method == "logistic":
            a, b = self.coef
            if a <= 0:
                return -np.inf if _sigmoid(b) >= p else np.inf
            z = (logit(p) - b) / a
            return float(_sigmoid(z))
        knots, probs = np.asarray(self.knots), np.asarray(self.probs)
        if probs[0] >= p:
            return -np.inf
        if probs[-1] < p:
            return np.inf
        i = int(np.argmax(probs >= p))  # first knot reaching p; interpolate inside the segment before it
        frac = (p - probs[i - 1]) / (probs[i] - probs[i - 1])
        return float(knots[i - 1] + frac * (knots[i] - knots[i - 1]))

    def to_dict(self) -> dict:
        """JSON-ready data (:meth:`from_dict` reads it back)."""
        return {"method": self.method, "base_rate": self.base_rate, "knots": list(self.knots),
                "probs": list(self.probs), "coef": list(self.coef), "n_positive": self.n_positive,
                "n_negative": self.n_negative, "n_drawn": self.n_drawn}

    @classmethod
    def from_dict(cls, raw, where: str = "calibration") -> "PairCalibration":
        """The calibration ``raw`` holds (:meth:`to_dict`).

        Raises:
            DataError: naming ``where`` and the key of a missing or bad value.
        """
        if not isinstance(raw, dict):
            raise DataError(f"{where}: expected a JSON object, received {type(raw).__name__}")

        def get(key, kind):
            if key not in raw:
                raise DataError(f"{where}: {key}: missing")
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, kind):
                raise DataError(f"{where}: {key}: expected {getattr(kind, '__name__', 'a number')}, received {v!r}")
            return v

        method = get("method", str)
        if method not in METHODS:
            raise DataError(f"{where}: method: expected one of {', '.join(METHODS)}, received {method!r}")
        arrays = {}
        for key in ("knots", "probs", "coef"):
            v = get(key, list)
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) for x in v):
                raise DataError(f"{where}: {key}: expected a list of finite numbers")
            arrays[key] = tuple(float(x) for x in v)
        if len(arrays["coef"]) != 2 or len(arrays["knots"]) != len(arrays["probs"]) or (
                method == "isotonic" and not arrays["knots"]):
            raise DataError(f"{where}: expected coef of 2 numbers and knots and probs of one equal, non-empty "
                            f"length, received {len(arrays['coef'])}, {len(arrays['knots'])}, {len(arrays['probs'])}")
        base = float(get("base_rate", (int, float)))
        if not 0 < base < 1:
            raise DataError(f"{where}: base_rate: expected a number in (0, 1), received {base}")
        return cls(method, base, arrays["knots"], arrays["probs"], arrays["coef"], int(get("n_positive", int)),
                   int(get("n_negative", int)), int(get("n_drawn", int)))

    def describe(self) -> str:
        """One line: the method, the pairs and the base rate."""
        return (f"{self.method} on {self.n_positive} same-individual pairs and {self.n_negative} others "
                f"({self.n_drawn} drawn), base rate {self.base_rate:.3g}")


def _fit_logistic(x: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """``(a, b)`` maximising the weighted likelihood of ``sigmoid(a x + b)`` (scikit-learn's L-BFGS, ``x``
    standardised, a negligible L2 penalty): ``pos`` / ``neg`` weights at each distinct ``x``. Constant ``x``
    gives ``a = 0`` and ``b`` = the base rate's logit."""
    from sklearn.linear_model import LogisticRegression

    total = pos + neg
    centre = float(np.average(x, weights=total))
    spread = float(np.sqrt(np.average((x - centre) ** 2, weights=total)))
    if spread < 1e-12:
        return 0.0, float(logit(pos.sum() / total.sum()))
    xs = np.concatenate([x, x])[:, None]
    z = (xs - centre) / spread
    y = np.concatenate([np.ones(len(x)), np.zeros(len(x))])
    w = np.concatenate([pos, neg])
    keep = w > 0
    w = w[keep] / w[keep].mean()  # the penalty stays negligible whatever the number of pairs
    model = LogisticRegression(C=1e6, max_iter=1000).fit(z[keep], y[keep], sample_weight=w)
    a = float(model.coef_[0, 0]) / spread
    return a, float(model.intercept_[0]) - a * centre
