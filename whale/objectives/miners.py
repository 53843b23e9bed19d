"""In-batch triplet miners: which ``(anchor, positive, negative)`` triplets of a batch a triplet loss reads.

Not the dataset-level pair miner of the paper's head (Algorithm 1, :mod:`whale.mining`): these choose, inside one
P x K batch, the triplets of ``objective: triplet`` (config key ``miner``) from the labels and the batch's
distances. Every miner has one signature, ``miner(labels, dist) -> Mined(d_ap, d_an, weight)``:

* ``labels``: ``[B]`` ids (int or float; compared for equality only).
* ``dist``: ``[B, B]`` float32 distances (the triplet loss passes squared distances,
  :func:`whale.objectives.distances.pairwise_sq_distances`; seed 001's ratio triplet loss plain ones).
* ``d_ap``, ``d_an``, ``weight``: float32 tensors that broadcast together, ``[B, B]`` (one negative per ordered pair
  ``(a, p)``) or ``[B, B, B]`` (indexed ``[a, p, n]``); ``weight`` is 1 on the triplets the loss reads and 0
  elsewhere (pairs that are not positive, ``a == p``, anchors without a negative), so a loss is a plain function
  of the selected distances: ``f(d_ap, d_an) * weight``, reduced by :func:`reduce_triplets`. Gradients flow to the
  chosen distances.

The miners (:data:`MINERS`):

* ``semihard``: FaceNet's rule as TensorFlow Addons' ``triplet_semihard_loss`` writes it (seed 002's code calls it;
  Schroff et al. 2015): for every ordered positive pair ``(a, p)``, ``a != p``, the negative nearest to ``a``
  among those *strictly* farther from ``a`` than ``p``, or, when there is none, ``a``'s farthest negative.
* ``hardest``: batch-hard negatives (Hermans, Beyer, Leibe 2017, "In Defense of the Triplet Loss"): for every
  ordered positive pair ``(a, p)``, ``a``'s nearest negative. (Hermans et al.'s batch-hard also keeps only ``a``'s
  farthest positive; here every positive pair stays, as with ``semihard``, so the reductions count the same pairs.)
* ``all``: every valid triplet ``(a, p, n)``: ``p != a`` with ``a``'s label, ``n`` with another label
  (``B (K - 1) (B - K)`` of them in a P x K batch).

Written with ``keras.ops`` only, no Python control flow on tensor values: they run under TensorFlow and JAX,
eagerly or compiled. Batches are small (P x K, at most ~64 images): memory is at most ``B^3``.
"""
from __future__ import annotations

from typing import NamedTuple

from keras import ops

from whale.objectives.distances import check_rank, off_diagonal

MINERS = ("semihard", "hardest", "all")
"""The miners' names (config ``objective.miner``; :func:`get_miner`)."""
REDUCTIONS = ("mean", "sum", "nonzero")
"""How :func:`reduce_triplets` reduces a triplet loss (config ``objective.reduction``)."""


class Mined(NamedTuple):
    """A miner's answer: the anchor-positive and anchor-negative distances of its triplets and their 0/1 weight,
    float32, broadcasting together (``[B, B]`` or ``[B, B, B]``)."""

    d_ap: object
    d_an: object
    weight: object


def _same_id(labels):
    """``[B, B]`` float32: 1 where ``labels[i] == labels[j]`` (the diagonal included)."""
    y = ops.reshape(ops.convert_to_tensor(labels), (-1,))
    return ops.cast(ops.equal(ops.expand_dims(y, 1), ops.expand_dims(y, 0)), "float32")


def _masks(labels, dist):
    """``(dist, positives [a, p], negatives [a, n], has_neg [a, 1])``, float32."""
    dist = ops.cast(ops.convert_to_tensor(dist), "float32")
    same = _same_id(labels)
    neg = 1.0 - same
    return dist, same * off_diagonal(ops.shape(dist)[0]), neg, ops.max(neg, axis=1, keepdims=True)


