"""The paper's image augmentation (albumentations), deterministic given a numpy Generator.

Paper, "Image Augmentations": shear, rotation, flipping, contrast, Gaussian noise, blurring,
colour augmentations, graying and random crops; in detail:

1. 5% of images to gray scale (the estimated share of gray photos in the data);
2. JPEG compression at different qualities (the data has many JPEG artifacts);
3. colour balance / brightness changes, and blur / out-of-focus / fuzzy distortions;
4. noise, as in low light or high ISO photos;
5. random skew within 20 degrees, emulating a skewed horizon.

Mapping onto albumentations 2.0.8 (``build_augmenter``), in the order applied:

- random crop: ``RandomResizedCrop`` keeping 76-100% of the area (aspect 0.9-1.1 times the
  input's) and resizing to ``image_size``. The inputs are box crops of side ``crop_size = round(1.15 * image_size)``
  (see :func:`whale.data.store.crop_size_for`); ``1 / 1.15**2 = 0.756``, so even the smallest crop
  still has at least ``image_size`` pixels a side and is never upsampled.
- shear / rotation / skew: ``Affine`` with rotation within +-15 degrees, shear within
  +-20 degrees (the paper's "skew within 20 degrees") and scale 0.9-1.1;
- rare horizontal flip (p = 0.02 by default). A flipped fluke is the *mirror image* of the
  whale's pattern, i.e. not a view that the camera could produce of the same animal; since the
  two sides of a pair are augmented independently, a flip makes a positive pair disagree in
  handedness. So flips stay rare (the paper lists them; it does not say how often).
- 5% to gray (``ToGray``, 3 channels kept); skipped for 1-channel input;
- brightness / contrast (``RandomBrightnessContrast``) and colour balance (``HueSaturationValue``,
  3 channels only);
- one of ``Blur`` / ``GaussianBlur`` / ``Defocus`` (weights 1 : 1 : 0.25, as Defocus is slow;
  kernel sizes grow with ``image_size``), on 25% of images;
- ``GaussNoise``;
- ``ImageCompression`` (JPEG, quality 30-95): last, as in a camera/upload pipeline.

``strength`` scales every magnitude (angles, limits, noise, lowest JPEG quality, crop area);
``strength = 0`` gives :func:`build_plain`.

Sizes: ``image_size`` is a side ``S`` (square outputs, the paper's) or ``(height, width)``
(:func:`whale.imagesize.as_hw`; a run's ``aspect``, e.g. 64 x 128 for 2:1 flukes): every
transform keeps that shape, the random crops and the views keep its aspect.

``style="koch"`` (:class:`KochAffine`) replaces all of this by the affine distortions of Koch
et al. (2015) for Omniglot: rotation within +-10 degrees, shear within +-0.3 rad, scale 0.8-1.2
and translation within +-2 px on each axis, each of the four included with probability 0.5,
composed into one ``cv2.warpAffine`` (one interpolation) with replicated borders; no photometric
change, no crop. It suits line drawings on a plain background, not photographs.

Determinism: albumentations 2 keeps its own random state in every transform, and
``Compose.set_random_seed`` hands the *same* seed to every transform, which makes their
"apply with probability p" draws identical (all transforms with the same p fire together). The
augmenter instead draws one seed per image from the caller's ``np.random.Generator`` and gives
every transform of the pipeline the same two generators made from it (a numpy ``Generator``
and a ``random.Random``, the pair albumentations' ``set_random_seed`` makes): the transforms
draw from them one after the other, so their draws are independent and the output depends
only on the caller's generator state. (Seeding each transform apart, as this module did
before, built 24 generator pairs per image, which cost ~2x the augmentation itself at 64 px.)
Each thread gets its own copy of the pipeline (``threading.local``) so concurrent calls from a
multi-worker ``keras.utils.PyDataset`` cannot interleave random states.
"""
from __future__ import annotations

import random
import threading
from typing import Callable

import cv2
import numpy as np

from whale.config import AUGMENT_STYLES, TTA_VIEWS
from whale.imagesize import as_hw, canonical

AugmentFn = Callable[[np.ndarray, np.random.Generator], np.ndarray]
STYLES = AUGMENT_STYLES
"""Augmentation styles: the paper's photo pipeline (:class:`Augmenter`) or :class:`KochAffine`."""


