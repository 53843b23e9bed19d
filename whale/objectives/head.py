"""``objective: head``, the default: the paper's head on labelled pairs, binary cross-entropy (seed 003)."""
from __future__ import annotations

import keras

from whale.objectives.base import HeadObjective
from whale.objectives.registry import register


@register
class Head(HeadObjective):
    """The paper's head (``model.head_mid``, ``model.head_hidden``) trained on labelled pairs with binary
    cross-entropy; scored by the head (:class:`whale.models.HeadScorer`)."""

    name = "head"
    batches = "pairs"
    params = {}
    meanings = {"": "the paper's head: `model.head_mid`, `model.head_hidden`"}
    order = 0

    def loss(self, classes=None):
        return keras.losses.BinaryCrossentropy()
