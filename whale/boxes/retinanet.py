"""The paper's second box model: keras-cv's RetinaNet on an explicitly configured ResNet, one box per image.

keras-cv's named backbones and presets (``ResNet50Backbone()``, ``from_preset``) download
weights, so the backbone is built from explicit arguments
(``keras_cv.models.ResNetBackbone(stackwise_filters=..., stackwise_blocks=..., ...)``,
bottleneck blocks, random initialisation) and nothing is fetched. The rest is keras-cv's
RetinaNet: its anchor generator and label encoder, focal classification loss, smooth-L1 box
loss and non-maximum suppression, with

* one class (``whale``), boxes in ``xyxy`` pixels of the ``S x S`` input;
* a feature pyramid and prediction heads of ``fpn_width`` maps (:class:`NarrowPyramid`,
  :class:`NarrowHead`: keras-cv's own layers with their hard-wired 256 made a parameter, and one
  hidden convolution per head instead of four): keras-cv's default widths cost ~0.3 s per
  128 px image per training step on a 2-core CPU;
* anchors sized to the input and wide (:func:`anchor_generator`);
* the decoder keeps one box, the most confident: one whale per image. Below
  ``min_confidence`` the detection counts as failed (NaN, then the other model's box or the
  whole image).

Input: float32 ``[b, S, S, 3]`` raw 0..255 (the backbone rescales by 1/255 itself).
"""
from __future__ import annotations

import contextlib
import warnings

import keras
import numpy as np
from keras import layers, ops


class NarrowPyramid(layers.Layer):
    """keras-cv's RetinaNet ``FeaturePyramid`` (P3-P5 in, P3-P7 out) with ``width`` maps instead of 256."""

    def __init__(self, width: int = 64, **kwargs):
        super().__init__(**kwargs)
        self.width = int(width)
        conv = lambda k, s: layers.Conv2D(self.width, k, s, "same")  # noqa: E731
        self.lateral = [conv(1, 1) for _ in range(3)]
        self.smooth = [conv(3, 1) for _ in range(3)]
        self.p6, self.p7 = conv(3, 2), conv(3, 2)
        self.up = layers.UpSampling2D(2)

    def call(self, inputs, training=False):
        c3, c4, c5 = (inputs["P3"], inputs["P4"], inputs["P5"]) if isinstance(inputs, dict) else inputs
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + self.up(p5)
        p3 = self.lateral[0](c3) + self.up(p4)
        p6 = self.p6(c5)
        return (self.smooth[0](p3), self.smooth[1](p4), self.smooth[2](p5), p6, self.p7(ops.relu(p6)))

    def build(self, input_shape):
        for conv, key in zip(self.lateral, ("P3", "P4", "P5")):
            conv.build((None, None, None, input_shape[key][-1]))
        for conv in self.smooth:
            conv.build((None, None, None, self.width))
        self.p6.build((None, None, None, input_shape["P5"][-1]))
        self.p7.build((None, None, None, self.width))
        self.built = True

    def compute_output_shape(self, input_shape):
        shapes = [tuple(input_shape[k][:-1]) + (self.width,) for k in ("P3", "P4", "P5")]
        return tuple(shapes + [shapes[2], shapes[2]])

    def get_config(self):
        return {**super().get_config(), "width": self.width}


class NarrowHead(layers.Layer):
    """keras-cv's RetinaNet ``PredictionHead`` with one hidden 3x3 convolution of ``width`` maps (not 256)."""

    def __init__(self, output_filters: int, bias_initializer, width: int = 64, **kwargs):
        super().__init__(**kwargs)
        self.output_filters, self.width = int(output_filters), int(width)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.hidden = layers.Conv2D(self.width, 3, padding="same", kernel_initializer="orthogonal",
                                    activation="relu")
        self.out = layers.Conv2D(self.output_filters, 3, padding="same", kernel_initializer="orthogonal",
                                 bias_initializer=self.bias_initializer)

    def call(self, x, training=False):
        return self.out(self.hidden(x))

    def build(self, input_shape):
        self.hidden.build(input_shape)
        self.out.build(tuple(input_shape[:-1]) + (self.width,))
        self.built = True

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_filters,)

    def get_config(self):
        return {**super().get_config(), "output_filters": self.output_filters, "width": self.width,
                "bias_initializer": keras.initializers.serialize(self.bias_initializer)}


