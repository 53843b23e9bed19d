"""The objectives' loss mathematics: pure functions of a batch, written with ``keras.ops`` only.

Every function here takes tensors (or arrays) and returns tensors, float32, with no Python
control flow on tensor values and no NumPy on tensors, so each one runs under TensorFlow and
JAX, eagerly or inside a compiled train step (``dynamic_margins`` alone is NumPy: it runs once,
before training, on the images-per-id counts). Labels may arrive as int or float tensors of
shape ``[B]`` or ``[B, 1]`` (Keras hands ``y_true`` to a loss as float32); they are only compared
for equality, except in the ArcFace functions, which cast them to int32 indices.

Sources (the seeds are in ``../shared/seeds/``; ``docs/`` of the shared folder summarises them):

* **Contrastive loss** (DrLIM; Hadsell, Chopra, LeCun 2006, eq. 4): per pair
  ``same * d^2 + (1 - same) * max(0, margin - d)^2``. DrLIM's factors 1/2 are left out (a
  constant scale). ``d`` is the Euclidean distance, taken with :func:`safe_sqrt`.
* **Triplet loss with semi-hard online mining** (seed 002, Moskvyak et al., section III-C/D, eq. 1;
  FaceNet, Schroff et al. 2015; the rule of ``tf.contrib`` / TensorFlow Addons'
  ``triplet_semihard_loss`` that seed 002's code calls): squared distances; for every ordered
  positive pair ``(a, p)``, ``a != p``, the negative ``n`` nearest to ``a`` among those *strictly*
  farther from ``a`` than ``p`` (``d(a, n) > d(a, p)``), or, when there is none, the farthest
  negative; ``mean over positive pairs of max(0, d(a, p) - d(a, n) + margin)``.
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
* **Sub-center ArcFace with dynamic margins** (Deng et al. 2019 "ArcFace", eq. 3; Deng et al.
  2020 "Sub-center ArcFace"; per-class margins ``m = a * n^p + c`` from Ha et al. 2020, the
  Google Landmark Recognition 2020 3rd place, arXiv:2010.05350, as used by the Happywhale 2022
  winners): ``cos_j = max_k cos(f, W_jk)``; the true class's logit is ``cos(theta_y + m_y)``
  (with ArcFace's usual fallback past ``theta + m > pi``), the others ``cos_j``; all times ``scale``.

Batch sizes are small (a P x K batch): the triplet functions build ``[B, B, B]`` tensors.
"""
from __future__ import annotations

import numpy as np
from keras import ops

SQRT_EPS = 1e-12
"""Below this squared distance :func:`safe_sqrt` returns exactly 0 (and a zero gradient)."""
COS_EPS = 1e-7
"""ArcFace clips the true class's cosine to ``[-1 + COS_EPS, 1 - COS_EPS]`` before ``sqrt(1 - cos^2)``."""
HAPPYWHALE_2022_MARGINS = {"a": 0.27126, "p": -0.364399, "c": 0.05}
"""``dynamic_margins`` arguments of the Happywhale 2022 1st-place solution (knshnb/kaggle-happywhale-1st-place,
``config/default.yaml``: ``margin_coef_id``, ``margin_power_id``, ``margin_cons_id``; tuned there with
Optuna, together with ``s_id`` = 20.96 and 2 sub-centres). The defaults of :func:`dynamic_margins`
(a = 0.5, p = -0.25, c = 0.05) are Ha et al.'s (arXiv:2010.05350), where the rule comes from."""

REDUCTIONS = ("anchor", "sum", "mean")
"""How :func:`ratio_triplet_loss` reduces its triplets."""
PAIRS = ("all", "triplet")
"""Which distances seed 001's global loss reads in a batch: every pair, or one triplet per anchor
(:func:`triplet_choice`)."""
LOGIT_EPS = 1e-7
""":func:`logit` clips probabilities to ``[LOGIT_EPS, 1 - LOGIT_EPS]`` (log-odds within +-16.1)."""


# ------------------------------------------------------------------------------ helpers
def _flat_labels(labels):
    return ops.reshape(ops.convert_to_tensor(labels), (-1,))


