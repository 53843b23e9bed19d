"""``objective: sglobal``: seed 001's SNet-GLoss, the paper's head trained with the similarity global loss (eq. 8)."""
from __future__ import annotations

import keras

from whale.objectives import globalloss
from whale.objectives.base import HeadObjective
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class SimilarityGlobalLoss(keras.losses.Loss):
    """``y_true`` ``[b, 1]`` (1 = same id), ``y_pred`` ``[b, 1]`` the head's probabilities -> seed 001's eq. 8 on the
    head's log-odds (:func:`whale.objectives.globalloss.similarity_global_loss`, its
    :func:`~whale.objectives.globalloss.logit`)."""

    def __init__(self, m: float = 1.0, lam: float = 1.0, name: str = "sglobal", **kwargs):
        super().__init__(name=name, **kwargs)
        self.m, self.lam = float(m), float(lam)

    def call(self, y_true, y_pred):
        return globalloss.similarity_global_loss(y_true, globalloss.logit(y_pred), self.m, self.lam)

    def get_config(self):
        return {**super().get_config(), "m": self.m, "lam": self.lam}


@register
class SGlobal(HeadObjective):
    """A siamese network with a similarity head (the paper's Fig. 1-(b)): the global loss on the head's log-odds,
    margin (eq. 8's m) 1 and lambda 1 (section 5.2); scored by the head."""

    name = "sglobal"
    batches = "pairs"
    params = {"margin": (float, 0.0, None, 1.0), "lam": (float, 0.0, None, 1.0)}
    order = 5

    def loss(self, classes=None):
        return SimilarityGlobalLoss(self.cfg["margin"], self.cfg["lam"])
