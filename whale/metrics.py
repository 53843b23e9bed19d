"""Ranking metrics of the competition: MAP@5 with one true label per image, top-k accuracy.

Kaggle's Humpback Whale Identification scores a submission by mean average precision at 5
with exactly one true label per image (paper, Table 1): an image scores ``1/r`` if its true
label first appears at rank ``r`` (1..5) of its prediction, else 0; the metric is the mean
over images. A label repeated in a prediction counts only at its first occurrence, so
repeating the true label never helps.

Predictions are given per image either as a sequence of labels (``["w1", "new_whale"]``)
or as one space-separated string (``"w1 new_whale"``), the form of the submission file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["precision_at_k_per_image", "map_at_k", "top_k_accuracy"]


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