def _check_rank(x, rank: int, name: str, shape: str) -> None:
    """Static rank check (no tensor values are read)."""
    n = len(x.shape)
    if n != rank:
        raise ValueError(f"{name}: expected a {rank}-D tensor {shape}, received shape {tuple(x.shape)}")


def _same_id(labels):
    """``[B, B]`` float32: 1 where ``labels[i] == labels[j]`` (the diagonal included)."""
    y = _flat_labels(labels)
    return ops.cast(ops.equal(ops.expand_dims(y, 1), ops.expand_dims(y, 0)), "float32")


def _off_diagonal(n):
    """``[n, n]`` float32: 1 off the diagonal, 0 on it (``n`` may be a traced batch size)."""
    i = ops.arange(n)
    return ops.cast(ops.not_equal(ops.expand_dims(i, 1), ops.expand_dims(i, 0)), "float32")


def _upper(n):
    """``[n, n]`` float32: 1 where ``i < j``."""
    i = ops.arange(n)
    return ops.cast(ops.less(ops.expand_dims(i, 1), ops.expand_dims(i, 0)), "float32")


def safe_sqrt(x, eps: float = SQRT_EPS):
    """``sqrt(x)`` with a finite gradient at 0: exactly 0 (and gradient 0) where ``x <= eps``.

    ``sqrt``'s derivative is infinite at 0, and ``0 * inf`` is NaN in a backward pass even where
    the distance does not matter; the inner ``maximum`` keeps both branches of the ``where`` finite.
    Any shape, float32.
    """
    x = ops.cast(x, "float32")
    return ops.where(x > eps, ops.sqrt(ops.maximum(x, eps)), ops.zeros_like(x))


def l2_normalize(x, axis: int = -1, eps: float = SQRT_EPS):
    """``x / ||x||`` along ``axis`` (a zero vector stays zero, gradient finite). Any shape, float32."""
    x = ops.cast(x, "float32")
    return x / ops.sqrt(ops.maximum(ops.sum(x * x, axis=axis, keepdims=True), eps))


# ------------------------------------------------------------------------------ distances
def pairwise_sq_distances(emb):
    """Squared Euclidean distances between the rows of ``emb``.

    Args:
        emb: ``[B, D]`` float embeddings.

    Returns:
        ``[B, B]`` float32, ``||e_i - e_j||^2`` from ``|e_i|^2 + |e_j|^2 - 2 e_i.e_j``, clipped at 0
        (rounding can make it slightly negative) and exactly 0 on the diagonal. Its gradient is
        finite everywhere, identical embeddings included.
    """
    emb = ops.cast(ops.convert_to_tensor(emb), "float32")
    _check_rank(emb, 2, "pairwise_sq_distances(emb)", "[B, D]")
    sq = ops.sum(emb * emb, axis=1)
    d = ops.expand_dims(sq, 1) - 2.0 * ops.matmul(emb, ops.transpose(emb)) + ops.expand_dims(sq, 0)
    return ops.maximum(d, 0.0) * _off_diagonal(ops.shape(emb)[0])


# ------------------------------------------------------------------------------ contrastive
def contrastive_loss(same, sq_dist, margin: float = 1.0):
    """DrLIM's contrastive loss per pair.

    Args:
        same: ``[B]`` float (or bool/int) 1 for a matching pair, 0 otherwise.
        sq_dist: ``[B]`` float squared Euclidean distance of each pair.
        margin: the distance beyond which a non-matching pair costs nothing.

    Returns:
        ``[B]`` float32: ``same * d^2 + (1 - same) * max(0, margin - d)^2`` with
        ``d = safe_sqrt(sq_dist)`` (finite gradient at ``d = 0``).
    """
    same = ops.cast(ops.reshape(ops.convert_to_tensor(same), (-1,)), "float32")
    sq_dist = ops.cast(ops.reshape(ops.convert_to_tensor(sq_dist), (-1,)), "float32")
    d = safe_sqrt(sq_dist)
    return same * sq_dist + (1.0 - same) * ops.square(ops.relu(margin - d))


