"""The siamese model (one branch applied to both images + head), freezing, and resizing.

Two forms train the same branch and head:

- the paper's: inputs ``img_a``, ``img_b`` ``[B, S, S, C]``, one pair per row, so a batch of
  ``B`` pairs runs the branch on ``2B`` images;
- ``shared`` (``batching: images``): inputs ``images [B, S, S, C]`` and ``pair_index [B, 2]``
  (rows into ``images``): the branch runs once per image and the ``B`` pairs gather their two
  feature vectors (:class:`PairGather`), so an image in several pairs of a batch costs one
  forward and backward pass (:mod:`whale.training.imagebatches` packs such batches).

Layer names are part of the contract: ``model.get_layer("branch")`` and
``model.get_layer("head")`` return the two sub-models in both forms.
"""
from __future__ import annotations

import keras
from keras import ops

from whale.imagesize import as_hw
from whale.models.factory import build_branch
from whale.models.registry import branch_options, branch_spec


@keras.saving.register_keras_serializable(package="whale")
class PairGather(keras.layers.Layer):
    """``(features [B, d], pair_index [B, 2] int) -> (features[i0], features[i1])``, each ``[B, d]``."""

    def call(self, inputs):
        features, index = inputs
        index = ops.cast(index, "int32")
        return ops.take(features, index[:, 0], axis=0), ops.take(features, index[:, 1], axis=0)

    def compute_output_shape(self, input_shape):
        features, index = input_shape
        shape = (index[0], features[-1])
        return shape, shape


def build_siamese(branch: keras.Model, head: keras.Model, shared: bool = False) -> keras.Model:
    """``(img_a, img_b)`` float32 ``[b, S, S, C]`` raw 0..255 -> ``[b, 1]`` float32 score.

    The same ``branch`` (shared weights) embeds both images; ``head`` scores the pair.
    ``branch`` must be named ``"branch"`` and ``head`` ``"head"`` (the builders do this).
    ``shared=True``: the ``(images, pair_index)`` form of the module's docstring instead.
    """
    if branch.name != "branch" or head.name != "head":
        raise ValueError(
            f"build_siamese needs models named 'branch' and 'head', got {branch.name!r} and "
            f"{head.name!r}"
        )
    if branch.output_shape[-1] != head.input_shape[0][-1]:
        raise ValueError(
            f"branch gives {branch.output_shape[-1]} features, head expects "
            f"{head.input_shape[0][-1]}"
        )
    shape = tuple(branch.input_shape[1:])
    if shared:
        images = keras.Input(shape, name="images")
        index = keras.Input((2,), dtype="int32", name="pair_index")
        score = head(PairGather(name="pair_gather")([branch(images), index]))
        return keras.Model([images, index], score, name="siamese_shared")
    img_a = keras.Input(shape, name="img_a")
    img_b = keras.Input(shape, name="img_b")
    score = head([branch(img_a), branch(img_b)])
    return keras.Model([img_a, img_b], score, name="siamese")


def is_shared(model: keras.Model) -> bool:
    """Whether a siamese model is the ``shared`` form (inputs ``images``, ``pair_index``)."""
    return any(layer.name == "pair_gather" for layer in model.layers)


def set_branch_trainable(model: keras.Model, flag: bool) -> None:
    """Freeze (``False``) or unfreeze the siamese model's branch in place.

    Keras 3 fixes the trainable variables when a model is compiled: the change takes effect
    only after the caller compiles again (:func:`compile_siamese`). A frozen branch also runs
    its BatchNorm layers in inference mode, so moving statistics stay put too.
    """
    model.get_layer("branch").trainable = bool(flag)


def compile_siamese(model: keras.Model, lr: float, l2: float = 0.0) -> keras.Model:
    """Compile with Adam(lr), binary cross-entropy and an ``acc`` (binary accuracy) metric.

    ``l2 > 0`` puts an L2 penalty ``l2 * sum(w^2)`` on every Conv2D/Dense kernel (the
    reference kernel's ``kernel_regularizer``); ``l2 = 0`` removes it. Call again after
    :func:`set_branch_trainable`. Returns ``model`` for chaining.
    """
    return compile_model(model, lr, keras.losses.BinaryCrossentropy(), [keras.metrics.BinaryAccuracy(name="acc")], l2)


def compile_model(model: keras.Model, lr: float, loss, metrics=(), l2: float = 0.0) -> keras.Model:
    """The one compile of every training model: Adam(lr), ``loss``, ``metrics`` (fresh metric objects), and
    ``l2`` on every Conv2D/Dense kernel (:func:`set_l2`). Returns ``model``.

    Raises:
        ValueError: ``lr <= 0`` or ``l2 < 0``.
    """
    if lr <= 0:
        raise ValueError(f"learning rate must be > 0, got {lr}")
    set_l2(model, l2)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss=loss, metrics=list(metrics) or None)
    return model


def set_l2(model: keras.Model, l2: float) -> None:
    """Put an L2 penalty ``l2 * sum(w^2)`` on every Conv2D/Dense kernel (0 removes it).

    Regularisers are not saved in model files: call this again after loading a checkpoint,
    before the first training step.
    """
    if l2 < 0:
        raise ValueError(f"l2 must be >= 0, got {l2}")
    reg = keras.regularizers.L2(l2) if l2 > 0 else None
    for layer in _all_layers(model):
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            layer.kernel.regularizer = reg


def model_image_size(model: keras.Model) -> int:
    """Input height S of a siamese model (or of a branch): its side when square (:func:`model_input_size`)."""
    return model_input_size(model)[0]


def model_input_size(model: keras.Model) -> tuple[int, int]:
    """``(height, width)`` of a siamese model's (or a branch's) input."""
    branch = model.get_layer("branch") if any(l.name == "branch" for l in model.layers) else model
    return int(branch.inputs[0].shape[1]), int(branch.inputs[0].shape[2])


def transfer_branch(branch: keras.Model, new_size) -> keras.Model:
    """The same branch architecture at input ``new_size`` (a side ``S`` or ``(height, width)``), with
    all weights copied.

    Works because every branch ends in global max pooling: no weight depends on the input
    size (or shape). The trainable flag is carried over too.
    """
    name, channels = branch_spec(branch)
    new = build_branch(name, (*as_hw(new_size), channels), weights=None, options=branch_options(branch))
    new.set_weights(branch.get_weights())
    new.trainable = branch.trainable
    return new


def resize_siamese(model: keras.Model, new_size) -> keras.Model:
    """A new siamese model at ``new_size`` px (a side or ``(height, width)``) with copies of ``model``'s branch and head weights.

    The returned model (of the same form, see :func:`is_shared`) is uncompiled and shares no
    variables with ``model``.
    """
    branch = transfer_branch(model.get_layer("branch"), new_size)
    old_head = model.get_layer("head")
    head = keras.models.clone_model(old_head)
    head.set_weights(old_head.get_weights())
    return build_siamese(branch, head, shared=is_shared(model))


def _all_layers(model: keras.Model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _all_layers(layer)