def anchor_generator(size: int):
    """keras-cv's ``AnchorGenerator`` on P3-P7 with sizes ``size x (1/8 .. 2)`` and wide aspect ratios.

    keras-cv's default (sizes 32..512, width/height 0.5, 1, 2) is made for 512-1024 px photos of
    any object; a whole whale image at 64-128 px holds a fluke 2-4 times wider than tall, which
    those anchors barely overlap at IoU 0.5, so few anchors would learn.
    """
    import keras_cv

    return keras_cv.layers.AnchorGenerator(
        bounding_box_format="xyxy", sizes=[size / 8, size / 4, size / 2, size, size * 2],
        scales=[2**0, 2 ** (1 / 3), 2 ** (2 / 3)], aspect_ratios=[1.0, 2.0, 4.0],
        strides=[2**i for i in range(3, 8)], clip_boxes=True)


def build_retinanet(size: int, filters=(16, 32, 64, 128), blocks=(1, 1, 1, 1), fpn_width: int = 64,
                    min_confidence: float = 0.05):
    """keras-cv RetinaNet for one whale per image, built offline (see module doc).

    Returns:
        an uncompiled ``keras_cv.models.RetinaNet``; ``predict`` gives ``boxes`` ``[b, 1, 4]``,
        ``confidence`` ``[b, 1]``, ``num_detections`` ``[b]``.
    """
    import keras_cv

    backbone = keras_cv.models.ResNetBackbone(
        stackwise_filters=list(filters), stackwise_blocks=list(blocks), stackwise_strides=[1, 2, 2, 2],
        block_type="block", include_rescaling=True, input_shape=(size, size, 3))
    anchors = 9  # 3 scales x 3 aspect ratios per position, as keras-cv's default
    prior = keras.initializers.Constant(-np.log((1 - 0.01) / 0.01))
    return keras_cv.models.RetinaNet(
        backbone=backbone, num_classes=1, bounding_box_format="xyxy",
        anchor_generator=anchor_generator(size),
        feature_pyramid=NarrowPyramid(fpn_width),
        classification_head=NarrowHead(anchors, prior, fpn_width),
        box_head=NarrowHead(anchors * 4, "zeros", fpn_width),
        # NonMaxSuppression, not MultiClassNonMaxSuppression: the latter is TensorFlow-only in keras-cv 0.9.
        prediction_decoder=keras_cv.layers.NonMaxSuppression(
            bounding_box_format="xyxy", from_logits=True, confidence_threshold=float(min_confidence),
            max_detections=1),
    )


@contextlib.contextmanager
def quiet_inputs_warning():
    """keras-cv's RetinaNet calls its backbone (declared with ``{"images": ...}`` inputs) on a plain
    tensor, and Keras warns about the structure at every trace; the call is right, the warning is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The structure of `inputs` doesn't match", category=UserWarning)
        yield


def compile_retinanet(model, optimizer) -> None:
    """Focal loss on the anchors' classes, smooth L1 on their box offsets (keras-cv's RetinaNet losses)."""
    model.compile(classification_loss="focal", box_loss="smoothl1", optimizer=optimizer)


def targets(unit: np.ndarray, size: int) -> dict:
    """What ``fit`` reads for unit boxes ``[b, 4]``: ``boxes`` ``[b, 1, 4]`` pixels, ``classes`` ``[b, 1]``."""
    unit = np.asarray(unit, dtype=np.float32)
    return {"boxes": unit[:, None, :] * np.float32(size), "classes": np.zeros((len(unit), 1), np.float32)}


def predict_unit(model, images: np.ndarray, size: int, batch_size: int = 32) -> np.ndarray:
    """Unit boxes ``[n, 4]`` float32 of float32 images ``[n, S, S, 3]``; NaN rows: nothing found."""
    with quiet_inputs_warning():
        out = model.predict(np.asarray(images, dtype=np.float32), batch_size=batch_size, verbose=0)
    boxes = np.asarray(out["boxes"], dtype=np.float32)[:, 0, :] / np.float32(size)
    found = np.asarray(out["num_detections"]).reshape(-1) > 0
    boxes[~found] = np.nan
    return boxes
