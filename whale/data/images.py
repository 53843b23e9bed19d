"""Loading images and their bounding-box crops.

Images are decoded by content, not by extension: a PNG saved under a ``.jpg`` name, gray,
RGBA, palette, CMYK and 16-bit files all come back as ``uint8 [H, W, C]`` RGB (C = 3) or
gray (C = 1). EXIF orientation is applied (:func:`orientation`): a camera's photo saved sideways with
``Orientation 6`` comes back upright, as a viewer shows it, wherever a photo is read (training, scoring,
keypoints, the catalogue and its review page), and bounding boxes are in that grid.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from whale.config.inputs import CROPS
from whale.core.errors import DataError
from whale.imagesize import as_hw

Box = tuple[int, int, int, int]
EXIF_ORIENTATION = 0x0112
"""The EXIF tag saying how the stored pixels are turned for display (1 = as stored, 2..8 = flips and turns)."""
TURNED = frozenset({5, 6, 7, 8})
"""Orientations that swap width and height."""
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*")
_EXIF_SCAN = 1 << 17
"""Bytes of a JPEG's start searched for its EXIF block (APP1, at most 64 KiB, comes before the pixels)."""


def orientation(data: bytes) -> int:
    """The EXIF Orientation (1..8) of an image file's bytes; 1 when it records none, or an invalid or
    unreadable one (then the pixels are shown as stored, as browsers do)."""
    from PIL import Image

    if data[:3] == b"\xff\xd8\xff" and b"Exif\x00\x00" not in data[:_EXIF_SCAN]:
        return 1  # most JPEGs: no EXIF block, no parsing
    if data[:8] == b"\x89PNG\r\n\x1a\n" and b"eXIf" not in data:
        return 1
    try:
        with Image.open(io.BytesIO(data)) as im:
            value = im.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - not an image, or a malformed EXIF block: decoding says the rest
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def oriented(arr: np.ndarray, value: int) -> np.ndarray:
    """``arr`` (``[H, W]`` or ``[H, W, C]``, as stored) turned as EXIF Orientation ``value`` says it is shown
    (a view; Pillow's ``ImageOps.exif_transpose``)."""
    if value == 2:
        return arr[:, ::-1]
    if value == 3:
        return arr[::-1, ::-1]
    if value == 4:
        return arr[::-1]
    if value == 5:
        return arr.swapaxes(0, 1)
    if value == 6:
        return np.rot90(arr, -1)
    if value == 7:
        return np.rot90(arr.swapaxes(0, 1), 2)
    if value == 8:
        return np.rot90(arr, 1)
    return arr


