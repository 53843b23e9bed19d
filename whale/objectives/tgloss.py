"""``objective: tgloss``: seed 001's TGLoss (eq. 10), gamma * ratio triplet + the global loss, on P x K batches."""
from __future__ import annotations

import keras

from whale.objectives import globalloss
from whale.objectives.base import IdentityObjective, labels_of
from whale.objectives.globalloss import PAIRS
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class TGLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` unit embeddings -> gamma * ratio triplet + J."""

    def __init__(self, gamma: float = 1.0, t: float = 0.4, lam: float = 0.8, m: float = 0.01, pairs: str = "all",
                 name: str = "tgloss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.gamma, self.t, self.lam, self.m, self.pairs = float(gamma), float(t), float(lam), float(m), str(pairs)

    def call(self, y_true, y_pred):
        return globalloss.tg_loss(labels_of(y_true), y_pred, self.gamma, self.t, self.lam, self.m, pairs=self.pairs)

    def get_config(self):
        return {**super().get_config(), "gamma": self.gamma, "t": self.t, "lam": self.lam, "m": self.m,
                "pairs": self.pairs}


@register
class TGLossObjective(IdentityObjective):
    """Seed 001 (section 5.2): the global loss's t = 0.4, lambda = 0.8 plus gamma = 1 times the ratio triplet loss
    (m = 0.01), on unit-norm embeddings."""

    name = "tgloss"
    batches = "identities"
    params = {"embedding": (int, 1, None, 256), "t": (float, 0.0, None, 0.4), "lam": (float, 0.0, None, 0.8),
              "gamma": (float, 0.0, None, 1.0), "m": (float, 0.0, None, 0.01), "pairs": (str, PAIRS, None, "all")}
    order = 4

    def loss(self, classes=None):
        c = self.cfg
        return TGLoss(c["gamma"], c["t"], c["lam"], c["m"], c["pairs"])
