"""``objective: contrastive``: DrLIM on the embeddings' Euclidean distance (seed 000's and seed 002's baseline)."""
from __future__ import annotations

import keras
from keras import ops

from whale.objectives import losses
from whale.objectives.base import PairObjective
from whale.objectives.layers import PairDistance
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class ContrastiveLoss(keras.losses.Loss):
    """``y_true`` ``[b, 1]`` (1 = same id), ``y_pred`` ``[b, 1]`` squared distances -> mean DrLIM loss (without
    DrLIM's 1/2, as this objective always trained: :func:`whale.objectives.losses.contrastive_loss`)."""

    def __init__(self, margin: float = 1.0, name: str = "contrastive", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = float(margin)

    def call(self, y_true, y_pred):
        return losses.contrastive_loss(ops.reshape(y_true, (-1,)), ops.reshape(y_pred, (-1,)), self.margin)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin}


@register
class Contrastive(PairObjective):
    """Embedding -> PairDistance on labelled pairs, DrLIM with margin m; scored by Cauchy ``1 / (1 + d^2)``."""

    name = "contrastive"
    batches = "pairs"
    params = {"embedding": (int, 1, None, 256), "normalize": (bool, None, None, False),
              "margin": (float, 0.0, None, 1.0)}
    order = 1

    def unit(self):
        return self.cfg["normalize"]

    def top(self):
        return PairDistance(name="distance")

    def loss(self, classes=None):
        return ContrastiveLoss(self.cfg["margin"])
