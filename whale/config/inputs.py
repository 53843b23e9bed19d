"""The run keys that shape what a model sees of a photo: ``crop`` and ``aspect`` (their checks).

``crop``: what a photo without a bounding box is cropped to: ``box`` (the whole photo, as the
paper), or ``content`` (the photo without its near-white border: photos letterboxed on white, such
as the 2019 humpback photos; :func:`whale.data.images.content_box`). A photo with a box in
``bounding_boxes.csv`` is cropped to its box either way.

``aspect``: the model input's width over its height, a stage's ``image_size`` being the height
(:func:`whale.imagesize.input_size`: ``aspect: 2`` at ``image_size: 64`` is a 64 x 128 input;
1 = square, the paper's). Crops are stored, augmented, scored and explained at that shape.
"""
from __future__ import annotations

from typing import Any

from whale.config.checker import Checker
from whale.imagesize import input_size

CROPS = ("box", "content")
"""What a crop cuts out of a photo without a bounding box (:func:`whale.data.images.photo_box`)."""
ASPECTS = (0.25, 4.0)
"""``aspect`` bounds (input width / height): a 2:1 fluke fits well inside."""


def parse_crop_aspect(c: Checker, crop: Any, aspect: Any, image_sizes, sizes: tuple[int, int]) -> tuple[str, float]:
    """``(crop, aspect)`` checked; every stage's input width (``image_sizes`` x ``aspect``) must lie in
    ``sizes`` (the image sizes a stage may have), or the error names ``aspect`` and the stage."""
    choice = c.choice(crop, "crop", CROPS)
    ratio = c.number(aspect, "aspect", float, *ASPECTS)
    for i, size in enumerate(image_sizes):
        if not sizes[0] <= input_size(size, ratio)[1] <= sizes[1]:
            raise c.fail("aspect", f"an input width image_size x aspect in [{sizes[0]}, {sizes[1]}] "
                         f"(stages[{i}].image_size is {size})", aspect)
    return choice, ratio
