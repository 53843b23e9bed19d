"""The paper's heatmaps ("Siamese Network Visualization") from the branch's last BatchNormalization.

For a feature tensor ``F`` ``[h, w, c]`` (16 x 16 x 1024 for DenseNet121 at 512 px):

* red and blue: at each position, the number of the ``c`` feature maps whose maximum lies there
  (``argmax`` over positions, counted per position);
* green: at each position, the standard deviation over the ``c`` feature maps.

Each colour is divided by its maximum (so it spans 0..1), then the map is upsampled to the
image and blended over it: magenta where many maps peak, green where the maps disagree.
Which layer holds ``F`` is the registry's ``heatmap_layer`` of the branch
(:class:`whale.models.BranchDef`), never guessed from layer names here.
"""
from __future__ import annotations

import numpy as np


def heatmap(features: np.ndarray) -> np.ndarray:
    """The paper's colour map of one feature tensor.

    Args:
        features: ``[h, w, c]`` float feature maps.

    Returns:
        ``[h, w, 3]`` float32 RGB in [0, 1]: R = B = argmax count / its max, G = std over maps / its max.
    """
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 3:
        raise ValueError(f"heatmap: expected features [h, w, c], received shape {f.shape}")
    h, w, c = f.shape
    flat = f.reshape(h * w, c)
    count = np.bincount(np.argmax(flat, axis=0), minlength=h * w).astype(np.float64)
    std = flat.std(axis=1)

    def unit(a):
        top = a.max()
        return a / top if top > 0 else np.zeros_like(a)

    count, std = unit(count).reshape(h, w), unit(std).reshape(h, w)
    return np.stack([count, std, count], axis=-1).astype(np.float32)


def overlay(image: np.ndarray, heat: np.ndarray, alpha: float = 0.6) -> np.ndarray:
    """Blend ``heat`` ``[h, w, 3]`` (0..1), upsampled bilinearly, over ``image`` ``uint8 [H, W, C]``.

    Returns:
        ``uint8 [H, W, 3]``.
    """
    import cv2

    img = np.asarray(image)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    up = cv2.resize(np.asarray(heat, np.float32), (img.shape[1], img.shape[0]), interpolation=cv2.INTER_LINEAR)
    out = (1 - alpha) * img.astype(np.float32) + alpha * 255.0 * np.clip(up, 0, 1)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


class FeatureTap:
    """The registry's heatmap layer of a trained branch, as a function of raw images.

    The branch is rebuilt from the registry (:func:`whale.models.transfer_branch`, weights
    copied), so the layer name is the current registry's whatever the checkpoint's age.
    ``size``: the branch input's ``(height, width)``; ``channels``: its channels.

    Example::

        tap = FeatureTap(model.get_layer("branch"))
        maps = tap(images)          # float32 [b, S, S, C] (or [b, H, W, C]) raw 0..255 -> [b, h, w, c]
    """

    def __init__(self, branch):
        import keras

        from whale.models import branch_spec, get_branch_def, model_input_size, transfer_branch

        name, self.channels = branch_spec(branch)
        self.size = model_input_size(branch)  # (height, width)
        self.layer = get_branch_def(name).heatmap_layer
        fresh = transfer_branch(branch, self.size)
        backbone = fresh.get_layer("backbone")
        try:
            out = backbone.get_layer(self.layer).output
        except ValueError:
            raise ValueError(f"branch {name!r}: the registry's heatmap layer {self.layer!r} is not in its "
                             "backbone") from None
        self.preprocess = fresh.get_layer("preprocess")
        self.tap = keras.Model(backbone.inputs, out, name=f"{name}_heatmap_tap")

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """float32 ``[b, H, W, C]`` (:attr:`size`) raw 0..255 -> ``[b, h, w, c]`` float32 feature maps."""
        x = self.preprocess(np.asarray(images, np.float32))
        return np.asarray(self.tap(x, training=False), dtype=np.float32)