# ------------------------------------------------------------------------------ semi-hard triplets
def semihard_negatives(labels, sq_dist):
    """The semi-hard negative's distance for every ordered pair ``(a, p)`` (FaceNet's rule).

    Args:
        labels: ``[B]`` ids (int or float; compared for equality only).
        sq_dist: ``[B, B]`` float32 squared distances (:func:`pairwise_sq_distances`).

    Returns:
        ``[B, B]`` float32: entry ``(a, p)`` is the smallest ``d(a, n)`` over negatives ``n`` of ``a``
        (``labels[n] != labels[a]``) with ``d(a, n) > d(a, p)`` (strictly: a tie is not "outside");
        when no negative is that far, the largest ``d(a, n)`` over all of ``a``'s negatives; 0 when
        ``a`` has no negative at all (a batch of one id). Defined for every ``(a, p)``; the loss
        uses the positive pairs only. Gradients flow to the chosen distance.
    """
    sq_dist = ops.cast(ops.convert_to_tensor(sq_dist), "float32")
    _check_rank(sq_dist, 2, "semihard_negatives(sq_dist)", "[B, B]")
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


def semihard_triplet_loss(labels, emb, margin: float = 0.5):
    """Triplet loss with semi-hard online mining (seed 002, FaceNet, TensorFlow Addons' rule).

    Args:
        labels: ``[B]`` ids.
        emb: ``[B, D]`` float embeddings (not normalised here: seed 002's are not).
        margin: on squared distances (0.5 in seed 002's code).

    Returns:
        scalar float32: the mean over ordered positive pairs ``(a, p)``, ``a != p``, of
        ``max(0, d(a, p) - d(a, n*) + margin)``, ``n*`` from :func:`semihard_negatives`.
        0 (finite gradient) when the batch holds no positive pair; an anchor without negatives
        (only in a batch of one id) contributes 0.
    """
    sq = pairwise_sq_distances(emb)
    same = _same_id(labels)
    has_neg = ops.max(1.0 - same, axis=1, keepdims=True)             # [a, 1]
    positives = same * _off_diagonal(ops.shape(sq)[0])
    loss = ops.relu(sq - semihard_negatives(labels, sq) + margin) * positives * has_neg
    return ops.sum(loss) / ops.maximum(ops.sum(positives), 1.0)


