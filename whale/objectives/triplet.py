"""``objective: triplet``: seed 002's triplet loss with semi-hard online mining on P x K batches."""
from __future__ import annotations

import keras

from whale.objectives import losses
from whale.objectives.base import IdentityObjective, labels_of
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class TripletLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` embeddings -> semi-hard triplet loss."""

    def __init__(self, margin: float = 0.5, name: str = "triplet", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = float(margin)

    def call(self, y_true, y_pred):
        return losses.semihard_triplet_loss(labels_of(y_true), y_pred, self.margin)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin}


@register
class Triplet(IdentityObjective):
    """Seed 002: a linear Dense(256), not normalised (Cauchy scores) unless ``normalize``; FaceNet's semi-hard rule
    on squared distances, margin 0.5."""

    name = "triplet"
    batches = "identities"
    params = {"embedding": (int, 1, None, 256), "normalize": (bool, None, None, False),
              "margin": (float, 0.0, None, 0.5)}
    order = 2

    def unit(self):
        return self.cfg["normalize"]

    def loss(self, classes=None):
        return TripletLoss(self.cfg["margin"])