def _odd(x: float, lo: int = 3) -> int:
    k = max(lo, int(round(x)))
    return k if k % 2 == 1 else k + 1


def _check_image(image: np.ndarray, channels: int) -> None:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3:
        raise ValueError(
            f"expected a uint8 image [H, W, {channels}], received "
            f"{type(image).__name__} {getattr(image, 'dtype', '?')} {getattr(image, 'shape', '?')}"
        )
    if image.shape[2] != channels:
        raise ValueError(f"expected {channels} channel(s), received an image of shape {image.shape}")


def _resize(image: np.ndarray, size) -> np.ndarray:
    h, w = image.shape[:2]
    th, tw = as_hw(size)
    if (h, w) == (th, tw):
        out = image
    else:
        interp = cv2.INTER_AREA if th < h and tw < w else cv2.INTER_LINEAR
        out = cv2.resize(image, (tw, th), interpolation=interp)
    if out.ndim == 2:
        out = out[:, :, None]
    return np.ascontiguousarray(out)


class PlainResize:
    """Resize only (validation, test, scoring): ``(uint8 [H, W, C], rng=None) -> uint8 [S, S, C]``
    (``[h, w, C]`` for ``image_size=(h, w)``)."""

    def __init__(self, image_size, channels: int = 3):
        self.image_size = canonical(image_size)
        self.channels = int(channels)

    def __call__(self, image: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        _check_image(image, self.channels)
        return _resize(image, self.image_size)

    def __repr__(self) -> str:
        return f"PlainResize(image_size={self.image_size}, channels={self.channels})"


def build_plain(image_size, channels: int = 3) -> PlainResize:
    """Resize only: a callable ``(uint8 [H, W, C], rng=None) -> uint8 [S, S, C]`` (``image_size``: ``S`` or ``(h, w)``)."""
    return PlainResize(image_size, channels)


VIEW_WINDOW = 0.9
"""Side of the shifted and zoomed views' window, as a share of the largest window of the output's aspect."""
VIEW_GAIN = 1.15
"""Brightness factor of the ``bright`` view (``dark``: its inverse)."""


class View(PlainResize):
    """One deterministic test-time view: ``(uint8 [H, W, C], rng=None) -> uint8 [S, S, C]``.

    ``plain``: the whole crop resized (what scoring always uses); ``shift_left`` /
    ``shift_right`` / ``zoom``: a window of the output's aspect, :data:`VIEW_WINDOW` of the largest
    such window of the crop (a square output: 0.9 of the crop's shorter side), at its left edge,
    right edge or centre (rows centred), resized; ``bright`` / ``dark``: the plain view times
    :data:`VIEW_GAIN` or divided by it, clipped to 0..255.
    """

    def __init__(self, name: str, image_size, channels: int = 3):
        if name not in ("plain",) + TTA_VIEWS:
            raise ValueError(f"view: expected one of plain, {', '.join(TTA_VIEWS)}, received {name!r}")
        super().__init__(image_size, channels)
        self.name = name

    def __call__(self, image: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        _check_image(image, self.channels)
        h, w = image.shape[:2]
        if self.name in ("shift_left", "shift_right", "zoom"):
            th, tw = as_hw(self.image_size)
            mw = max(1, int(round(VIEW_WINDOW * min(w, h * tw / th))))
            mh = max(1, int(round(VIEW_WINDOW * min(h, w * th / tw))))
            top = (h - mh) // 2
            left = {"shift_left": 0, "shift_right": w - mw, "zoom": (w - mw) // 2}[self.name]
            image = image[top:top + mh, left:left + mw]
        out = _resize(image, self.image_size)
        if self.name in ("bright", "dark"):
            gain = VIEW_GAIN if self.name == "bright" else 1.0 / VIEW_GAIN
            out = np.clip(np.rint(out.astype(np.float32) * gain), 0, 255).astype(np.uint8)
        return out

    def __repr__(self) -> str:
        return f"View({self.name!r}, image_size={self.image_size}, channels={self.channels})"


def build_view(name: str, image_size, channels: int = 3) -> View:
    """Test-time view ``name`` (``plain`` or one of :data:`whale.config.TTA_VIEWS`) as a callable
    ``(uint8 [H, W, C], rng=None) -> uint8 [S, S, C]``; see :class:`View`."""
    return View(name, image_size, channels)


def _compose(image_size, channels: int, strength: float, flip_p: float):
    import albumentations as A

    s = float(strength)
    h, w = as_hw(image_size)
    blur_k = _odd(3 + min(h, w) / 128)  # 3 at 64 px, 5 at 224-384, 7 at 512, 11 at 1024
    min_area = max(0.5, 1.0 - 0.244 * s)
    aspect = w / h  # the stored crop's too (whale.data.store.crop_size_for keeps it)
    transforms = [
        A.RandomResizedCrop(size=(h, w), scale=(min_area, 1.0), ratio=(0.9 * aspect, aspect / 0.9), p=1.0),
        A.Affine(
            rotate=(-15 * s, 15 * s),
            shear=(-20 * s, 20 * s),
            scale=(1 - 0.1 * s, 1 + 0.1 * s),
            border_mode=cv2.BORDER_REFLECT_101,
            p=0.5,
        ),
        A.HorizontalFlip(p=flip_p),
    ]
    if channels == 3:
        transforms.append(A.ToGray(num_output_channels=3, p=0.05))
    transforms.append(A.RandomBrightnessContrast(brightness_limit=0.2 * s, contrast_limit=0.2 * s, p=0.5))
    if channels == 3:
        transforms.append(
            A.HueSaturationValue(
                hue_shift_limit=10 * s, sat_shift_limit=20 * s, val_shift_limit=10 * s, p=0.3
            )
        )
    transforms += [
        A.OneOf(
            [
                A.Blur(blur_limit=(3, blur_k), p=1.0),
                A.GaussianBlur(blur_limit=(3, blur_k), sigma_limit=(0.3, 0.3 + s * blur_k / 4), p=1.0),
                # Defocus costs ~100x a Blur (20 ms at 256 px): a smaller share of the OneOf
                A.Defocus(radius=(1, max(1, blur_k // 2)), alias_blur=(0.1, 0.3), p=0.25),
            ],
            p=0.25,
        ),
        A.GaussNoise(std_range=(0.01, max(0.01, 0.05 * s)), p=0.25),
        A.ImageCompression(quality_range=(int(max(5, 100 - 70 * s)), 95), p=0.5),
    ]
    return A.Compose(transforms, p=1.0)


def _flatten(node) -> list:
    """All transforms of a Compose tree (composes included), depth first."""
    out = [node]
    for child in getattr(node, "transforms", None) or ():
        out.extend(_flatten(child))
    return out


class Augmenter:
    """Training augmentation: ``aug(uint8 [H, W, C], rng) -> uint8 [S, S, C]``.

    Deterministic given the state of ``rng`` (a ``np.random.Generator``); draws from it.
    Picklable (for multiprocessing workers); each thread builds its own pipeline.
    """

    def __init__(self, image_size, channels: int = 3, strength: float = 1.0, flip_p: float = 0.02):
        if channels not in (1, 3):
            raise ValueError(f"channels: expected 1 or 3, received {channels!r}")
        if not strength >= 0:
            raise ValueError(f"strength: expected a number >= 0, received {strength!r}")
        if not 0.0 <= flip_p <= 1.0:
            raise ValueError(f"flip_p: expected a probability in [0, 1], received {flip_p!r}")
        self.image_size = canonical(image_size)
        self.channels = int(channels)
        self.strength = float(strength)
        self.flip_p = float(flip_p)
        self._local = threading.local()

    def _pipeline(self):
        pipe = getattr(self._local, "pipe", None)
        if pipe is None:
            compose = _compose(self.image_size, self.channels, self.strength, self.flip_p)
            pipe = (compose, _flatten(compose))
            self._local.pipe = pipe
        return pipe

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_image(image, self.channels)
        compose, nodes = self._pipeline()
        seed = int(rng.integers(0, 2**63 - 1))
        draws, py_draws = np.random.default_rng(seed), random.Random(seed)
        for node in nodes:  # one stream for all (Compose.set_random_seed: one seed for all)
            node.random_generator, node.py_random = draws, py_draws
        out = compose(image=image)["image"]
        if out.ndim == 2:
            out = out[:, :, None]
        if out.shape != (*as_hw(self.image_size), self.channels):
            out = _resize(out, self.image_size)
        return np.ascontiguousarray(out, dtype=np.uint8)

    def __getstate__(self):
        d = self.__dict__.copy()
        d.pop("_local", None)
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._local = threading.local()

    def __repr__(self) -> str:
        return (
            f"Augmenter(image_size={self.image_size}, channels={self.channels}, "
            f"strength={self.strength}, flip_p={self.flip_p})"
        )


class KochAffine:
    """Koch et al.'s affine distortions: ``aug(uint8 [H, W, C], rng) -> uint8 [S, S, C]``.

    The image is resized to ``S x S`` (or ``(h, w)``), then warped once by ``T(t) R(theta) Sh(rho) Sc(s)``
    about its centre, each factor present with probability 0.5: ``theta`` in +-10 degrees,
    ``rho_x, rho_y`` in +-0.3 (shear), ``s_x, s_y`` in 0.8-1.2, ``t_x, t_y`` in +-2 px.
    ``strength`` scales the ranges (0 = identity). Deterministic given ``rng``'s state.
    """

    def __init__(self, image_size, channels: int = 3, strength: float = 1.0):
        if channels not in (1, 3):
            raise ValueError(f"channels: expected 1 or 3, received {channels!r}")
        if not strength >= 0:
            raise ValueError(f"strength: expected a number >= 0, received {strength!r}")
        self.image_size, self.channels, self.strength = canonical(image_size), int(channels), float(strength)

    def matrix(self, rng: np.random.Generator) -> np.ndarray:
        """The ``[2, 3]`` float64 affine map of one draw (pixel coordinates of the ``S x S`` image)."""
        s, (h, w) = self.strength, as_hw(self.image_size)
        on = rng.random(4) < 0.5
        theta = np.deg2rad(rng.uniform(-10, 10) * s) if on[0] else 0.0
        rho = rng.uniform(-0.3, 0.3, 2) * s if on[1] else np.zeros(2)
        scale = 1 + rng.uniform(-0.2, 0.2, 2) * s if on[2] else np.ones(2)
        shift = rng.uniform(-2, 2, 2) * s if on[3] else np.zeros(2)
        c, si = np.cos(theta), np.sin(theta)
        a = np.array([[c, -si], [si, c]]) @ np.array([[1, rho[0]], [rho[1], 1]]) @ np.diag(scale)
        centre = np.array([(w - 1) / 2, (h - 1) / 2])
        return np.hstack([a, (centre - a @ centre + shift)[:, None]])

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_image(image, self.channels)
        img = _resize(image, self.image_size)
        out = cv2.warpAffine(img, self.matrix(rng), as_hw(self.image_size)[::-1],
                             flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        if out.ndim == 2:
            out = out[:, :, None]
        return np.ascontiguousarray(out, dtype=np.uint8)

    def __repr__(self) -> str:
        return f"KochAffine(image_size={self.image_size}, channels={self.channels}, strength={self.strength})"


def build_augmenter(
    image_size, channels: int = 3, strength: float = 1.0, flip_p: float = 0.02, style: str = "paper"
) -> AugmentFn:
    """The training augmentation as ``aug(uint8 [H, W, C], rng) -> uint8 [S, S, C]``.

    ``image_size``: output side S, or ``(height, width)``. ``channels``: 1 (gray; colour transforms skipped) or 3 (RGB).
    ``strength``: multiplies every magnitude; 0 returns :func:`build_plain`. ``flip_p``:
    probability of a horizontal flip (rare on purpose, see the module docstring; paper style
    only). ``style``: ``"paper"`` (:class:`Augmenter`) or ``"koch"`` (:class:`KochAffine`).
    The result depends only on the image and the state of ``rng``, which it advances.
    """
    if style not in STYLES:
        raise ValueError(f"style: expected one of {', '.join(STYLES)}, received {style!r}")
    if strength == 0:
        return build_plain(image_size, channels)
    if style == "koch":
        return KochAffine(image_size, channels, strength)
    return Augmenter(image_size, channels, strength, flip_p)
