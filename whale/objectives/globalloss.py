"""Seed 001's losses (Kumar B G, Carneiro, Reid 2016): the global loss and its similarity form, ratio triplet, TGLoss.

Pure functions of a batch in ``keras.ops``, as :mod:`whale.objectives.losses` (whose helpers they use): they run
under TensorFlow and JAX, eagerly or compiled; labels are only compared for equality.

* **Global loss** (seed 001, Kumar B G, Carneiro, Reid 2016, eq. 6): on unit-norm embeddings,
  ``d = ||f_i - f_j||^2 / 4`` in [0, 1]; ``J = var(d+) + var(d-) + lam * max(0, mean(d+) - mean(d-) + t)``.
  The paper's variances divide by N (``sigma^2+ = sum_i (d+_i - mu+)^2 / N``): population
  variances, used here. The paper forms ``d+`` and ``d-`` from the N triplets of a mini-batch
  (one matching and one non-matching distance per triplet); ``pairs="all"`` (the default) takes
  every pair ``i < j`` of the batch instead (a P x K batch holds no triplet list), ``pairs="triplet"``
  one triplet per anchor (:func:`triplet_choice`), the paper's reading.
* **Similarity global loss** (seed 001, eq. 8, SNet-GLoss): on a pair network's similarities ``g``,
  ``J = var(g+) + var(g-) + lam * max(0, m - (mean(g+) - mean(g-)))``, population variances;
  m = 1, lam = 1 (section 5.2). The paper's similarity network ends in a linear C(1,1,1); the
  toolkit's head ends in a sigmoid, so the objective feeds this loss the head's log-odds
  (:func:`logit`), the head's linear output.
* **Ratio triplet loss** (seed 001, eq. 5): ``max(0, 1 - ||f(x) - f(x-)|| / (||f(x) - f(x+)|| + m))``,
  plain (not squared) L2 distances, m = 0.01 (section 5.2).
* **TGLoss** (seed 001, eq. 10): ``gamma * sum_j J1t(triplet j) + J1g``; gamma = 1, t = 0.4,
  lam = 0.8 (section 5.2, cross-validated on UBC). How the sum over triplets is kept at the
  paper's scale in a P x K batch: :func:`ratio_triplet_loss`.

Batch sizes are small (a P x K batch): the triplet functions build ``[B, B, B]`` tensors.
"""
from __future__ import annotations

from keras import ops

from whale.objectives.losses import _off_diagonal, _same_id, _upper, pairwise_sq_distances, safe_sqrt
from whale.objectives.miners import all_triplets, reduce_triplets

REDUCTIONS = ("anchor", "sum", "mean")
"""How :func:`ratio_triplet_loss` reduces its triplets."""
PAIRS = ("all", "triplet")
"""Which distances seed 001's global loss reads in a batch: every pair, or one triplet per anchor
(:func:`triplet_choice`)."""
LOGIT_EPS = 1e-7
""":func:`logit` clips probabilities to ``[LOGIT_EPS, 1 - LOGIT_EPS]`` (log-odds within +-16.1)."""


def _check_pairs(pairs: str, where: str) -> None:
    if pairs not in PAIRS:
        raise ValueError(f"{where}(pairs=...): expected one of {PAIRS}, received {pairs!r}")


def _masked_stats(x, mask):
    """Mean and population variance of ``x`` where ``mask`` is 1 (both 0 without any), and the count."""
    n = ops.sum(mask)
    mu = ops.sum(x * mask) / ops.maximum(n, 1.0)
    return mu, ops.sum(ops.square(x - mu) * mask) / ops.maximum(n, 1.0), n


