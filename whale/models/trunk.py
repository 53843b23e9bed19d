"""A branch cut in two: a frozen trunk computed once per photo, and the top that trains on its maps.

A pretrained branch's first layers change little when fine-tuned on a few thousand photos, and on a CPU they
cost nearly all of its arithmetic. Cut at a backbone layer (config key ``trunk.layer``, e.g. EfficientNet-Lite0's
``block6d_add``), the branch becomes

* the **trunk**: ``float32 [b, H, W, C]`` raw pixels -> ``[b, h, w, c]`` maps (the branch's preprocessing and
  its backbone up to the layer), never trained: its maps are computed once per photo and kept
  (:mod:`whale.inference.trunk`);
* the **top**: a model named ``"branch"`` taking those maps, ``float32 [b, h, w, c] -> [b, d]`` (the backbone's
  layers after the cut, with their weights, then global max pooling): what an objective trains and scores with.

The top holds no ``preprocess`` layer: :func:`whale.models.branch_spec` does not apply to it, and nothing resizes
it (a trunk run keeps one input size).
"""
from __future__ import annotations

import keras

from whale.core.errors import ConfigError


def split_branch(branch: keras.Model, layer: str) -> tuple[keras.Model, keras.Model]:
    """``(trunk, top)`` of a branch built by :func:`whale.models.build_branch`, cut after backbone ``layer``.

    The top's layers are the branch's own (same weights, shared until one of them is trained).

    Raises:
        ConfigError: ``layer`` is not a layer of the branch's backbone whose output alone feeds the rest (a cut
            inside a residual block would leave the top needing two inputs); the message names layers that fit.
    """
    backbone = branch.get_layer("backbone")
    rest = _rest(backbone, layer)
    if rest is None:
        fits = cut_points(backbone)
        raise ConfigError(f"trunk.layer: {layer!r} is not a layer of the {branch.name}'s backbone after which it "
                          f"continues from that layer's output alone; the last that fit: {', '.join(fits[-6:])} "
                          f"({len(fits)} in all)")
    cut = backbone.get_layer(layer).output
    maps = keras.Input(tuple(cut.shape[1:]), name="maps", dtype="float32")
    top = keras.Model(maps, keras.layers.GlobalMaxPooling2D(name="gmp")(rest(maps)), name="branch")
    image = branch.inputs[0]
    trunk = keras.Model(image, keras.Model(backbone.inputs, cut, name="trunk_backbone")(
        branch.get_layer("preprocess")(image)), name="trunk")
    trunk.trainable = False
    return trunk, top


def _rest(backbone: keras.Model, layer: str) -> keras.Model | None:
    """The backbone after ``layer`` as a model of that layer's output, or None where it needs more than that."""
    try:
        out = backbone.get_layer(layer).output
    except ValueError:
        return None
    try:
        return keras.Model(out, backbone.output, name="top")
    except ValueError:  # Keras: "Output ... is not connected to `inputs`"
        return None


def cut_points(backbone: keras.Model) -> list[str]:
    """The backbone's layers, in order, after which it continues from that layer's output alone."""
    return [layer.name for layer in backbone.layers[1:-1] if _rest(backbone, layer.name) is not None]


def map_shape(trunk: keras.Model) -> tuple[int, int, int]:
    """``(h, w, c)`` of the trunk's maps."""
    return tuple(int(v) for v in trunk.output_shape[1:])
