"""A learned embedding of the trailing edge's outline (:mod:`whale.outline.curve`'s curves).

A small 1-D ConvNet reads each curve as two channels, its height and its slope after Gaussian smoothing
(:func:`curve_inputs`), and is trained as a classifier of the training individuals with a cosine-margin softmax
(CosFace: scale :data:`SCALE`, margin :data:`MARGIN`) on curves shifted by up to :data:`SHIFT` points, their height
scaled by 0.8-1.2 and noised, Adam at 1e-3, batches of 128 (the training's length counted in batches, as galleries
differ in size). Its 128-d output, unit length, is the curve's embedding; two curves' similarity their cosine. On a
CPU a batch takes a few tens of milliseconds.

:func:`choose_steps` picks the training's length on the training photos alone: the individuals split in two halves by
a hash of their id, the net trained on one half, every photo of the other half with a second photo left out against
that half (the share whose individual has a photo among the best 20).
"""
from __future__ import annotations

import hashlib
import json
import zlib
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCALE, MARGIN, SHIFT, BATCH = 20.0, 0.2, 8, 128
CHUNK = 250
CHECKED = tuple(range(CHUNK * 2, 4001, CHUNK * 2))
"""The training lengths in batches :func:`choose_steps` compares."""


@dataclass(frozen=True)
class OutlineConfig:
    """``steps``: the training's length in batches of :data:`BATCH` (2,000: chosen on split seed 0's training photos
    by :func:`choose_steps`, docs/humpback.md "The trailing edge, learned"); ``seed``: the net's initialisation and
    augmentation draws."""

    steps: int = 2000
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def config_hash(self) -> str:
        """12 hex digits naming the settings and the fixed recipe of this module."""
        payload = {**self.to_dict(), "recipe": [SCALE, MARGIN, SHIFT, BATCH, "conv1d-4x2-128"]}
        return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def load_outline_config(path=None, overrides: dict | None = None) -> OutlineConfig:
    """The settings of ``path`` (YAML; None: the defaults) with ``overrides`` (``--set KEY=VALUE``).

    Raises:
        ConfigError: an unknown key or a value that is not a positive integer, naming the file.
    """
    import yaml

    from whale.core.errors import ConfigError

    source = str(path) if path else "<outline defaults>"
    raw: Any = yaml.safe_load(Path(path).read_text()) if path else {}
    raw = {**(raw or {}), **(overrides or {})}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of settings, got {type(raw).__name__}")
    fields = set(OutlineConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {unknown}; expected {sorted(fields)}")
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "steps" else 0):
            raise ConfigError(f"{source}: {key} must be a {'positive' if key == 'steps' else 'non-negative'} "
                              f"integer, got {value!r}")
    return OutlineConfig(**raw)


def curve_inputs(curves: np.ndarray) -> np.ndarray:
    """``[n, points, 2] float32``: each curve's height (x 5) and its slope after smoothing by 2 points (x 50)."""
    from scipy.ndimage import gaussian_filter1d

    c = curves.astype(np.float64)
    slope = np.gradient(gaussian_filter1d(c, 2, axis=1), axis=1)
    return np.stack([c * 5, slope * 50], -1).astype(np.float32)


def warped(curves: np.ndarray, warp: float, rng: np.random.Generator) -> np.ndarray:
    """``curves`` ``[n, points]`` each read along a random monotone reparametrisation of its span, ``t + a t (1 - t)``
    with ``a`` uniform in ``[-warp, warp]`` (``warp`` < 1): one tip's half stretched and the other's shrunk, as a fluke
    seen from one side is; the tips stay where they are."""
    t = np.linspace(0.0, 1.0, curves.shape[1])
    a = rng.uniform(-warp, warp, (len(curves), 1))
    w = (t + a * t * (1 - t)) * (curves.shape[1] - 1)
    lo = np.minimum(np.floor(w).astype(np.int64), curves.shape[1] - 2)
    f = w - lo
    rows = np.arange(len(curves))[:, None]
    return (curves[rows, lo] * (1 - f) + curves[rows, lo + 1] * f).astype(np.float32)