def triplet_choice(labels):
    """One triplet per anchor of a batch, from the labels alone: seed 001's per-triplet reading in a P x K batch.

    Anchor ``a``'s positive is the first image after ``a`` (cyclically in batch order) with ``a``'s label;
    its negative is the ``r``-th image after ``a`` (cyclically, counting only other labels, from 0), ``r`` the
    number of images of ``a``'s label before ``a`` in the batch (modulo ``a``'s negatives). In a P x K batch
    of K-image chunks, slot ``r`` of a chunk takes slot ``r + 1`` of its own chunk as positive and slot ``r`` of
    the next identity's chunk as negative: each image is one anchor, one positive and one negative, and the
    triplets balance one matching and one non-matching distance each, as the paper's (which draws them at random
    from the whole training set: here they come from the batch its sampler drew).

    Args:
        labels: ``[B]`` ids.

    Returns:
        ``(positive [B, B], negative [B, B], valid [B])`` float32: one-hot rows (``positive[a, p] = 1`` for the
        chosen ``p``), and ``valid[a] = 1`` when ``a`` has a positive and a negative (rows of invalid anchors are 0).
    """
    same = _same_id(labels)
    n = ops.shape(same)[0]
    i = ops.arange(n)
    offset = ops.cast(ops.mod(ops.expand_dims(i, 0) - ops.expand_dims(i, 1) + n, n), "float32")   # [a, j]
    earlier = ops.cast(ops.less(ops.expand_dims(offset, 1), ops.expand_dims(offset, 2)), "float32")  # [a, j, m]

    def rank(mask):  # [a, j]: how many of a's candidates ``mask`` come before j after a
        return ops.sum(earlier * ops.expand_dims(mask, 1), axis=2)

    pos = same * _off_diagonal(n)
    neg = 1.0 - same
    n_neg = ops.sum(neg, axis=1)
    valid = ops.cast(ops.logical_and(ops.sum(pos, axis=1) > 0.5, n_neg > 0.5), "float32")
    before = ops.cast(ops.less(ops.expand_dims(i, 0), ops.expand_dims(i, 1)), "float32")          # [a, j]: j < a
    slot = ops.mod(ops.sum(same * before, axis=1), ops.maximum(n_neg, 1.0))                      # [a]
    first_pos = pos * ops.cast(ops.equal(rank(pos), 0.0), "float32")
    chosen_neg = neg * ops.cast(ops.equal(rank(neg), ops.expand_dims(slot, 1)), "float32")
    keep = ops.expand_dims(valid, 1)
    return first_pos * keep, chosen_neg * keep, valid


def global_loss(labels, emb, t: float = 0.4, lam: float = 0.8, *, pairs: str = "all"):
    """Seed 001's global loss for embeddings (eq. 6).

    Args:
        labels: ``[B]`` ids.
        emb: ``[B, D]`` float, unit-norm rows (the objective's branch ends with an L2
            normalisation; nothing is normalised here, so ``d`` is in [0, 1] only for unit rows).
        t: margin between the mean distances; lam: weight of the hinge term.
        pairs: ``"all"``: ``d+`` and ``d-`` are every matching and non-matching pair ``i < j`` of the batch;
            ``"triplet"``: one matching and one non-matching distance per anchor (:func:`triplet_choice`),
            eq. 6's reading (N triplets, N distances each).

    Returns:
        scalar float32 ``var(d+) + var(d-) + lam * max(0, mean(d+) - mean(d-) + t)`` with
        ``d = ||f_i - f_j||^2 / 4``, ``d+`` the matching pairs, ``d-`` the others, population
        variances (the paper divides by N). A batch without matching (or without non-matching)
        pairs: that set's variance is 0 and the hinge term, which needs both means, is 0
        (``"triplet"``: a batch without a valid triplet gives 0).
    """
    _check_pairs(pairs, "global_loss")
    d = pairwise_sq_distances(emb) / 4.0
    if pairs == "triplet":
        chosen_pos, chosen_neg, valid = triplet_choice(labels)
        mu_p, var_p, n_pos = _masked_stats(ops.sum(d * chosen_pos, axis=1), valid)
        mu_n, var_n, n_neg = _masked_stats(ops.sum(d * chosen_neg, axis=1), valid)
    else:
        upper = _upper(ops.shape(d)[0])
        same = _same_id(labels)
        mu_p, var_p, n_pos = _masked_stats(d, upper * same)
        mu_n, var_n, n_neg = _masked_stats(d, upper * (1.0 - same))
    both = ops.cast(ops.logical_and(n_pos > 0.5, n_neg > 0.5), "float32")
    return var_p + var_n + lam * ops.relu(mu_p - mu_n + t) * both


def similarity_global_loss(same, sim, m: float = 1.0, lam: float = 1.0):
    """Seed 001's global loss for a pairwise similarity network (eq. 8, SNet-GLoss) over a batch of pairs.

    Args:
        same: ``[b]`` (or ``[b, 1]``) 1 for a matching pair, 0 otherwise (float, int or bool).
        sim: ``[b]`` (or ``[b, 1]``) float similarity ``g`` of each pair (higher = more alike; any real value).
        m: margin between the mean similarities; lam: weight of the hinge term.

    Returns:
        scalar float32 ``var(g+) + var(g-) + lam * max(0, m - (mean(g+) - mean(g-)))``, population variances
        (the paper's ``/ N``). A batch without matching (or non-matching) pairs: that set's variance is 0 and
        the hinge term, which needs both means, is 0.
    """
    same = ops.cast(ops.reshape(ops.convert_to_tensor(same), (-1,)), "float32")
    sim = ops.cast(ops.reshape(ops.convert_to_tensor(sim), (-1,)), "float32")
    mu_p, var_p, n_pos = _masked_stats(sim, same)
    mu_n, var_n, n_neg = _masked_stats(sim, 1.0 - same)
    both = ops.cast(ops.logical_and(n_pos > 0.5, n_neg > 0.5), "float32")
    return var_p + var_n + lam * ops.relu(m - (mu_p - mu_n)) * both


