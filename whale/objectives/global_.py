"""``objective: global``: seed 001's global loss (eq. 6) on unit embeddings of P x K batches.

(The module's name ends in ``_``: ``global`` is a Python keyword.)
"""
from __future__ import annotations

import keras

from whale.objectives import globalloss
from whale.objectives.base import IdentityObjective, labels_of
from whale.objectives.globalloss import PAIRS
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class GlobalLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` unit embeddings -> the global loss J (``pairs``: every
    pair of the batch, or one triplet per anchor: :func:`whale.objectives.globalloss.global_loss`)."""

    def __init__(self, t: float = 0.4, lam: float = 0.8, pairs: str = "all", name: str = "global", **kwargs):
        super().__init__(name=name, **kwargs)
        self.t, self.lam, self.pairs = float(t), float(lam), str(pairs)

    def call(self, y_true, y_pred):
        return globalloss.global_loss(labels_of(y_true), y_pred, self.t, self.lam, pairs=self.pairs)

    def get_config(self):
        return {**super().get_config(), "t": self.t, "lam": self.lam, "pairs": self.pairs}


@register
class Global(IdentityObjective):
    """Seed 001 (section 5.2): unit-norm embeddings, t = 0.4, lambda = 0.8; ``pairs``: the distances of eq. 6, every
    pair of the batch (``all``) or one triplet per anchor (``triplet``, the paper's)."""

    name = "global"
    batches = "identities"
    params = {"embedding": (int, 1, None, 256), "t": (float, 0.0, None, 0.4), "lam": (float, 0.0, None, 0.8),
              "pairs": (str, PAIRS, None, "all")}
    order = 3

    def loss(self, classes=None):
        c = self.cfg
        return GlobalLoss(c["t"], c["lam"], c["pairs"])