def _augment(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    shifts = rng.integers(-SHIFT, SHIFT + 1, len(x))
    x = np.stack([np.roll(v, s, axis=0) for v, s in zip(x, shifts)])
    x[:, :, 0] *= rng.uniform(0.8, 1.2, (len(x), 1))
    return (x + rng.normal(0, 0.02, x.shape)).astype(np.float32)


def _networks(points: int, n_classes: int):
    import keras
    from keras import layers, ops

    class CosineMargin(layers.Layer):
        def build(self, shapes):
            self.w = self.add_weight(shape=(shapes[0][-1], n_classes), initializer="glorot_uniform")

        def call(self, inputs):
            e, y = inputs
            cos = ops.normalize(e, axis=-1) @ ops.normalize(self.w, axis=0)
            return SCALE * (cos - MARGIN * ops.one_hot(y, n_classes))

    inp = keras.Input((points, 2))
    x = inp
    for filters, k in ((32, 7), (64, 5), (128, 5), (128, 3)):
        for _ in range(2):
            x = layers.Conv1D(filters, k, padding="same", use_bias=False)(x)
            x = layers.Activation("relu")(layers.BatchNormalization()(x))
        x = layers.MaxPooling1D(2)(x)
    embed = keras.Model(inp, layers.Dense(128)(layers.Dropout(0.3)(layers.Flatten()(x))))
    y = keras.Input((), dtype="int32")
    train = keras.Model([inp, y], CosineMargin()([embed(inp), y]))
    train.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return embed, train


def train_embedding(curves: np.ndarray, labels, steps: int, seed: int = 0, on_chunk=None, progress: bool = False,
                    warp: float = 0.0):
    """The embedding net trained ``steps`` batches on ``curves`` ``[n, points]`` of individuals ``labels`` (the
    curves in shuffled passes, each batch freshly augmented); ``on_chunk(steps done, embed)`` every :data:`CHUNK`;
    ``progress``: a bar over the chunks; ``warp``: each training curve also :func:`warped` (0: not)."""
    import keras

    from whale.core.progress import progress_bar

    keras.utils.set_random_seed(seed)
    classes = {c: i for i, c in enumerate(sorted(set(map(str, labels))))}
    y = np.array([classes[str(c)] for c in labels], np.int32)
    x = curve_inputs(curves)
    embed, train = _networks(x.shape[1], len(classes))
    rng = np.random.default_rng(seed)
    order = np.zeros(0, np.int64)
    for done in progress_bar(range(CHUNK, steps + CHUNK, CHUNK), desc="outline net, batches / 250", enabled=progress):
        n = (min(done, steps) - (done - CHUNK)) * BATCH
        while len(order) < n:
            order = np.r_[order, rng.permutation(len(x))]
        take, order = order[:n], order[n:]
        batch = curve_inputs(warped(curves[take], warp, rng)) if warp else x[take]
        train.fit([_augment(batch, rng), y[take]], y[take], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        if on_chunk is not None:
            on_chunk(min(done, steps), embed)
    return embed


def save_embedding(embed, path, flag: str = "--out") -> Path:
    """The embedding net's weights written to ``path`` (``.npz``, atomically; ``flag``: the option that chose where,
    named when the write is refused); :func:`load_embedding` builds the net again from them."""
    from whale.core.files import atomic_write

    weights = [np.asarray(w) for w in embed.get_weights()]
    points = int(embed.inputs[0].shape[1])
    return atomic_write(path, lambda tmp: np.savez(tmp, *weights, points=np.int64(points)), flag=flag)


def load_embedding(path):
    """The embedding net kept by :func:`save_embedding` in ``path``.

    Raises:
        DataError: ``path`` is not such a file (naming it).
    """
    from whale.core.errors import DataError

    try:
        with np.load(path) as z:
            points = int(z["points"])
            weights = [z[f"arr_{i}"] for i in range(len(z.files) - 1)]
        embed, _ = _networks(points, 2)
        embed.set_weights(weights)
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: not an outline net's weights ({e}); remove it to train the net again") from e
    return embed


def embeddings(embed, curves: np.ndarray) -> np.ndarray:
    """``[n, 128] float32``, unit length."""
    e = np.asarray(embed.predict(curve_inputs(curves), batch_size=512, verbose=0), np.float32)
    return e / (np.linalg.norm(e, axis=1, keepdims=True) + 1e-12)


def left_out_top20(e: np.ndarray, labels: np.ndarray) -> float:
    """Each photo of an individual with two or more against the others: the share with its individual in the best 20."""
    count = Counter(labels.tolist())
    q = np.flatnonzero([count[x] >= 2 for x in labels])
    s = e[q] @ e.T
    s[np.arange(len(q)), q] = -np.inf
    best = labels[np.argsort(-s, axis=1, kind="stable")[:, :20]]
    return float((best == labels[q, None]).any(axis=1).mean())


def choose_steps(curves: np.ndarray, labels, seed: int = 0, warp: float = 0.0,
                 checked: tuple[int, ...] = CHECKED) -> tuple[int, dict[int, float]]:
    """``(batches, {batches: held-out half's top-20})``: the module docstring's choice among ``checked`` (multiples
    of :data:`CHUNK`), on training photos only; ``warp``: :func:`train_embedding`'s."""
    labels = np.asarray(labels, str)
    half = np.array([zlib.crc32(c.encode()) % 2 for c in labels])
    held = {}

    def on_chunk(done, embed):
        if done in checked:
            held[done] = round(left_out_top20(embeddings(embed, curves[half == 1]), labels[half == 1]), 4)

    train_embedding(curves[half == 0], labels[half == 0], max(checked), seed, on_chunk=on_chunk, warp=warp)
    return max(held, key=lambda k: (held[k], -k)), held