# ------------------------------------------------------------------------------ semi-hard
def semihard_negatives(labels, sq_dist):
    """The semi-hard negative's distance for every ordered pair ``(a, p)`` (FaceNet's rule).

    Args:
        labels: ``[B]`` ids (int or float; compared for equality only).
        sq_dist: ``[B, B]`` float32 squared distances (:func:`whale.objectives.distances.pairwise_sq_distances`).

    Returns:
        ``[B, B]`` float32: entry ``(a, p)`` is the smallest ``d(a, n)`` over negatives ``n`` of ``a``
        (``labels[n] != labels[a]``) with ``d(a, n) > d(a, p)`` (strictly: a tie is not "outside");
        when no negative is that far, the largest ``d(a, n)`` over all of ``a``'s negatives; 0 when
        ``a`` has no negative at all (a batch of one id). Defined for every ``(a, p)``; the loss
        uses the positive pairs only. Gradients flow to the chosen distance.
    """
    sq_dist = ops.cast(ops.convert_to_tensor(sq_dist), "float32")
    check_rank(sq_dist, 2, "semihard_negatives(sq_dist)", "[B, B]")
    neg = 1.0 - _same_id(labels)                                     # [a, n]
    big = ops.max(sq_dist) + 1.0
    d_an = ops.expand_dims(sq_dist, 1)                               # [a, 1, n]
    d_ap = ops.expand_dims(sq_dist, 2)                               # [a, p, 1]
    outside = ops.logical_and(ops.greater(d_an, d_ap), ops.expand_dims(neg, 1) > 0.5)  # [a, p, n]
    nearest_outside = ops.min(ops.where(outside, d_an, big), axis=2)  # [a, p]
    has_outside = ops.any(outside, axis=2)
    has_neg = ops.max(neg, axis=1, keepdims=True) > 0.5              # [a, 1]
    farthest = ops.max(ops.where(neg > 0.5, sq_dist, -1.0), axis=1, keepdims=True)  # [a, 1]
    farthest = ops.where(has_neg, farthest, 0.0)
    return ops.where(has_outside, nearest_outside, ops.broadcast_to(farthest, ops.shape(sq_dist)))


def semihard(labels, dist) -> Mined:
    """One semi-hard negative per ordered positive pair (:func:`semihard_negatives`): ``[B, B]`` tensors, weight 1 on
    the positive pairs ``a != p`` of anchors that have a negative."""
    dist, positives, _, has_neg = _masks(labels, dist)
    return Mined(dist, semihard_negatives(labels, dist), positives * has_neg)


# ------------------------------------------------------------------------------ batch-hard
def hardest(labels, dist) -> Mined:
    """``a``'s nearest negative for every ordered positive pair ``(a, p)`` (batch-hard): ``[B, B]`` tensors, weight 1
    on the positive pairs ``a != p`` of anchors that have a negative."""
    dist, positives, neg, has_neg = _masks(labels, dist)
    check_rank(dist, 2, "hardest(dist)", "[B, B]")
    big = ops.max(dist) + 1.0
    nearest = ops.min(ops.where(neg > 0.5, dist, big), axis=1, keepdims=True)   # [a, 1]
    nearest = ops.where(has_neg > 0.5, nearest, 0.0)
    return Mined(dist, ops.broadcast_to(nearest, ops.shape(dist)), positives * has_neg)


# ------------------------------------------------------------------------------ all
def all_triplets(labels, dist) -> Mined:
    """Every valid triplet: ``d_ap`` ``[a, p, 1]``, ``d_an`` ``[a, 1, n]``, weight ``[a, p, n]`` 1 where ``p != a`` has
    ``a``'s label and ``n`` another."""
    dist, positives, neg, _ = _masks(labels, dist)
    check_rank(dist, 2, "all_triplets(dist)", "[B, B]")
    valid = ops.expand_dims(positives, 2) * ops.expand_dims(neg, 1)                  # [a, p, n]
    return Mined(ops.expand_dims(dist, 2), ops.expand_dims(dist, 1), valid)


_BY_NAME = {"semihard": semihard, "hardest": hardest, "all": all_triplets}


def get_miner(name: str):
    """The miner called ``name`` (:data:`MINERS`).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name not in _BY_NAME:
        raise ValueError(f"miner: expected one of {', '.join(MINERS)}, received {name!r}")
    return _BY_NAME[name]


def reduce_triplets(loss, weight, reduction: str = "mean"):
    """A triplet loss's per-triplet values to a scalar.

    Args:
        loss: float32 per-triplet losses (already 0 where ``weight`` is 0), ``[B, B]`` or ``[B, B, B]``.
        weight: the miner's 0/1 weight, broadcasting with ``loss``.
        reduction: ``"mean"`` over the selected triplets (``weight``'s sum), ``"sum"``, or ``"nonzero"``: the mean
            over the triplets whose loss is above 0 (the easy ones, already past the margin, do not dilute it).

    Returns:
        scalar float32; 0 (finite gradient) when nothing is selected (or, for ``"nonzero"``, nothing is above 0).

    Raises:
        ValueError: an unknown ``reduction``.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {', '.join(REDUCTIONS)}, received {reduction!r}")
    total = ops.sum(loss)
    if reduction == "sum":
        return total
    if reduction == "nonzero":
        count = ops.sum(ops.cast(ops.greater(loss * ops.ones_like(weight), 0.0), "float32"))
        return total / ops.maximum(count, 1.0)
    return total / ops.maximum(ops.sum(weight * ops.ones_like(loss)), 1.0)
