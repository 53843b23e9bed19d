"""The objectives: what sits on the branch, what a batch holds, the loss, and how two feature sets are scored.

One class per family, chosen by the config's ``objective`` (:data:`whale.config.OBJECTIVES`):

============  =================  ==============================  ===========================================
objective     batches            on the branch                   loss
============  =================  ==============================  ===========================================
head          labelled pairs     the paper's head                binary cross-entropy (seed 003)
sglobal       labelled pairs     the paper's head                global loss on its log-odds (seed 001, eq. 8)
contrastive   labelled pairs     Embedding -> PairDistance       DrLIM, margin m (seed 000/002's baseline)
probabilistic labelled pairs     Embedding -> SimilarityModel    cross-entropy of g(h1, h2; alpha) (seed 004)
triplet       P x K identities   Embedding (linear, 256)         semi-hard triplet, margin 0.5 (seed 002)
global        P x K identities   Embedding (unit norm)           global loss, t, lambda, pairs (seed 001)
tgloss        P x K identities   Embedding (unit norm)           ratio triplet + global loss (seed 001)
arcface       P x K identities   Embedding -> SubCenterArcFace   softmax CE with per-identity margins
============  =================  ==============================  ===========================================

Every model keeps the layer named ``"branch"``; scoring goes through
:func:`whale.objectives.scorer.make_scorer`, so the miner, validation, score files and ensembling are the
same for all. The loss mathematics is :mod:`whale.objectives.losses` (seed 001's: :mod:`whale.objectives.globalloss`);
the Keras layers are :mod:`whale.objectives.layers`; the P x K sampler is :mod:`whale.training.identitybatches`.

Example:
    >>> objective = build_objective(cfg.objective)          # doctest: +SKIP
    >>> model = objective.build(branch, classes=counts)      # doctest: +SKIP
    >>> objective.compile(model, lr=1e-4)                    # doctest: +SKIP
"""
from __future__ import annotations

import keras
import numpy as np
from keras import ops

from whale.config import ObjectiveConfig
from whale.objectives import globalloss, losses
from whale.objectives.layers import Embedding, PairDistance, SubCenterArcFace
from whale.objectives.similarity import SimilarityModel

__all__ = ["Objective", "HeadObjective", "PairObjective", "IdentityObjective", "build_objective",
           "ContrastiveLoss", "TripletLoss", "GlobalLoss", "TGLoss", "SimilarityGlobalLoss", "ArcFaceLoss"]


# ---------------------------------------------------------------------------------------------- losses


@keras.saving.register_keras_serializable(package="whale")
class ContrastiveLoss(keras.losses.Loss):
    """``y_true`` ``[b, 1]`` (1 = same id), ``y_pred`` ``[b, 1]`` squared distances -> mean DrLIM loss."""

    def __init__(self, margin: float = 1.0, name: str = "contrastive", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = float(margin)

    def call(self, y_true, y_pred):
        return losses.contrastive_loss(ops.reshape(y_true, (-1,)), ops.reshape(y_pred, (-1,)), self.margin)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin}


def _labels(y_true):
    return ops.cast(ops.reshape(y_true, (-1,)), "int32")


