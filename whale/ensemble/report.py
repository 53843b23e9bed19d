"""What ``ensemble.py --tune`` leaves beside the submission: MAP@5 per threshold as CSV and as a plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from whale.core.files import atomic_write


def write_threshold_csv(path, grid, maps) -> Path:
    """``threshold,map5`` rows, written atomically."""
    path = Path(path)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write("threshold,map5\n")
            for t, m in zip(grid, maps):
                f.write(f"{float(t)!r},{float(m)!r}\n")

    atomic_write(path, write)
    return path


def plot_thresholds(path, grid, maps, chosen_t, val_share, test_share) -> Path:
    """PNG with two panels: validation MAP@5 vs threshold (chosen one marked), and the share of
    ``new_whale`` at rank 1 on validation and test. Written atomically with the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    grid = np.asarray(grid)
    i = int(np.argmin(np.abs(grid - chosen_t)))
    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    a.plot(grid, maps, lw=1.2)
    a.axvline(chosen_t, color="r", ls="--", lw=1)
    a.plot([grid[i]], [maps[i]], "ro", label=f"t = {chosen_t:.5g}, MAP@5 = {maps[i]:.4f}")
    a.set_ylabel("validation MAP@5")
    a.legend(loc="lower left")
    a.grid(alpha=0.3)
    b.plot(grid, val_share, label="validation")
    b.plot(grid, test_share, label="test")
    b.axvline(chosen_t, color="r", ls="--", lw=1)
    b.set_xlabel("threshold t")
    b.set_ylabel("share with new_whale at rank 1")
    b.legend(loc="upper left")
    b.grid(alpha=0.3)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path
