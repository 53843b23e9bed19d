"""``objective: triplet``: seed 002's triplet loss with semi-hard online mining on P x K batches (``miner``: which
triplets of the batch, :mod:`whale.objectives.miners`; ``reduction``: how they are averaged)."""
from __future__ import annotations

import keras

from whale.objectives import losses
from whale.objectives.base import IdentityObjective, labels_of
from whale.objectives.miners import MINERS, REDUCTIONS, get_miner
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class TripletLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` embeddings -> the triplet loss of the batch's mined
    triplets (:func:`whale.objectives.losses.triplet_loss`; the defaults: seed 002's semi-hard rule, the mean).

    ``triplet_reduction`` is the triplet loss's own reduction (``mean``, ``sum``, ``nonzero``); Keras's ``reduction``
    argument (the reduction of a per-sample loss) is another, unchanged: this loss is already a scalar. A model saved
    before ``miner`` and ``triplet_reduction`` existed loads with their defaults, the loss it trained with.
    """

    def __init__(self, margin: float = 0.5, miner: str = "semihard", triplet_reduction: str = "mean",
                 name: str = "triplet", **kwargs):
        super().__init__(name=name, **kwargs)
        get_miner(miner)
        if triplet_reduction not in REDUCTIONS:
            raise ValueError(f"TripletLoss(triplet_reduction=...): expected one of {', '.join(REDUCTIONS)}, "
                             f"received {triplet_reduction!r}")
        self.margin, self.miner, self.triplet_reduction = float(margin), str(miner), str(triplet_reduction)

    def call(self, y_true, y_pred):
        return losses.triplet_loss(labels_of(y_true), y_pred, self.margin, miner=self.miner,
                                   reduction=self.triplet_reduction)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin, "miner": self.miner,
                "triplet_reduction": self.triplet_reduction}


@register
class Triplet(IdentityObjective):
    """Seed 002: a linear Dense(256), not normalised (Cauchy scores) unless ``normalize``; FaceNet's semi-hard rule
    on squared distances, margin 0.5, the mean over the positive pairs (``miner``, ``reduction``: others)."""

    name = "triplet"
    batches = "identities"
    params = {"embedding": (int, 1, None, 256), "normalize": (bool, None, None, False),
              "margin": (float, 0.0, None, 0.5), "miner": (str, MINERS, None, "semihard"),
              "reduction": (str, REDUCTIONS, None, "mean")}
    meanings = {"miner": "which triplets of the batch the loss reads: `semihard` (FaceNet's rule, seed 002), "
                         "`hardest` (each positive pair with the anchor's nearest negative) or `all` (every valid "
                         "triplet)",
                "reduction": "how the mined triplets' losses are reduced: `mean` over them, `sum`, or `nonzero` "
                             "(the mean over those with a loss above 0)"}
    order = 2

    def unit(self):
        return self.cfg["normalize"]

    def loss(self, classes=None):
        c = self.cfg
        return TripletLoss(c["margin"], c["miner"], c["reduction"])
