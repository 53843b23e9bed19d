"""Image sizes: a side ``S`` (a square, as the paper's inputs) or ``(height, width)``.

Every function that resizes an image (crops, augmentation, views, model inputs) takes either form and
reads it through :func:`as_hw`, so a square-only caller keeps passing ``S``.
"""
from __future__ import annotations


def as_hw(size) -> tuple[int, int]:
    """``(height, width)`` of an image size given as a side ``S`` (square) or as ``(height, width)``.

    Raises:
        ValueError: not a positive integer or a pair of them.
    """
    pair = (size, size) if isinstance(size, (int, float)) or hasattr(size, "__index__") else size
    try:
        h, w = (int(v) for v in pair)
        ok = all(int(v) == v for v in pair) and h >= 1 and w >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok or isinstance(size, bool):
        raise ValueError(f"size: expected a positive integer or (height, width), received {size!r}")
    return h, w
