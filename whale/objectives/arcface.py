"""``objective: arcface``: sub-center ArcFace with per-identity margins on P x K batches (Happywhale 2022's winners)."""
from __future__ import annotations

import keras
import numpy as np

from whale.objectives import losses
from whale.objectives.base import IdentityObjective, labels_of
from whale.objectives.layers import SubCenterArcFace
from whale.objectives.registry import register


@keras.saving.register_keras_serializable(package="whale")
class ArcFaceLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` class codes, ``y_pred`` ``[b, n]`` sub-centre cosines -> softmax CE of the margin logits."""

    def __init__(self, margins, scale: float = 30.0, name: str = "arcface", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margins = [float(m) for m in np.asarray(margins, np.float32).ravel()]
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        labels = labels_of(y_true)
        return losses.arcface_loss(labels, losses.arcface_margin_logits(y_pred, labels, self.margins, self.scale))

    def get_config(self):
        return {**super().get_config(), "margins": self.margins, "scale": self.scale}


@register
class ArcFace(IdentityObjective):
    """Unit embedding -> :class:`~whale.objectives.layers.SubCenterArcFace` (one class per training identity);
    margins ``m = a * n^p + c`` (n images of the identity) and scale s: the Happywhale 2022 1st place's tuned values
    (knshnb/kaggle-happywhale-1st-place, config/default.yaml; :data:`whale.objectives.losses.HAPPYWHALE_2022_MARGINS`).
    Scored by cosine on the embedding."""

    name = "arcface"
    batches = "identities"
    params = {"embedding": (int, 1, None, 512), "subcenters": (int, 1, None, 2), "scale": (float, 0.0, None, 20.96),
              "margin_a": (float, 0.0, None, 0.27126), "margin_p": (float, None, 0.0, -0.364399),
              "margin_c": (float, 0.0, None, 0.05)}
    order = 6
    top_layer = "arcface"

    def top(self, classes):
        if classes is None:
            raise ValueError("objective arcface: build needs the images per training identity (classes)")
        return SubCenterArcFace(len(classes), self.cfg["subcenters"], name=self.top_layer)

    def needs_rebuild(self, model, shared, classes=None):
        # The classes are the training identities: another dataset (PlayGround -> main) has others.
        return model.get_layer(self.top_layer).n_ids != len(classes)

    def loss(self, classes=None):
        c = self.cfg
        margins = losses.dynamic_margins(np.asarray(classes), c["margin_a"], c["margin_p"], c["margin_c"])
        return ArcFaceLoss(margins, c["scale"])