def logit(p, eps: float = LOGIT_EPS):
    """The log-odds ``log(p) - log(1 - p)`` of probabilities ``p`` (any shape), clipped to ``[eps, 1 - eps]``: float32.

    The inverse of the sigmoid that ends the paper's head: its value is the head's linear output, its gradient
    through ``sigmoid`` is 1 wherever ``p`` is not clipped.
    """
    p = ops.clip(ops.cast(ops.convert_to_tensor(p), "float32"), eps, 1.0 - eps)
    return ops.log(p) - ops.log(1.0 - p)


def ratio_triplet_loss(labels, emb, m: float = 0.01, *, reduction: str = "anchor"):
    """Seed 001's triplet loss (eq. 5) over every valid triplet of the batch (the ``all`` miner,
    :func:`whale.objectives.miners.all_triplets`, on plain distances).

    A triplet is ``(a, p, n)``: ``p != a`` with ``a``'s label, ``n`` with another label; its loss
    ``max(0, 1 - D(a, n) / (D(a, p) + m))`` with plain Euclidean distances ``D``.

    The paper sums eq. 5 over the mini-batch's sampled triplets (eq. 10: ``gamma * sum_j``), one
    triplet per anchor, 250 per mini-batch. A P x K batch holds every valid triplet instead,
    ``B (K - 1) (B - K)`` of them, and their plain sum would outweigh the global loss by that
    factor. The default ``"anchor"`` keeps the paper's scale: each anchor contributes the mean
    over its ``(p, n)`` (the expected loss of one triplet drawn for that anchor), summed over the
    anchors, i.e. a sum of one triplet's worth per anchor, as in the paper.

    Args:
        labels: ``[B]`` ids.
        emb: ``[B, D]`` float embeddings (unit norm in the paper).
        m: the margin of eq. 5 (0.01 in section 5.2).
        reduction: ``"anchor"`` (above), ``"sum"`` (every triplet, the literal sum), ``"mean"``.

    Returns:
        scalar float32; 0 (finite gradient) when the batch holds no valid triplet.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"ratio_triplet_loss(reduction=...): expected one of {REDUCTIONS}, received {reduction!r}")
    dist = safe_sqrt(pairwise_sq_distances(emb))
    d_ap, d_an, valid = all_triplets(labels, dist)                                     # [a, p, n] after broadcast
    ratio = d_an / (d_ap + m)                                                          # D(a,n) / (D(a,p) + m)
    loss = ops.relu(1.0 - ratio) * valid
    if reduction in ("sum", "mean"):
        return reduce_triplets(loss, valid, reduction)
    per_anchor = ops.sum(loss, axis=(1, 2)) / ops.maximum(ops.sum(valid, axis=(1, 2)), 1.0)
    return ops.sum(per_anchor)


def chosen_ratio_triplet_loss(labels, emb, m: float = 0.01):
    """Eq. 5 summed over one triplet per anchor (:func:`triplet_choice`): eq. 10's ``sum_j J1t`` over the
    batch's triplets. ``labels`` ``[B]``, ``emb`` ``[B, D]`` -> scalar float32 (0 without a valid triplet)."""
    dist = safe_sqrt(pairwise_sq_distances(emb))
    chosen_pos, chosen_neg, valid = triplet_choice(labels)
    d_ap, d_an = ops.sum(dist * chosen_pos, axis=1), ops.sum(dist * chosen_neg, axis=1)
    return ops.sum(ops.relu(1.0 - d_an / (d_ap + m)) * valid)


def tg_loss(labels, emb, gamma: float = 1.0, t: float = 0.4, lam: float = 0.8, m: float = 0.01,
            *, reduction: str = "anchor", pairs: str = "all"):
    """TGLoss (seed 001, eq. 10): ``gamma * ratio_triplet_loss + global_loss``.

    Args:
        labels: ``[B]`` ids; emb: ``[B, D]`` float, unit-norm rows.
        gamma, t, lam, m: section 5.2's 1, 0.4, 0.8, 0.01.
        reduction: of the triplet term over every valid triplet (:func:`ratio_triplet_loss`), with ``pairs="all"``.
        pairs: ``"all"``: the triplet term over every triplet (``reduction``), the global term over every pair;
            ``"triplet"``: both terms on the same one triplet per anchor (:func:`triplet_choice`), as eq. 10
            reads (:func:`chosen_ratio_triplet_loss`; ``reduction`` is not used).

    Returns:
        scalar float32.
    """
    _check_pairs(pairs, "tg_loss")
    if pairs == "triplet":
        triplets = chosen_ratio_triplet_loss(labels, emb, m)
    else:
        triplets = ratio_triplet_loss(labels, emb, m, reduction=reduction)
    return gamma * triplets + global_loss(labels, emb, t, lam, pairs=pairs)