def _decode_pil(data: bytes, path: Path) -> np.ndarray:
    """Decode with Pillow; raises DataError on unreadable or truncated data."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()  # raises OSError on a truncated file
            mode = im.mode
            if mode in ("RGB", "L"):
                arr = np.asarray(im)
            elif mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(im).astype(np.int64)
                arr = np.clip(arr, 0, 65535).astype(np.uint16)
            elif mode in ("LA", "La", "1"):
                arr = np.asarray(im.convert("L"))
            else:  # CMYK, P, PA, RGBA, YCbCr, ... : Pillow knows how to get RGB
                arr = np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DataError(f"{path}: unreadable or truncated image ({exc})") from None
    return np.ascontiguousarray(arr)


def _jpeg_complete(data: bytes) -> bool:
    """True if the JPEG ends with an EOI marker (ignoring trailing padding)."""
    return data.rstrip(b"\x00\r\n\t ").endswith(b"\xff\xd9")


def _png_complete(data: bytes) -> bool:
    """True if the PNG holds its IEND chunk (with its fixed CRC), trailing bytes allowed."""
    return data.rfind(b"IEND\xaeB`\x82") >= 0


def _decode(data: bytes, path: Path) -> tuple[np.ndarray, bool]:
    """Decode bytes -> (array, is_bgr). Array is uint8/uint16, [H, W] or [H, W, C]."""
    import cv2

    is_jpeg = data[:3] == b"\xff\xd8\xff"
    is_png = data[:8] == b"\x89PNG\r\n\x1a\n"
    # Some OpenCV builds return a gray-filled image for a truncated file instead of None.
    # A JPEG not ending in EOI goes to Pillow, which raises on truncation but accepts
    # trailing junk; a PNG without IEND is truncated by definition, even if Pillow (which
    # skips the checksums) would decode it.
    if is_png and not _png_complete(data):
        raise DataError(f"{path}: truncated PNG image (no IEND chunk)")
    if is_jpeg and not _jpeg_complete(data):
        return _decode_pil(data, path), False
    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None or arr.size == 0:
        return _decode_pil(data, path), False
    if is_jpeg and arr.ndim == 3 and arr.shape[2] == 4:  # CMYK/YCCK, not alpha
        return _decode_pil(data, path), False
    return arr, True


def load_image(path: str | Path, channels: int = 3) -> np.ndarray:
    """Read an image file, whatever its format, as 8-bit RGB or gray.

    Decoding is by content (a PNG named ``.jpg`` works). Alpha is dropped, 16-bit data is
    scaled to 8 bits, palette and CMYK images are converted to RGB. EXIF orientation is applied
    (module docstring): ``H`` and ``W`` are those of the photo as a viewer shows it.

    Args:
        path: the image file.
        channels: 3 for RGB, 1 for gray.

    Returns:
        ``uint8`` array ``[H, W, channels]``.

    Raises:
        DataError: the file is missing, empty, unreadable, truncated, or of an unsupported
            pixel type; the message names the file.
        ValueError: ``channels`` is not 1 or 3.
    """
    import cv2

    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels!r}")
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: image file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read image file ({exc})") from None
    if not data:
        raise DataError(f"{path}: image file is empty (0 bytes)")
    arr, is_bgr = _decode(data, path)
    if not (is_bgr and data[:4] in _TIFF_MAGIC):  # OpenCV's TIFF decoder turns the pixels itself
        arr = np.ascontiguousarray(oriented(arr, orientation(data)))  # no copy when nothing turns

    if arr.dtype == np.uint16:
        arr = ((arr.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    elif arr.dtype != np.uint8:
        raise DataError(f"{path}: unsupported pixel type {arr.dtype}; expected 8- or 16-bit integers")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 3 and arr.shape[2] == 2:  # gray + alpha
        arr = arr[:, :, 0]
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[:, :, :3]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] != 3):
        raise DataError(f"{path}: unsupported image shape {arr.shape}; expected [H, W] or [H, W, 1-4]")

    if arr.ndim == 2:
        out = arr[:, :, None] if channels == 1 else np.repeat(arr[:, :, None], 3, axis=2)
    else:
        code_rgb = cv2.COLOR_BGR2RGB if is_bgr else None
        if channels == 3:
            out = cv2.cvtColor(arr, code_rgb) if code_rgb is not None else arr
        else:
            gray = cv2.cvtColor(arr, cv2.COLOR_BGR2GRAY if is_bgr else cv2.COLOR_RGB2GRAY)
            out = gray[:, :, None]
    return np.ascontiguousarray(out, dtype=np.uint8)


WHITE = 245
"""A pixel whose every channel is at least this bright counts as padding (:func:`content_box`)."""
PADDING_SHARE = 0.98
"""A border row or column is padding when at least this share of its pixels is near-white."""


def content_box(img: np.ndarray) -> Box:
    """``(x0, y0, x1, y1)`` of ``img`` without its near-white border rows and columns.

    Photos published letterboxed on white (the 2019 humpback photos: resized to fit 300 x 300, padded
    with white) keep their subject inside this box. The whole image when (almost) nothing or
    everything is padding.

    Args:
        img: ``uint8 [H, W]`` or ``[H, W, C]``.
    """
    dark = (img < WHITE) if img.ndim == 2 else (img < WHITE).any(axis=2)
    h, w = dark.shape
    rows = np.flatnonzero(dark.mean(axis=1) > 1 - PADDING_SHARE)
    cols = np.flatnonzero(dark.mean(axis=0) > 1 - PADDING_SHARE)
    if len(rows) < 8 or len(cols) < 8:
        return (0, 0, w, h)
    return (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1)


def crop_to_box(img: np.ndarray, box: Box | None, margin: float = 0.05) -> np.ndarray:
    """Cut a box, widened by a margin, out of an image.

    Args:
        img: ``[H, W, C]`` (or ``[H, W]``) array, any dtype.
        box: ``(x0, y0, x1, y1)`` pixels, x1/y1 exclusive; None returns ``img`` unchanged.
        margin: fraction of the box width (height) added on the left and right (top and
            bottom); the result is clipped to the image.

    Returns:
        a view ``img[y0':y1', x0':x1']`` of the widened, clipped box.

    Raises:
        DataError: the box does not overlap the image.
        ValueError: negative margin.
    """
    if box is None:
        return img
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    h, w = img.shape[:2]
    x0, y0, x1, y1 = box
    mx = (x1 - x0) * margin
    my = (y1 - y0) * margin
    cx0 = max(0, int(np.floor(x0 - mx)))
    cy0 = max(0, int(np.floor(y0 - my)))
    cx1 = min(w, int(np.ceil(x1 + mx)))
    cy1 = min(h, int(np.ceil(y1 + my)))
    if cx1 <= cx0 or cy1 <= cy0:
        raise DataError(f"box {tuple(box)} does not overlap the image of size {w}x{h} (width x height)")
    return img[cy0:cy1, cx0:cx1]


def photo_box(img: np.ndarray, box: Box | None, crop: str = "box") -> Box | None:
    """The box a crop of ``img`` starts from (before its margin) under a config's ``crop`` rule.

    ``box`` when there is one (``bounding_boxes.csv``); otherwise ``None`` (the whole photo) for
    ``crop="box"`` and :func:`content_box` (the photo without its near-white padding) for
    ``crop="content"``.

    Raises:
        ValueError: ``crop`` is not one of :data:`whale.config.inputs.CROPS`.
    """
    if crop not in CROPS:
        raise ValueError(f"crop: expected one of {', '.join(CROPS)}, received {crop!r}")
    if box is not None or crop == "box":
        return box
    return content_box(img)


def load_crop(
    path: str | Path, box: Box | None, size, channels: int = 3, margin: float = 0.05, crop: str = "box"
) -> np.ndarray:
    """Load an image, crop it to its box (with margin) and resize it to ``size``.

    The aspect ratio is not preserved (as in the reference code): a square ``size`` stretches a
    wide crop; ``(height, width)`` chooses the shape. Resizing uses ``cv2.INTER_AREA``.

    Args:
        path: the image file.
        box: ``(x0, y0, x1, y1)`` or None for no bounding box (see ``crop``).
        size: output side ``S`` (square) or ``(height, width)`` in pixels.
        channels: 3 (RGB) or 1 (gray).
        margin: see :func:`crop_to_box`.
        crop: the rule for a photo without ``box`` (:func:`photo_box`): ``"box"`` keeps the
            whole photo, ``"content"`` cuts its white padding off.

    Returns:
        ``uint8`` array ``[height, width, channels]``.

    Raises:
        DataError: as :func:`load_image`, or the box lies outside the image (names the file).
    """
    import cv2

    h, w = as_hw(size)
    img = load_image(path, channels=channels)
    try:
        cut = crop_to_box(img, photo_box(img, box, crop), margin)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    out = cv2.resize(np.ascontiguousarray(cut), (w, h), interpolation=cv2.INTER_AREA)
    if out.ndim == 2:
        out = out[:, :, None]
    return out
