"""The objectives' loss mathematics: pure functions of a batch, written with ``keras.ops`` only.

Every function here takes tensors (or arrays) and returns tensors, float32, with no Python
control flow on tensor values and no NumPy on tensors, so each one runs under TensorFlow and
JAX, eagerly or inside a compiled train step (``dynamic_margins`` alone is NumPy: it runs once,
before training, on the images-per-id counts). Labels may arrive as int or float tensors of
shape ``[B]`` or ``[B, 1]`` (Keras hands ``y_true`` to a loss as float32); they are only compared
for equality, except in the ArcFace functions, which cast them to int32 indices.

Sources (the seeds are in ``../shared/seeds/``; ``docs/`` of the shared folder summarises them):

* **Contrastive loss** (DrLIM; Hadsell, Chopra, LeCun 2006, eq. 4): per pair
  ``same * d^2 + (1 - same) * max(0, margin - d)^2``. ``objective: contrastive`` leaves DrLIM's factors 1/2
  out (a constant scale); seed 004's ``drlim`` baseline keeps them (``half=True``). ``d`` is the Euclidean
  distance, taken with :func:`safe_sqrt`. The distances themselves are :mod:`whale.objectives.distances`.
* **Triplet loss with semi-hard online mining** (seed 002, Moskvyak et al., section III-C/D, eq. 1;
  FaceNet, Schroff et al. 2015; the rule of ``tf.contrib`` / TensorFlow Addons'
  ``triplet_semihard_loss`` that seed 002's code calls): squared distances; for every ordered
  positive pair ``(a, p)``, ``a != p``, the negative ``n`` nearest to ``a`` among those *strictly*
  farther from ``a`` than ``p`` (``d(a, n) > d(a, p)``), or, when there is none, the farthest
  negative; ``mean over positive pairs of max(0, d(a, p) - d(a, n) + margin)``. The choice of triplets is
  an in-batch miner of :mod:`whale.objectives.miners` (``semihard``, ``hardest``, ``all``), the reduction
  ``mean``, ``sum`` or ``nonzero`` (:func:`triplet_loss`); seed 002's is ``semihard`` and ``mean``.
* **Seed 001's losses** (the global loss of eq. 6 in both readings, eq. 8's similarity global loss, the
  ratio triplet loss and TGLoss): :mod:`whale.objectives.globalloss`, on the helpers here.
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

from whale.objectives.distances import SQRT_EPS, l2_normalize, pairwise_sq_distances, safe_sqrt  # noqa: F401
from whale.objectives.distances import check_rank as _check_rank
from whale.objectives.distances import off_diagonal as _off_diagonal  # noqa: F401 (globalloss)
from whale.objectives.miners import _same_id, get_miner, reduce_triplets, semihard_negatives  # noqa: F401

COS_EPS = 1e-7
"""ArcFace clips the true class's cosine to ``[-1 + COS_EPS, 1 - COS_EPS]`` before ``sqrt(1 - cos^2)``."""
HAPPYWHALE_2022_MARGINS = {"a": 0.27126, "p": -0.364399, "c": 0.05}
"""``dynamic_margins`` arguments of the Happywhale 2022 1st-place solution (knshnb/kaggle-happywhale-1st-place,
``config/default.yaml``: ``margin_coef_id``, ``margin_power_id``, ``margin_cons_id``; tuned there with
Optuna, together with ``s_id`` = 20.96 and 2 sub-centres). The defaults of :func:`dynamic_margins`
(a = 0.5, p = -0.25, c = 0.05) are Ha et al.'s (arXiv:2010.05350), where the rule comes from."""



# ------------------------------------------------------------------------------ helpers
def _flat_labels(labels):
    return ops.reshape(ops.convert_to_tensor(labels), (-1,))


def _upper(n):
    """``[n, n]`` float32: 1 where ``i < j``."""
    i = ops.arange(n)
    return ops.cast(ops.less(ops.expand_dims(i, 1), ops.expand_dims(i, 0)), "float32")


# ------------------------------------------------------------------------------ contrastive
def contrastive_loss(same, sq_dist, margin: float = 1.0, *, half: bool = False, eps: float = SQRT_EPS):
    """DrLIM's contrastive loss per pair.

    Args:
        same: ``[B]`` float (or bool/int) 1 for a matching pair, 0 otherwise.
        sq_dist: ``[B]`` float squared Euclidean distance of each pair.
        margin: the distance beyond which a non-matching pair costs nothing.
        half: multiply by DrLIM's 1/2 (seed 004's ``drlim`` baseline, :func:`whale.objectives.similarity.drlim_loss`);
            ``objective: contrastive`` leaves it out (a constant scale), as it always has.
        eps: :func:`safe_sqrt`'s threshold (the baseline's is 0).

    Returns:
        ``[B]`` float32: ``same * d^2 + (1 - same) * max(0, margin - d)^2`` (times 1/2 with ``half``) with
        ``d = safe_sqrt(sq_dist, eps)`` (finite gradient at ``d = 0``).
    """
    same = ops.cast(ops.reshape(ops.convert_to_tensor(same), (-1,)), "float32")
    sq_dist = ops.cast(ops.reshape(ops.convert_to_tensor(sq_dist), (-1,)), "float32")
    d = safe_sqrt(sq_dist, eps)
    loss = same * sq_dist + (1.0 - same) * ops.square(ops.relu(margin - d))
    return 0.5 * loss if half else loss


# ------------------------------------------------------------------------------ triplets
def triplet_loss(labels, emb, margin: float = 0.5, *, miner: str = "semihard", reduction: str = "mean"):
    """Triplet loss on squared distances with an in-batch miner (:mod:`whale.objectives.miners`).

    Args:
        labels: ``[B]`` ids.
        emb: ``[B, D]`` float embeddings (not normalised here: seed 002's are not).
        margin: on squared distances (0.5 in seed 002's code).
        miner: ``"semihard"`` (FaceNet's rule, seed 002), ``"hardest"`` (each positive pair with its anchor's
            nearest negative) or ``"all"`` (every valid triplet): :data:`whale.objectives.miners.MINERS`.
        reduction: ``"mean"`` over the mined triplets, ``"sum"``, or ``"nonzero"`` (the mean over the triplets
            with a loss above 0): :func:`whale.objectives.miners.reduce_triplets`.

    Returns:
        scalar float32: ``max(0, d(a, p) - d(a, n) + margin)`` over the mined triplets, reduced. 0 (finite
        gradient) when the batch holds no positive pair; an anchor without negatives (only in a batch of one id)
        contributes nothing. ``miner="semihard", reduction="mean"`` is :func:`semihard_triplet_loss`.
    """
    mine = get_miner(miner)
    d_ap, d_an, weight = mine(labels, pairwise_sq_distances(emb))
    return reduce_triplets(ops.relu(d_ap - d_an + margin) * weight, weight, reduction)


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
        (only in a batch of one id) contributes 0. :func:`triplet_loss` with its defaults.
    """
    return triplet_loss(labels, emb, margin, miner="semihard", reduction="mean")


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
