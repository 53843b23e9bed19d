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


def canonical(size):
    """``size`` checked and kept in its form: an ``int`` side, or a ``(height, width)`` tuple of ints."""
    h, w = as_hw(size)
    return (h, w) if isinstance(size, (tuple, list)) else h


def size_label(size) -> str:
    """``"64"`` for a side, ``"64x128"`` for ``(height, width)`` (log lines: ``f"{size_label(s)}px"``)."""
    h, w = as_hw(size)
    return f"{h}x{w}" if isinstance(size, (tuple, list)) else str(h)


def input_size(image_size: int, aspect: float = 1.0) -> tuple[int, int]:
    """``(height, width)`` of the model input of a stage of side ``image_size`` under a run's ``aspect``
    (width / height): ``(S, round(S * aspect))``, so ``aspect: 2`` at ``image_size: 64`` is 64 x 128."""
    return int(image_size), max(1, int(round(int(image_size) * float(aspect))))
