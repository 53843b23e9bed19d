"""``objective: probabilistic``: seed 004's similarity models g(h1, h2; alpha) on labelled pairs."""
from __future__ import annotations

import keras

from whale.objectives.base import PairObjective
from whale.objectives.registry import register
from whale.objectives.similarity import SIMILARITIES, SimilarityModel


@register
class Probabilistic(PairObjective):
    """Embedding -> :class:`~whale.objectives.similarity.SimilarityModel` (layer ``"similarity"``, its log-odds),
    binary cross-entropy of the pair labels (eq. 3.2); a 20-d embedding as in the thesis' ORL network, Cauchy the
    thesis' pick; scored by ``g`` itself."""

    name = "probabilistic"
    batches = "pairs"
    params = {"embedding": (int, 1, None, 20), "similarity": (str, SIMILARITIES, None, "cauchy"),
              "beta": (float, 0.0, None, 1.0), "delta": (float, 0.0, None, 2.0)}
    order = 7
    metric = "acc"

    def top(self):
        c = self.cfg
        return SimilarityModel(c["similarity"], dim=c["embedding"], beta=c["beta"], delta=c["delta"],
                               returns="logit", name="similarity")

    def loss(self, classes=None):
        return keras.losses.BinaryCrossentropy(from_logits=True)

    def metrics(self):
        return [keras.metrics.BinaryAccuracy(name="acc", threshold=0.0)]  # on log-odds: probability 0.5 at 0
