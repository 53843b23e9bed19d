"""Ranking metrics of the competition: MAP@5 with one true label per image, top-k accuracy.

Kaggle's Humpback Whale Identification scores a submission by mean average precision at 5
with exactly one true label per image (paper, Table 1): an image scores ``1/r`` if its true
label first appears at rank ``r`` (1..5) of its prediction, else 0; the metric is the mean
over images. A label repeated in a prediction counts only at its first occurrence, so
repeating the true label never helps.

:func:`retrieval_protocol` is seed 002's evaluation of a photo-ID catalogue (top-k over distinct
identities, TPR at a false-accept rate, ROC AUC, redrawn galleries).

Predictions are given per image either as a sequence of labels (``["w1", "new_whale"]``)
or as one space-separated string (``"w1 new_whale"``), the form of the submission file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["precision_at_k_per_image", "map_at_k", "top_k_accuracy", "retrieval_protocol"]


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


def retrieval_protocol(s_train: np.ndarray, s_test: np.ndarray, train_ids: Sequence[str], test_ids: Sequence[str],
                       m: int = 2, redraws: int = 10, seed: int = 0, ks: Sequence[int] = (1, 5, 10),
                       far: float = 0.01) -> dict:
    """Seed 002's protocol: identities disjoint, gallery = training images + ``m`` images of each test id.

    For each of ``redraws`` draws, ``m`` random images of every test identity (those with more than
    ``m`` images) join the training images as the gallery; the test identity's other images are the
    queries. A query is ranked against the gallery's distinct identities by their best score; top-k
    is whether its identity is among the first ``k``. TPR at FAR = ``far`` and ROC AUC are over every
    query-gallery pair (same identity = positive). Identities of ``test_ids`` must not occur in
    ``train_ids`` (checked).

    Args:
        s_train: ``[n_test, n_train]`` scores of the test images against the training images.
        s_test: ``[n_test, n_test]`` scores among the test images (higher = more alike).
        train_ids, test_ids: labels of those images.

    Returns:
        ``{"top1": (mean, sd), "top5": ..., "top10": ..., "tpr_at_far": ..., "auc": ..., "queries": n,
        "identities": n}`` with ``(mean, sd)`` over the redraws.
    """
    train_ids, test_ids = np.asarray(train_ids).astype(str), np.asarray(test_ids).astype(str)
    s_train, s_test = np.asarray(s_train, np.float64), np.asarray(s_test, np.float64)
    if s_train.shape != (len(test_ids), len(train_ids)) or s_test.shape != (len(test_ids),) * 2:
        raise ValueError(f"expected scores [{len(test_ids)}, {len(train_ids)}] and [{len(test_ids)}] * 2, "
                         f"received {s_train.shape} and {s_test.shape}")
    shared = sorted(set(train_ids) & set(test_ids))
    if shared:
        raise ValueError(f"identities must be disjoint between training and test; shared: {shared[:5]}")
    names, counts = np.unique(test_ids, return_counts=True)
    eligible = set(names[counts > m])
    rng = np.random.default_rng(seed)
    runs: dict[str, list[float]] = {f"top{k}": [] for k in ks}
    runs.update(tpr_at_far=[], auc=[])
    for _ in range(int(redraws)):
        picked = np.zeros(len(test_ids), bool)
        for name in sorted(eligible):
            picked[rng.choice(np.flatnonzero(test_ids == name), m, replace=False)] = True
        queries = np.flatnonzero(~picked & np.isin(test_ids, list(eligible)))
        scores = np.concatenate([s_train[queries], s_test[np.ix_(queries, np.flatnonzero(picked))]], axis=1)
        gallery = np.concatenate([train_ids, test_ids[picked]])
        uniq, code = np.unique(gallery, return_inverse=True)
        order = np.argsort(code, kind="stable")
        best = np.maximum.reduceat(scores[:, order], np.searchsorted(code[order], np.arange(len(uniq))), axis=1)
        truth = np.searchsorted(uniq, test_ids[queries])
        rank = (best > best[np.arange(len(queries)), truth][:, None]).sum(axis=1)  # 0 = first
        for k in ks:
            runs[f"top{k}"].append(float((rank < k).mean()))
        same = gallery[None, :] == test_ids[queries][:, None]
        pos, neg = scores[same], np.sort(scores[~same])
        cut = neg[min(len(neg) - 1, int(np.ceil((1.0 - far) * len(neg))))]
        runs["tpr_at_far"].append(float((pos > cut).mean()))
        # AUC = P(positive > negative) + 0.5 P(tie), by ranks
        below = np.searchsorted(neg, pos, side="left")
        ties = np.searchsorted(neg, pos, side="right") - below
        runs["auc"].append(float((below + 0.5 * ties).mean() / len(neg)))
    out = {key: (float(np.mean(v)), float(np.std(v))) for key, v in runs.items()}
    out.update(queries=int((~picked & np.isin(test_ids, list(eligible))).sum()), identities=len(eligible))
    return out
