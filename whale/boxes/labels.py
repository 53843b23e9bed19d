"""Box labels and the images they belong to: a checked labels CSV, whole images at the models' size.

A labels file has ``bounding_boxes.csv``'s format (``Image,x0,y0,x1,y1``, pixels, x1/y1
exclusive); its images are looked up in the competition folder's ``train/``, then ``test/``.
Every check names the row: a duplicate image, inverted or empty corners, a missing image, a
box that leaves the image.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.data.competition import TEST_DIR, TRAIN_DIR, read_box_rows, safe_image_path
from whale.data.images import EXIF_ORIENTATION, TURNED, load_image
from whale.core.errors import DataError
from whale.core.progress import progress_bar


@dataclass(frozen=True)
class BoxLabels:
    """Labelled images: ``names`` and ``paths`` ``[n]``, ``boxes`` ``[n, 4]`` int64 pixels, ``sizes`` ``[n, 2]`` (w, h)."""

    names: list[str]
    paths: list[Path]
    boxes: np.ndarray
    sizes: np.ndarray


def find_image(data_dir: Path, name: str) -> Path | None:
    """``data_dir/train/name`` or ``data_dir/test/name``, whichever exists, else None."""
    for folder in (TRAIN_DIR, TEST_DIR):
        path = safe_image_path(Path(data_dir) / folder, name)
        if path.is_file():
            return path
    return None


def image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of an image file as a viewer shows it (EXIF orientation applied, as
    :func:`whale.data.images.load_image` does), read from its header."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            w, h = int(im.size[0]), int(im.size[1])
            turned = im.getexif().get(EXIF_ORIENTATION, 1) in TURNED
    except (UnidentifiedImageError, OSError) as exc:
        raise DataError(f"{path}: unreadable image ({exc})") from None
    return (h, w) if turned else (w, h)


def read_labels(labels_csv, data_dir) -> BoxLabels:
    """Read and check a labels CSV against the images of ``data_dir``.

    Raises:
        DataError: what :func:`whale.data.read_boxes` refuses (duplicate image, non-integer,
            negative or inverted corners), an image found in neither ``train/`` nor ``test/``,
            or a box reaching past the image's width or height; the message names the row.
    """
    boxes, where = read_box_rows(labels_csv)
    if not boxes:
        raise DataError(f"{labels_csv}: no labelled boxes (expected rows Image,x0,y0,x1,y1)")
    names, paths, sizes = [], [], []
    for name, box in boxes.items():
        try:
            path = find_image(Path(data_dir), name)
        except DataError as exc:
            raise DataError(f"{where[name]}: {exc}") from None
        if path is None:
            raise DataError(f"{where[name]}: image {name!r} not found in {Path(data_dir) / TRAIN_DIR} "
                            f"or {Path(data_dir) / TEST_DIR}")
        w, h = image_size(path)
        if box[2] > w or box[3] > h:
            raise DataError(f"{where[name]}: box {box} of {name!r} reaches outside the image of "
                            f"{w}x{h} pixels (width x height); expected x1 <= {w} and y1 <= {h}")
        names.append(name)
        paths.append(path)
        sizes.append((w, h))
    return BoxLabels(names, paths, np.array([boxes[n] for n in names], dtype=np.int64),
                     np.array(sizes, dtype=np.int64))


def load_inputs(paths, size: int, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Whole images resized to the box models' square input (aspect not kept, as boxes are unit).

    Returns:
        ``(images uint8 [n, size, size, 3] RGB, sizes int64 [n, 2] original (width, height))``.
    """
    import cv2

    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    sizes = np.empty((len(paths), 2), dtype=np.int64)
    for i, p in enumerate(progress_bar(paths, total=len(paths), desc="images", enabled=progress)):
        img = load_image(p, channels=3)
        sizes[i] = (img.shape[1], img.shape[0])
        out[i] = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
    return out, sizes
