"""What every objective is made of, and the three families an objective module builds on.

An objective (one module in ``whale/objectives/``, registered by name: :mod:`whale.objectives.registry`)
is a subclass of one family with its declarations as class attributes (``name``, ``batches``, ``params``,
``meanings``, ``order``: data, read by the config without importing Keras, :mod:`whale.config.objectives`) and
its pieces as methods: what sits on the branch (the family's :meth:`Objective.build`, through small hooks),
its Keras loss (:meth:`Objective.loss`), its metrics and its scorer (:meth:`Objective.scorer`). Training
compiles every one through :func:`whale.models.compile_model`.

- :class:`HeadObjective`: the paper's head on labelled pairs (:mod:`whale.models.siamese`).
- :class:`PairObjective`: an :class:`~whale.objectives.layers.Embedding` in the siamese form on labelled pairs,
  with a top (:meth:`PairObjective.top`) whose output the loss reads.
- :class:`IdentityObjective`: an embedding trained on P x K batches of identities, optionally with a layer on top
  (:meth:`IdentityObjective.top`, e.g. ArcFace's sub-centres).
"""
from __future__ import annotations

import keras

from whale.config.objectives import ObjectiveConfig
from whale.objectives.layers import Embedding

__all__ = ["Objective", "HeadObjective", "PairObjective", "IdentityObjective", "labels_of"]


def labels_of(y_true):
    """``y_true`` as Keras hands it to a loss (``[b]`` or ``[b, 1]`` float) -> ``[b]`` int32 identity codes."""
    return keras.ops.cast(keras.ops.reshape(y_true, (-1,)), "int32")


class Objective:
    """What one objective adds on top of the branch and how it trains. Subclasses fill in the pieces."""

    name = ""  # the config's ``objective`` name
    batches = "pairs"  # "pairs" (labelled pairs) or "identities" (P x K batches)
    params: dict = {}  # {key: (kind, lo, hi, default)}: whale.config.objectives.ObjectiveSpec
    meanings: dict = {}  # {key: text} for docs/configs.md (shared keys: whale.config.doc.PARAM_MEANINGS)
    order = 100  # place among the objective names (the paper's head: 0)
    metric = None  # name of the fit metric logged as 'accuracy' (None: not logged)

    def __init__(self, cfg: ObjectiveConfig, head_mid: int = 32, head_hidden: int = 0):
        self.cfg = cfg
        self.head_mid, self.head_hidden = head_mid, head_hidden  # model.head_*: the paper's head only

    @property
    def identities(self) -> bool:
        """True when batches are P x K identities, False for labelled pairs."""
        return self.batches == "identities"

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
        """The Keras loss (``classes``: ``[n_ids]`` images per training identity, for per-identity margins)."""
        raise NotImplementedError

    def metrics(self) -> list:
        """Fresh metrics to compile with (the one named :attr:`metric` is logged as the epoch's 'accuracy')."""
        return []

    def compile(self, model: keras.Model, lr: float, l2: float = 0.0, classes=None) -> keras.Model:
        """Adam(lr) and the objective's loss; ``l2`` on every Conv2D/Dense kernel (as the paper's)."""
        from whale.models.siamese import compile_model

        return compile_model(model, lr, self.loss(classes), self.metrics(), l2)

    def scorer(self, model: keras.Model, **head_options):
        """The scorer of a trained ``model`` (:func:`whale.objectives.scorer.make_scorer`: scores in [0, 1])."""
        from whale.objectives.scorer import make_scorer

        return make_scorer(model, **head_options)


class HeadObjective(Objective):
    """The paper's head on labelled pairs (:mod:`whale.models.siamese`), scored through the head
    (:class:`whale.models.HeadScorer`); subclasses give the loss."""

    metric = "acc"

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

    def metrics(self):
        return [keras.metrics.BinaryAccuracy(name="acc")]  # probability 0.5, log-odds 0


def _copy_weights(new: keras.Model, old: keras.Model, names) -> keras.Model:
    for name in names:
        new.get_layer(name).set_weights(old.get_layer(name).get_weights())
    return new


class PairObjective(Objective):
    """An embedding trained on labelled pairs, in the siamese form: ``top([e_a, e_b])`` is the output the loss
    reads (a layer named ``"similarity"`` is also what the scorer reads)."""

    normalize = False  # unit-normalise the embedding (a hook: :meth:`unit`)
    carried = ("embedding", "similarity")  # layers whose weights a rebuild keeps

    def unit(self) -> bool:
        """Whether the embedding is unit-normalised."""
        return self.normalize

    def top(self) -> keras.layers.Layer:
        """The layer on the pair of embeddings (``[b, E]`` twice -> ``[b, 1]``)."""
        raise NotImplementedError

    def build(self, branch, shared=False, classes=None):
        from whale.models.siamese import PairGather

        embed = Embedding(self.cfg["embedding"], normalize=self.unit(), score="cauchy", name="embedding")
        distance = self.top()
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
        return _copy_weights(new, model, [layer.name for layer in new.layers if layer.name in self.carried])

    def needs_rebuild(self, model, shared, classes=None):
        return any(layer.name == "pair_gather" for layer in model.layers) != shared


class IdentityObjective(Objective):
    """An embedding trained on P x K batches of identities; unit-norm and scored by cosine unless :meth:`unit`
    says otherwise (then Cauchy on the plain embedding), with an optional layer on top (:meth:`top`)."""

    batches = "identities"
    top_layer = None  # name of the layer :meth:`top` puts on the embedding, kept by a rebuild that fits

    def unit(self) -> bool:
        """Whether the embedding is unit-normalised (and scored by cosine)."""
        return True

    def top(self, classes):
        """A layer on the embedding (named :attr:`top_layer`), or None: the loss reads the embedding."""
        return None

    def build(self, branch, shared=False, classes=None):
        images = keras.Input(tuple(branch.input_shape[1:]), name="images")
        unit = self.unit()
        out = Embedding(self.cfg["embedding"], normalize=unit, score="cosine" if unit else "cauchy",
                        name="embedding")(branch(images))
        top = self.top(classes)
        if top is not None:
            out = top(out)
        return keras.Model(images, out, name="identity")

    def rebuild(self, model, branch, shared=False, classes=None):
        new = self.build(branch, classes=classes)
        keep = ["embedding"]
        if self.top_layer is not None and not self.needs_rebuild(model, shared, classes):
            keep.append(self.top_layer)
        return _copy_weights(new, model, keep)
