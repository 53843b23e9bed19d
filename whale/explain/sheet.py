"""Drawing heatmap grids and match sheets as PNG files (matplotlib, Agg), written atomically.

A *panel* is ``(title, uint8 [H, W, 3] image)``. :func:`draw_grid` lays panels out in rows;
the CLI builds the panels (:mod:`whale.explain.cli`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from whale.core.files import atomic_write


def draw_grid(rows: list[list[tuple[str, np.ndarray]]], out, title: str = "", cell: float = 2.6) -> Path:
    """Draw ``rows`` of panels (rows may differ in length) into the PNG ``out``; returns ``out``.

    Raises:
        ValueError: no panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows or not any(rows):
        raise ValueError("draw_grid: nothing to draw")
    n_cols = max(len(r) for r in rows)
    fig, axes = plt.subplots(len(rows), n_cols, figsize=(cell * n_cols, cell * len(rows) + (0.5 if title else 0)),
                             squeeze=False, layout="constrained")
    for r, row in enumerate(rows):
        for c in range(n_cols):
            ax = axes[r][c]
            ax.axis("off")
            if c < len(row):
                label, img = row[c]
                ax.imshow(np.asarray(img, np.uint8))
                ax.set_title(label, fontsize=8)
    if title:
        import textwrap

        width = int(18 * cell * n_cols / 2.6)  # characters that fit across the figure at fontsize 9
        fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.splitlines()), fontsize=9)
    try:
        return atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    finally:
        plt.close(fig)