# ------------------------------------------------------------------------------ seed 001
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
    """Seed 001's triplet loss (eq. 5) over every valid triplet of the batch.

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
    same = _same_id(labels)
    positives = same * _off_diagonal(ops.shape(dist)[0])                               # [a, p]
    valid = ops.expand_dims(positives, 2) * ops.expand_dims(1.0 - same, 1)             # [a, p, n]
    ratio = ops.expand_dims(dist, 1) / (ops.expand_dims(dist, 2) + m)                  # D(a,n) / (D(a,p) + m)
    loss = ops.relu(1.0 - ratio) * valid
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "mean":
        return ops.sum(loss) / ops.maximum(ops.sum(valid), 1.0)
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


# ------------------------------------------------------------------------------ ArcFace
def dynamic_margins(counts, a: float = 0.5, p: float = -0.25, c: float = 0.05) -> np.ndarray:
    """Per-id additive angular margins ``m = a * n^p + c``: rare ids get larger margins.

    NumPy (computed once from the training set). Defaults: Ha et al. 2020 (arXiv:2010.05350);
    the Happywhale 2022 winners' tuned values are :data:`HAPPYWHALE_2022_MARGINS`.

    Args:
        counts: ``[n_ids]`` images per id, each >= 1.

    Returns:
        ``[n_ids]`` float32 margins in radians.

    Raises:
        ValueError: ``counts`` is not 1-D or holds a count below 1.
    """
    n = np.asarray(counts, dtype=np.float64)
    if n.ndim != 1:
        raise ValueError(f"dynamic_margins(counts): expected a 1-D array of images per id, received shape {n.shape}")
    if n.size and not np.all(n >= 1):
        bad = int(np.flatnonzero(~(n >= 1))[0])
        raise ValueError(f"dynamic_margins(counts): expected every count >= 1, received {counts[bad]!r} at index {bad}")
    return (a * np.power(n, p) + c).astype(np.float32)


def subcenter_arcface_logits(emb, centers, labels, margins, scale: float = 30.0):
    """Sub-center ArcFace logits with a per-id additive angular margin on the true class.

    Args:
        emb: ``[B, D]`` float embeddings (L2-normalised here).
        centers: ``[n_ids, k, D]`` float sub-centres (L2-normalised here).
        labels: ``[B]`` int ids in ``[0, n_ids)`` (floats are cast).
        margins: ``[n_ids]`` float margins in radians (:func:`dynamic_margins`, or a constant).
        scale: ArcFace's ``s``.

    Returns:
        ``[B, n_ids]`` float32 ``scale * cos_j``, ``cos_j = max_k cos(emb, centers[j, k])``, except at
        the true class ``y``: ``scale * cos(theta_y + m_y)``, from ``cos theta cos m - sin theta sin m``
        with ``cos theta`` clipped to ``[-1 + COS_EPS, 1 - COS_EPS]`` (``sin theta`` and its gradient
        stay finite). Where ``theta_y + m_y`` would pass pi (``cos theta <= cos(pi - m)``) the logit
        is ``cos theta - m sin m`` instead (ArcFace's / insightface's non-"easy margin" rule, as in
        the Happywhale 2022 winners' code), so it keeps decreasing with theta.
    """
    emb = l2_normalize(ops.convert_to_tensor(emb))
    centers = l2_normalize(ops.convert_to_tensor(centers))
    _check_rank(emb, 2, "subcenter_arcface_logits(emb)", "[B, D]")
    _check_rank(centers, 3, "subcenter_arcface_logits(centers)", "[n_ids, k, D]")
    n_ids, k, dim = centers.shape
    flat = ops.reshape(centers, (-1, dim))                                   # [n_ids * k, D]
    cos = ops.max(ops.reshape(ops.matmul(emb, ops.transpose(flat)), (-1, n_ids, k)), axis=2)  # [B, n_ids]
    return arcface_margin_logits(cos, labels, margins, scale)


def arcface_margin_logits(cos, labels, margins, scale: float = 30.0):
    """The margin and scale of :func:`subcenter_arcface_logits` on given cosines.

    Args:
        cos: ``[B, n_ids]`` float cosines to each id (its nearest sub-centre; the ``arcface`` layer's output).
        labels: ``[B]`` int ids; margins: ``[n_ids]`` float radians; scale: ``s``.

    Returns:
        ``[B, n_ids]`` float32 logits (the rule is :func:`subcenter_arcface_logits`'s).
    """
    cos = ops.cast(cos, "float32")
    n_ids = ops.shape(cos)[1]
    y = ops.cast(_flat_labels(labels), "int32")
    m = ops.take(ops.cast(ops.convert_to_tensor(margins), "float32"), y)     # [B]
    m = ops.expand_dims(m, 1)
    cos_y = ops.clip(ops.take_along_axis(cos, ops.expand_dims(y, 1), axis=1), -1.0 + COS_EPS, 1.0 - COS_EPS)
    sin_y = ops.sqrt(1.0 - ops.square(cos_y))
    phi = cos_y * ops.cos(m) - sin_y * ops.sin(m)
    phi = ops.where(cos_y > ops.cos(np.pi - m), phi, cos_y - m * ops.sin(m))
    onehot = ops.one_hot(y, n_ids, dtype="float32")
    return scale * (onehot * phi + (1.0 - onehot) * cos)


def arcface_loss(labels, logits):
    """Mean softmax cross-entropy.

    Args:
        labels: ``[B]`` int ids (floats are cast); logits: ``[B, n_ids]`` float.

    Returns:
        scalar float32 ``mean_b (logsumexp(logits_b) - logits_b[labels_b])``.
    """
    logits = ops.cast(ops.convert_to_tensor(logits), "float32")
    y = ops.expand_dims(ops.cast(_flat_labels(labels), "int32"), 1)
    true = ops.squeeze(ops.take_along_axis(logits, y, axis=1), 1)
    return ops.mean(ops.logsumexp(logits, axis=1) - true)