@keras.saving.register_keras_serializable(package="whale")
class TripletLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` embeddings -> semi-hard triplet loss."""

    def __init__(self, margin: float = 0.5, name: str = "triplet", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = float(margin)

    def call(self, y_true, y_pred):
        return losses.semihard_triplet_loss(_labels(y_true), y_pred, self.margin)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin}


@keras.saving.register_keras_serializable(package="whale")
class GlobalLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` unit embeddings -> the global loss J (``pairs``: every
    pair of the batch, or one triplet per anchor: :func:`whale.objectives.globalloss.global_loss`)."""

    def __init__(self, t: float = 0.4, lam: float = 0.8, pairs: str = "all", name: str = "global", **kwargs):
        super().__init__(name=name, **kwargs)
        self.t, self.lam, self.pairs = float(t), float(lam), str(pairs)

    def call(self, y_true, y_pred):
        return globalloss.global_loss(_labels(y_true), y_pred, self.t, self.lam, pairs=self.pairs)

    def get_config(self):
        return {**super().get_config(), "t": self.t, "lam": self.lam, "pairs": self.pairs}


@keras.saving.register_keras_serializable(package="whale")
class TGLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` identity codes, ``y_pred`` ``[b, E]`` unit embeddings -> gamma * ratio triplet + J."""

    def __init__(self, gamma: float = 1.0, t: float = 0.4, lam: float = 0.8, m: float = 0.01, pairs: str = "all",
                 name: str = "tgloss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.gamma, self.t, self.lam, self.m, self.pairs = float(gamma), float(t), float(lam), float(m), str(pairs)

    def call(self, y_true, y_pred):
        return globalloss.tg_loss(_labels(y_true), y_pred, self.gamma, self.t, self.lam, self.m, pairs=self.pairs)

    def get_config(self):
        return {**super().get_config(), "gamma": self.gamma, "t": self.t, "lam": self.lam, "m": self.m,
                "pairs": self.pairs}


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


@keras.saving.register_keras_serializable(package="whale")
class ArcFaceLoss(keras.losses.Loss):
    """``y_true`` ``[b]`` class codes, ``y_pred`` ``[b, n]`` sub-centre cosines -> softmax CE of the margin logits."""

    def __init__(self, margins, scale: float = 30.0, name: str = "arcface", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margins = [float(m) for m in np.asarray(margins, np.float32).ravel()]
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        labels = _labels(y_true)
        return losses.arcface_loss(labels, losses.arcface_margin_logits(y_pred, labels, self.margins, self.scale))

    def get_config(self):
        return {**super().get_config(), "margins": self.margins, "scale": self.scale}


# ----------------------------------------------------------------------------------------- objectives


class Objective:
    """What one objective adds on top of the branch and how it trains. Subclasses fill in the pieces."""

    identities = False  # batches of P x K identities (True) or of labelled pairs (False)
    metric = None  # name of the fit metric logged as 'accuracy' (None: not logged)

    def __init__(self, cfg: ObjectiveConfig):
        self.cfg = cfg
        self.name = cfg.name

    def build(self, branch: keras.Model, shared: bool = False, classes=None) -> keras.Model:
        """The training model on ``branch`` (a model named ``"branch"``).

        ``shared``: the ``(images, pair_index)`` form of pair objectives (``batching: images``).
        ``classes``: ``[n_ids]`` images per training identity (ArcFace's classes and margins).
        """
        raise NotImplementedError

    def rebuild(self, model: keras.Model, branch: keras.Model, shared: bool = False, classes=None) -> keras.Model:
        """``model``'s top (weights copied) on another ``branch`` (a new size) or in another form."""
        raise NotImplementedError

    def needs_rebuild(self, model: keras.Model, shared: bool, classes=None) -> bool:
        """Whether ``model`` must be rebuilt for this form and these classes."""
        return False

    def loss(self, classes=None) -> keras.losses.Loss:
        raise NotImplementedError

    def compile(self, model: keras.Model, lr: float, l2: float = 0.0, classes=None) -> keras.Model:
        """Adam(lr) and the objective's loss; ``l2`` on every Conv2D/Dense kernel (as the paper's)."""
        from whale.models.siamese import set_l2

        if lr <= 0:
            raise ValueError(f"learning rate must be > 0, got {lr}")
        set_l2(model, l2)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss=self.loss(classes),
                      metrics=self.metrics() or None)
        return model

    def metrics(self) -> list:
        """Fresh metrics to compile with (the one named :attr:`metric` is logged as the epoch's 'accuracy')."""
        return []


class HeadObjective(Objective):
    """The paper's head on labelled pairs (:mod:`whale.models.siamese`): binary cross-entropy (``head``), or seed 001's
    similarity global loss on the head's log-odds (``sglobal``, SNet-GLoss: a siamese network with a similarity
    head, the paper's Fig. 1-(b)). Both score through the head (:class:`whale.models.HeadScorer`)."""

    metric = "acc"

    def __init__(self, cfg: ObjectiveConfig, head_mid: int = 32, head_hidden: int = 0):
        super().__init__(cfg)
        self.head_mid, self.head_hidden = head_mid, head_hidden

    def build(self, branch, shared=False, classes=None):
        from whale.models import build_head, build_siamese

        head = build_head(int(branch.output_shape[-1]), mid=self.head_mid, hidden=self.head_hidden)
        return build_siamese(branch, head, shared=shared)

    def rebuild(self, model, branch, shared=False, classes=None):
        from whale.models import build_siamese

        old = model.get_layer("head")
        head = keras.models.clone_model(old)
        head.set_weights(old.get_weights())
        return build_siamese(branch, head, shared=shared)

    def needs_rebuild(self, model, shared, classes=None):
        from whale.models import is_shared

        return is_shared(model) != shared

    def loss(self, classes=None):
        if self.name == "sglobal":
            return SimilarityGlobalLoss(self.cfg["margin"], self.cfg["lam"])
        return keras.losses.BinaryCrossentropy()

    def metrics(self):
        return [keras.metrics.BinaryAccuracy(name="acc")]  # probability 0.5, log-odds 0

    def compile(self, model, lr, l2=0.0, classes=None):
        from whale.models import compile_siamese

        if self.name == "head":
            return compile_siamese(model, lr, l2=l2)
        return super().compile(model, lr, l2, classes)


def _copy_weights(new: keras.Model, old: keras.Model, names) -> keras.Model:
    for name in names:
        new.get_layer(name).set_weights(old.get_layer(name).get_weights())
    return new


class PairObjective(Objective):
    """An embedding trained on labelled pairs, in the siamese form: contrastive (the pair's squared distance
    is the output its loss reads) or probabilistic (seed 004: the log-odds of ``g(h1, h2; alpha)``, layer
    ``"similarity"``, which the scorer also reads)."""

    def __init__(self, cfg: ObjectiveConfig):
        super().__init__(cfg)
        self.metric = "acc" if self.name == "probabilistic" else None

    def _embedding(self):
        return Embedding(self.cfg["embedding"], normalize=self.name == "contrastive" and self.cfg["normalize"],
                         score="cauchy", name="embedding")

    def _top(self):
        if self.name == "contrastive":
            return PairDistance(name="distance")
        c = self.cfg
        return SimilarityModel(c["similarity"], dim=c["embedding"], beta=c["beta"], delta=c["delta"],
                               returns="logit", name="similarity")

    def build(self, branch, shared=False, classes=None):
        from whale.models.siamese import PairGather

        embed, distance = self._embedding(), self._top()
        shape = tuple(branch.input_shape[1:])
        if shared:
            images = keras.Input(shape, name="images")
            index = keras.Input((2,), dtype="int32", name="pair_index")
            a, b = PairGather(name="pair_gather")([embed(branch(images)), index])
            return keras.Model([images, index], distance([a, b]), name="siamese_shared")
        img_a, img_b = keras.Input(shape, name="img_a"), keras.Input(shape, name="img_b")
        return keras.Model([img_a, img_b], distance([embed(branch(img_a)), embed(branch(img_b))]), name="siamese")

    def rebuild(self, model, branch, shared=False, classes=None):
        new = self.build(branch, shared)
        return _copy_weights(new, model, [layer.name for layer in new.layers if layer.name in ("embedding", "similarity")])

    def needs_rebuild(self, model, shared, classes=None):
        return any(layer.name == "pair_gather" for layer in model.layers) != shared

    def loss(self, classes=None):
        if self.name == "contrastive":
            return ContrastiveLoss(self.cfg["margin"])
        return keras.losses.BinaryCrossentropy(from_logits=True)

    def metrics(self):
        if self.name == "contrastive":
            return []
        return [keras.metrics.BinaryAccuracy(name="acc", threshold=0.0)]  # on log-odds: probability 0.5 at 0


class IdentityObjective(Objective):
    """An embedding trained on P x K batches of identities (triplet, global, TGLoss, ArcFace)."""

    identities = True

    def _embedding(self):
        unit = self.name != "triplet" or self.cfg["normalize"]
        return Embedding(self.cfg["embedding"], normalize=unit, score="cosine" if unit else "cauchy",
                         name="embedding")

    def build(self, branch, shared=False, classes=None):
        images = keras.Input(tuple(branch.input_shape[1:]), name="images")
        out = self._embedding()(branch(images))
        if self.name == "arcface":
            if classes is None:
                raise ValueError("objective arcface: build needs the images per training identity (classes)")
            out = SubCenterArcFace(len(classes), self.cfg["subcenters"], name="arcface")(out)
        return keras.Model(images, out, name="identity")

    def rebuild(self, model, branch, shared=False, classes=None):
        new = self.build(branch, classes=classes)
        keep = ["embedding"]
        if self.name == "arcface" and not self.needs_rebuild(model, shared, classes):
            keep.append("arcface")
        return _copy_weights(new, model, keep)

    def needs_rebuild(self, model, shared, classes=None):
        # ArcFace's classes are the training identities: another dataset (PlayGround -> main) has others.
        return self.name == "arcface" and model.get_layer("arcface").n_ids != len(classes)

    def loss(self, classes=None):
        c = self.cfg
        if self.name == "triplet":
            return TripletLoss(c["margin"])
        if self.name == "global":
            return GlobalLoss(c["t"], c["lam"], c["pairs"])
        if self.name == "tgloss":
            return TGLoss(c["gamma"], c["t"], c["lam"], c["m"], c["pairs"])
        margins = losses.dynamic_margins(np.asarray(classes), c["margin_a"], c["margin_p"], c["margin_c"])
        return ArcFaceLoss(margins, c["scale"])


def build_objective(cfg: ObjectiveConfig, head_mid: int = 32, head_hidden: int = 0) -> Objective:
    """The :class:`Objective` of a config's ``objective`` (``head_*``: the paper's head sizes, ``model.head_*``)."""
    if cfg.name in ("head", "sglobal"):
        return HeadObjective(cfg, head_mid, head_hidden)
    if cfg.name in ("contrastive", "probabilistic"):
        return PairObjective(cfg)
    if cfg.identities:
        return IdentityObjective(cfg)
    raise ValueError(f"objective: unknown name {cfg.name!r}")
