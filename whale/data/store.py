"""Box crops of a list of images, read once and cached: what training and scoring read images from.

An :class:`ImageStore` holds the box crop of every image as ``uint8 [crop, crop, C]`` (or
``[crop_h, crop_w, C]`` for a non-square input, config key ``aspect``). ``crop_size`` is a bit
larger than the stage's image size (:func:`crop_size_for`: ``round(1.15 * S)`` per side) so that
the augmenter's random crops (76-100% of the area, see :mod:`whale.data.augment`) keep at least S
pixels a side. A photo without a box is cropped as the config's ``crop`` says
(:func:`whale.data.images.photo_box`: whole, or without its white padding).
Memory with ``cache="memory"``: ``n * crop**2 * C`` bytes, e.g. 15,697 images at S = 384
(crop 442) x 3 = 9.2 GB, at S = 512 (crop 589) 16.3 GB: more than a Kaggle kernel has.
``cache="jpeg"`` keeps each crop JPEG-encoded (quality 95, about a tenth of the bytes on
photographs) and decodes it on access; ``cache="none"`` reads the file every time.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from whale.config import CACHE_MODES
from whale.config.inputs import CROPS
from whale.data import images
from whale.imagesize import as_hw, canonical, size_label

JPEG_QUALITY = 95
"""Quality of the ``jpeg`` crop cache."""

CROP_FACTOR = 1.15
"""Stored crops are this much larger (per side) than the model input; see the module docstring."""


def crop_size_for(image_size, factor: float = CROP_FACTOR):
    """The stored crop for model input ``image_size``: ``round(factor * S)`` for a side ``S``,
    ``(round(factor * H), round(factor * W))`` for ``(H, W)``."""
    h, w = (int(round(factor * v)) for v in as_hw(image_size))
    return (h, w) if isinstance(canonical(image_size), tuple) else h


class ImageStore:
    """Box crops of a list of images, loaded lazily and cached in memory.

    ``cache``: ``"memory"`` (decoded arrays; True means this), ``"jpeg"`` (encoded bytes,
    decoded on access) or ``"none"`` (False: read the file on every access).

    ``paths``: image files. ``boxes``: one ``(x0, y0, x1, y1)`` or None (whole image) per path.
    ``flips``: one bool per path (None: all False); a flagged crop is mirrored left-right, as
    the flipped identities of ``flip_ids`` need (:meth:`whale.data.ImageSet.with_mirrors`).
    ``crop_size``: a side (square crops) or ``(height, width)``. ``crop``: what a path without a
    box is cropped to (``box``: the whole image; ``content``: without its white padding).
    ``store[i]`` -> ``uint8 [crop_h, crop_w, channels]`` (via :func:`whale.data.images.load_crop`).
    The cache is a plain dict: safe under threads (at worst a crop is decoded twice); with
    multiprocessing workers call :meth:`preload` first so forked workers inherit the crops.
    Callers must not modify the returned arrays.
    """

    def __init__(
        self,
        paths: Sequence,
        boxes: Sequence | None,
        crop_size: int,
        channels: int = 3,
        margin: float = 0.05,
        cache: bool | str = "memory",
        flips: Sequence[bool] | np.ndarray | None = None,
        crop: str = "box",
    ):
        self.paths = list(paths)
        self.flips = np.zeros(len(self.paths), bool) if flips is None else np.asarray(flips, bool).reshape(-1)
        if len(self.flips) != len(self.paths):
            raise ValueError(f"expected one flip flag per path: received {len(self.paths)} paths and "
                             f"{len(self.flips)} flags")
        self.boxes = [None] * len(self.paths) if boxes is None else list(boxes)
        if len(self.boxes) != len(self.paths):
            raise ValueError(
                f"expected one box (or None) per path: received {len(self.paths)} paths and "
                f"{len(self.boxes)} boxes"
            )
        if channels not in (1, 3):
            raise ValueError(f"channels: expected 1 or 3, received {channels!r}")
        try:
            canonical(crop_size)
        except ValueError:
            raise ValueError(f"crop_size: expected a positive integer or (height, width), received {crop_size!r}") from None
        if crop not in CROPS:
            raise ValueError(f"crop: expected one of {', '.join(CROPS)}, received {crop!r}")
        self.crop_size = canonical(crop_size)
        self.crop = crop
        self.channels = int(channels)
        self.margin = float(margin)
        mode = ("memory" if cache else "none") if isinstance(cache, bool) else cache
        if mode not in CACHE_MODES:
            raise ValueError(f"cache: expected one of {', '.join(CACHE_MODES)} (or a bool), received {cache!r}")
        self.cache = mode
        self._cache: dict[int, np.ndarray | bytes] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def _load(self, i: int) -> np.ndarray:
        crop = images.load_crop(  # looked up at call time (tests monkeypatch it)
            self.paths[i], self.boxes[i], self.crop_size, channels=self.channels, margin=self.margin, crop=self.crop
        )
        return np.ascontiguousarray(crop[:, ::-1]) if self.flips[i] else crop

    def __getitem__(self, i: int) -> np.ndarray:
        """Crop ``i``: ``uint8 [crop_h, crop_w, channels]``."""
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"image index {i} out of range for a store of {len(self)} images")
        i %= len(self)
        hit = self._cache.get(i)
        if hit is not None:
            return _decode(hit) if self.cache == "jpeg" else hit
        img = self._load(i)
        if self.cache != "none":
            self._cache[i] = _encode(img) if self.cache == "jpeg" else img
        return img

    def preload(self, progress: bool = True) -> "ImageStore":
        """Decode every crop now (no-op for cached ones); returns self."""
        indices = range(len(self))
        if progress:
            from tqdm.auto import tqdm

            indices = tqdm(indices, desc=f"loading crops {size_label(self.crop_size)}px", unit="img")
        for i in indices:
            self[i]
        return self

    @property
    def n_cached(self) -> int:
        return len(self._cache)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache."""
        return sum(len(a) if isinstance(a, bytes) else a.nbytes for a in self._cache.values())


def _encode(img: np.ndarray) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise ValueError(f"could not JPEG-encode a crop of shape {img.shape}")
    return buf.tobytes()


def _decode(data: bytes) -> np.ndarray:
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    return img[:, :, None] if img.ndim == 2 else img
