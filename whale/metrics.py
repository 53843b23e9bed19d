"""Ranking metrics of the competition: MAP@5 with one true label per image, top-k accuracy.

Kaggle's Humpback Whale Identification scores a submission by mean average precision at 5
with exactly one true label per image (paper, Table 1): an image scores ``1/r`` if its true
label first appears at rank ``r`` (1..5) of its prediction, else 0; the metric is the mean
over images. A label repeated in a prediction counts only at its first occurrence, so
repeating the true label never helps.

:func:`retrieval_protocol` is seed 002's evaluation of a photo-ID catalogue: top-k over distinct identities
with ``m`` matching images per query in redrawn databases (:func:`retrieval_draws`, :func:`top_k_identities`),
TPR at a false-accept rate and ROC AUC over all pairs within the test set (:func:`pair_verification`).

Predictions are given per image either as a sequence of labels (``["w1", "new_whale"]``)
or as one space-separated string (``"w1 new_whale"``), the form of the submission file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from whale.core.arrays import IdGroups

__all__ = ["precision_at_k_per_image", "map_at_k", "top_k_accuracy", "retrieval_protocol", "retrieval_draws",
           "retrieval_queries", "top_k_identities", "pair_verification"]


def as_labels(prediction, where: str, error: type[Exception] = ValueError) -> list[str]:
    """One image's prediction as a list of labels (a string is split on whitespace).

    ``where`` names the image in the message of ``error``, raised for anything that is not
    a string or a sequence of labels.
    """
    if isinstance(prediction, str):
        return prediction.split()
    if isinstance(prediction, (bytes, bytearray)):
        raise error(f"{where}: expected str labels, got bytes {prediction!r}")
    try:
        return [str(label) for label in prediction]
    except TypeError:
        raise error(
            f"{where}: expected a sequence of labels or a space-separated string, "
            f"got {type(prediction).__name__} {prediction!r}"
        ) from None


def _check_inputs(predicted, actual, k: int) -> tuple[list, list]:
    if isinstance(predicted, str) or isinstance(actual, str):
        raise ValueError("predicted and actual must be sequences with one entry per image, got a str")
    predicted = list(predicted)
    actual = list(actual)
    if len(predicted) != len(actual):
        raise ValueError(
            f"predicted has {len(predicted)} images but actual has {len(actual)}; "
            "expected one prediction per true label"
        )
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return predicted, actual


def precision_at_k_per_image(
    predicted: Sequence[Sequence[str] | str], actual: Sequence[str], k: int = 5
) -> np.ndarray:
    """Per-image score of MAP@k: ``1/r`` for the true label at rank ``r <= k``, else 0.

    Args:
        predicted: ``n`` predictions, each a label sequence or a space-separated string.
        actual: ``n`` true labels (str), one per image.
        k: number of leading labels that count.

    Returns:
        ``[n]`` float64 array of scores in ``{0, 1/k, ..., 1/2, 1}``.

    Raises:
        ValueError: lengths differ (the message gives both), ``k < 1``, or a prediction is
            not a sequence of labels.
    """
    predicted, actual = _check_inputs(predicted, actual, k)
    out = np.zeros(len(actual), dtype=np.float64)
    for i, (prediction, truth) in enumerate(zip(predicted, actual)):
        labels = as_labels(prediction, f"prediction {i}")[:k]
        truth = str(truth)
        # list.index finds the first occurrence, so later duplicates never count.
        if truth in labels:
            out[i] = 1.0 / (labels.index(truth) + 1)
    return out


def map_at_k(predicted: Sequence[Sequence[str] | str], actual: Sequence[str], k: int = 5) -> float:
    """Mean average precision at ``k`` with one true label per image (paper, Table 1).

    Args:
        predicted: ``n`` predictions, each a label sequence or a space-separated string.
        actual: ``n`` true labels (str).
        k: number of leading labels that count (5 in the competition).

    Returns:
        The mean of the per-image scores (float); 0.0 when ``n == 0``.

    Raises:
        ValueError: lengths differ (the message gives both) or ``k < 1``.
    """
    scores = precision_at_k_per_image(predicted, actual, k)
    return float(scores.mean()) if scores.size else 0.0


def top_k_accuracy(predicted: Sequence[Sequence[str] | str], actual: Sequence[str], k: int) -> float:
    """Share of images whose true label is among the first ``k`` predicted labels.

    Args:
        predicted: ``n`` predictions, each a label sequence or a space-separated string.
        actual: ``n`` true labels (str).
        k: number of leading labels that count.

    Returns:
        A float in [0, 1]; 0.0 when ``n == 0``.

    Raises:
        ValueError: lengths differ (the message gives both) or ``k < 1``.
    """
    scores = precision_at_k_per_image(predicted, actual, k)
    return float((scores > 0).mean()) if scores.size else 0.0


def retrieval_draws(test_ids: Sequence[str], m: int = 2, redraws: int = 10, seed: int = 0) -> list[np.ndarray]:
    """Seed 002's databases (section III-E.2): per draw, ``m`` random images of every test identity join the gallery.

    Args:
        test_ids: ``n`` labels of the test images. m: images of each test identity in the database.
        redraws: how many databases are drawn. seed: the draws' seed.

    Returns:
        ``redraws`` ``[n] bool`` masks, True for the test images put into the gallery. Identities with ``m``
        images or fewer are never drawn (they have no query left) and stay out of gallery and queries.
    """
    test_ids = np.asarray(test_ids).astype(str)
    names, counts = np.unique(test_ids, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(int(redraws)):
        picked = np.zeros(len(test_ids), bool)
        for name in names[counts > m]:
            picked[rng.choice(np.flatnonzero(test_ids == name), m, replace=False)] = True
        draws.append(picked)
    return draws


def retrieval_queries(test_ids: Sequence[str], picked: np.ndarray, m: int = 2) -> np.ndarray:
    """``[q] int64`` positions of one draw's queries: the test images of identities with more than ``m`` images
    that ``picked`` (:func:`retrieval_draws`) left out of the gallery."""
    test_ids = np.asarray(test_ids).astype(str)
    names, counts = np.unique(test_ids, return_counts=True)
    return np.flatnonzero(~np.asarray(picked, bool) & np.isin(test_ids, names[counts > m]))


def top_k_identities(scores: np.ndarray, gallery_ids: Sequence[str], query_ids: Sequence[str],
                     ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """Top-k accuracy over distinct identities: is a query's identity among the ``k`` best by their best score.

    A tie is broken at random, in expectation: with ``g`` identities scoring above the true one and ``t`` others
    level with it, the query counts ``clip((k - g) / (t + 1), 0, 1)`` (so a matcher that gives every photo 0 gets
    chance, not a hit).

    Args:
        scores: ``[q, g]`` query-gallery scores (higher = more alike). gallery_ids: ``g`` labels;
            query_ids: ``q`` labels, each present in ``gallery_ids``.

    Returns:
        ``{"top1": ..., "top5": ..., "top10": ...}`` (one entry per ``k`` of ``ks``), means over the queries.
    """
    scores = np.asarray(scores, np.float64)
    gallery = np.asarray(gallery_ids).astype(str)
    query = np.asarray(query_ids).astype(str)
    groups = IdGroups.of(gallery, open_label=None)
    missing = sorted(set(query) - set(groups.names))
    if missing:
        raise ValueError(f"query identities absent from the gallery: {missing[:5]}")
    best = groups.max(scores, dtype=np.float64)
    own = best[np.arange(len(query)), np.searchsorted(groups.names, query)][:, None]
    above = (best > own).sum(axis=1)
    level = (best == own).sum(axis=1) - 1
    return {f"top{k}": float(np.clip((k - above) / (level + 1), 0.0, 1.0).mean()) for k in ks}


def pair_verification(scores: np.ndarray, ids: Sequence[str], far: float = 0.01) -> dict:
    """Seed 002's validation on pairs (section III-E.1): every pair ``i < j`` of one set of images.

    Same identity = positive pair. TPR at FAR = ``far``: the threshold accepting the most positive pairs
    while accepting at most ``floor(far * n_negative)`` negative pairs (the paper's ``TA(d) / |P+|`` at
    ``FAR(d) <= far``); ROC AUC = P(positive > negative) + P(tie) / 2, exact. An asymmetric scorer (a
    query-gallery matcher) scores the pair by the mean of its two directions.

    Args:
        scores: ``[n, n]`` scores among the images (higher = more alike); the diagonal is not read.
        ids: ``n`` labels.

    Returns:
        ``{"tpr_at_far", "auc", "pairs", "positive_pairs"}``.

    Raises:
        ValueError: the shape is not ``[n, n]``, or the set has no positive or no negative pair.
    """
    ids = np.asarray(ids).astype(str)
    s = np.asarray(scores, np.float64)
    if s.shape != (len(ids), len(ids)):
        raise ValueError(f"expected scores [{len(ids)}, {len(ids)}], received {s.shape}")
    i, j = np.triu_indices(len(ids), k=1)
    pair = (s[i, j] + s[j, i]) / 2.0
    same = ids[i] == ids[j]
    pos, neg = pair[same], np.sort(pair[~same])
    if not len(pos) or not len(neg):
        raise ValueError(f"pairs need both kinds: {len(pos)} positive, {len(neg)} negative among {len(ids)} images")
    allowed = int(np.floor(far * len(neg) + 1e-9))  # false accepts the threshold may let through
    tpr = 1.0 if allowed >= len(neg) else float((pos > neg[len(neg) - 1 - allowed]).mean())
    below = np.searchsorted(neg, pos, side="left")
    ties = np.searchsorted(neg, pos, side="right") - below
    auc = float((below + 0.5 * ties).mean() / len(neg))
    return {"tpr_at_far": tpr, "auc": auc, "pairs": int(len(pair)), "positive_pairs": int(len(pos))}


def retrieval_protocol(s_train: np.ndarray, s_test: np.ndarray, train_ids: Sequence[str], test_ids: Sequence[str],
                       m: int = 2, redraws: int = 10, seed: int = 0, ks: Sequence[int] = (1, 5, 10),
                       far: float = 0.01) -> dict:
    """Seed 002's protocol (section III-E): identities disjoint between training and test.

    Top-k (:func:`top_k_identities`): for each of ``redraws`` draws (:func:`retrieval_draws`), the database is the
    training images + ``m`` random images of every test identity with more than ``m`` images, the identity's other
    images are the queries, so each query has exactly ``m`` matching images in the database (section IV-C).
    TPR at FAR = ``far`` and ROC AUC (:func:`pair_verification`): over all pairs within the test set (the paper's
    "all possible pairs for the test fold"), whatever the draw. Identities of ``test_ids`` must not occur in
    ``train_ids`` (checked).

    For scores that do not depend on the gallery (an embedding's, the head's). A matcher whose scores change with
    the gallery (LNBNN votes) runs once per draw on that draw's gallery and uses the three functions above itself
    (``benchmarks/seeds/seed002.py``).

    Args:
        s_train: ``[n_test, n_train]`` scores of the test images against the training images.
        s_test: ``[n_test, n_test]`` scores among the test images (higher = more alike).
        train_ids, test_ids: labels of those images.

    Returns:
        ``{"top1": (mean, sd), "top5": ..., "top10": ...}`` over the redraws (population sd), and
        ``"tpr_at_far"``, ``"auc"``, ``"pairs"``, ``"positive_pairs"``, ``"queries"`` (per draw), ``"identities"``.
    """
    train_ids, test_ids = np.asarray(train_ids).astype(str), np.asarray(test_ids).astype(str)
    s_train, s_test = np.asarray(s_train, np.float64), np.asarray(s_test, np.float64)
    if s_train.shape != (len(test_ids), len(train_ids)) or s_test.shape != (len(test_ids),) * 2:
        raise ValueError(f"expected scores [{len(test_ids)}, {len(train_ids)}] and [{len(test_ids)}] * 2, "
                         f"received {s_train.shape} and {s_test.shape}")
    shared = sorted(set(train_ids) & set(test_ids))
    if shared:
        raise ValueError(f"identities must be disjoint between training and test; shared: {shared[:5]}")
    runs: dict[str, list[float]] = {f"top{k}": [] for k in ks}
    queries = np.zeros(0, np.int64)
    for picked in retrieval_draws(test_ids, m, redraws, seed):
        queries = retrieval_queries(test_ids, picked, m)
        gallery = np.concatenate([train_ids, test_ids[picked]])
        scores = np.concatenate([s_train[queries], s_test[np.ix_(queries, np.flatnonzero(picked))]], axis=1)
        for key, value in top_k_identities(scores, gallery, test_ids[queries], ks).items():
            runs[key].append(value)
    out: dict = {key: (float(np.mean(v)), float(np.std(v))) for key, v in runs.items()}
    out.update(pair_verification(s_test, test_ids, far))
    names, counts = np.unique(test_ids, return_counts=True)
    out.update(queries=int(len(queries)), identities=int((counts > m).sum()))
    return out
