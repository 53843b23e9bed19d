"""The paper's first box model: a ConvNet on VGG16's layout regressing the two corners.

Input: float32 ``[b, S, S, 3]`` raw pixels 0..255 of the whole image resized to a square.
Output: float32 ``[b, 4]``, sigmoid, the unit box ``(x0, y0, x1, y1)`` (corners divided by the
image's width and height).

VGG16's layout is five blocks of 3x3 convolutions (2, 2, 3, 3, 3 of them; 64, 128, 256, 512, 512
maps) each closed by 2x2 max pooling. ``width = 1`` with ``weights`` set is
``keras.applications.VGG16(include_top=False)`` itself (``"imagenet"`` downloads; a local ``.h5``
file does not). A narrower ``width`` (the CPU default, 1/8) keeps the layout with fewer maps and
a BatchNormalization after every convolution so that it trains from scratch in a few epochs.
Two heads (``head``):

- ``"dense"`` (the paper's four regressed outputs): flatten the last ``S/32 x S/32`` map
  (position matters for a box, so no global pooling), then Dense(256, ReLU), Dropout,
  Dense(4, sigmoid).
- ``"integral"`` (ours, measured side by side in ``benchmarks/seeds/box_heads.py``): the same backbone read
  at stride 8 (block 4's last convolution, before its pooling), a 1x1 convolution to one map
  per edge, and for each edge the expectation of its coordinate under the softmax of its map
  over all ``S/8 x S/8`` positions (a soft argmax; the cell centres span 0..1). The four
  outputs are still the unit corners, so the loss, the averaging and the files are the same;
  what changes is that position is read from where the evidence lies instead of being
  re-encoded in channels by the Dense layer, which a from-scratch regressor learns slowly.

Loss (:func:`box_loss`): L1 on the unit corners plus ``1 - GIoU``. L1 alone weighs a corner's
error the same on a small and a large box, while the paper's figure of merit is IoU; IoU alone
has no gradient while the boxes do not overlap (early in training). GIoU keeps a gradient
there and L1 steadies the first epochs.
"""
from __future__ import annotations

import keras
from keras import layers, ops

from whale.boxes.config import VGG_HEADS

_LAYOUT = ((2, 64), (2, 128), (3, 256), (3, 512), (3, 512))


def _backbone(x, width: float, blocks: int = 5):
    """VGG16's first ``blocks`` blocks at ``width``; with ``blocks < 5`` the last block is left unpooled."""
    for block, (convs, filters) in enumerate(_LAYOUT[:blocks], start=1):
        f = max(4, int(round(filters * width)))
        for i in range(1, convs + 1):
            x = layers.Conv2D(f, 3, padding="same", use_bias=False, name=f"block{block}_conv{i}")(x)
            x = layers.BatchNormalization(name=f"block{block}_bn{i}")(x)
            x = layers.ReLU(name=f"block{block}_relu{i}")(x)
        if blocks == 5 or block < blocks:
            x = layers.MaxPooling2D(2, name=f"block{block}_pool")(x)
    return x


def soft_argmax_corners(maps):
    """``[b, h, w, 4]`` logits (one map per edge: x0, y0, x1, y1) -> ``[b, 4]`` expected unit coordinates.

    Each map's softmax over its ``h * w`` positions weighs the cell centres, placed at
    ``j / (w - 1)`` across and ``i / (h - 1)`` down so that 0 and 1 (a box touching the image's
    border) are reachable.
    """
    h, w = maps.shape[1], maps.shape[2]
    p = ops.softmax(ops.reshape(ops.transpose(maps, (0, 3, 1, 2)), (-1, 4, h * w)), axis=-1)
    p = ops.reshape(p, (-1, 4, h, w))
    xs = ops.sum(ops.sum(p, axis=2) * ops.linspace(0.0, 1.0, w), axis=-1)  # [b, 4]
    ys = ops.sum(ops.sum(p, axis=3) * ops.linspace(0.0, 1.0, h), axis=-1)
    return ops.stack([xs[:, 0], ys[:, 1], xs[:, 2], ys[:, 3]], axis=-1)


def build_vgg_regressor(size: int, width: float = 0.125, weights: str | None = None,
                        head: str = "dense") -> keras.Model:
    """The corner regressor ``[b, size, size, 3]`` raw 0..255 -> ``[b, 4]`` unit boxes (see module doc)."""
    if head not in VGG_HEADS:
        raise ValueError(f"unknown VGG box head {head!r}; expected one of {VGG_HEADS}")
    inp = keras.Input((size, size, 3), name="image", dtype="float32")
    if weights is not None or width == 1.0:
        if width != 1.0:
            raise ValueError(f"VGG16 weights need width 1.0, got width {width}")
        vgg = keras.applications.VGG16(include_top=False, weights=weights, input_shape=(size, size, 3))
        if head == "integral":
            vgg = keras.Model(vgg.input, vgg.get_layer("block4_conv3").output)
        x = vgg(keras.applications.vgg16.preprocess_input(inp))
    else:
        x = _backbone(layers.Rescaling(1 / 127.5, offset=-1.0, name="rescale")(inp), width,
                      blocks=4 if head == "integral" else 5)
    if head == "integral":
        maps = layers.Conv2D(4, 1, name="edge_maps")(x)
        out = layers.Lambda(soft_argmax_corners, output_shape=(4,), name="corners")(maps)
        return keras.Model(inp, out, name="vgg_boxes")
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(256, activation="relu", name="fc")(x)
    x = layers.Dropout(0.2, name="dropout")(x)
    out = layers.Dense(4, activation="sigmoid", name="corners")(x)
    return keras.Model(inp, out, name="vgg_boxes")


def box_loss(y_true, y_pred):
    """Per-sample ``|y - y'|_1 + 1 - GIoU(y, y')`` on unit boxes ``[b, 4]`` -> ``[b]``."""
    t = ops.cast(y_true, y_pred.dtype)
    l1 = ops.sum(ops.abs(t - y_pred), axis=-1)
    x0, y0 = ops.minimum(y_pred[:, 0], y_pred[:, 2]), ops.minimum(y_pred[:, 1], y_pred[:, 3])
    x1, y1 = ops.maximum(y_pred[:, 0], y_pred[:, 2]), ops.maximum(y_pred[:, 1], y_pred[:, 3])
    area_p = (x1 - x0) * (y1 - y0)
    area_t = (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])
    iw = ops.relu(ops.minimum(x1, t[:, 2]) - ops.maximum(x0, t[:, 0]))
    ih = ops.relu(ops.minimum(y1, t[:, 3]) - ops.maximum(y0, t[:, 1]))
    inter = iw * ih
    union = area_p + area_t - inter + 1e-7
    hull = (ops.maximum(x1, t[:, 2]) - ops.minimum(x0, t[:, 0])) * (ops.maximum(y1, t[:, 3]) - ops.minimum(y0, t[:, 1]))
    giou = inter / union - (hull - union) / (hull + 1e-7)
    return l1 + 1.0 - giou
