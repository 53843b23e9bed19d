"""Plots a person would rather look at than read: the training curves of a run.

``plot_training(log_csv, out_png)`` draws, per epoch, the training loss and accuracy, the
validation MAP@5 (at the end of each mining interval) and the schedule's K and learning rate,
with the stage boundaries marked. matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

import csv
from pathlib import Path

from whale.core.files import atomic_write


def _column(rows: list[dict], name: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in rows:
        value = row.get(name, "")
        if value not in ("", None):
            xs.append(int(row["epoch"]))
            ys.append(float(value))
    return xs, ys


def plot_training(log_csv, out_png) -> Path | None:
    """Write ``out_png`` from a run's ``log.csv``; returns its path (None when the log is empty)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(log_csv, newline="", encoding="utf-8-sig") as f:  # a BOM (a spreadsheet's save) is no column name
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    fig, (ax_loss, ax_map, ax_k) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    ax_loss.plot(*_column(rows, "loss"), label="loss (binary cross-entropy)")
    ax_loss.plot(*_column(rows, "accuracy"), label="pair accuracy")
    ax_loss.set_ylabel("training")
    ax_loss.legend(loc="best", fontsize=8)
    xs, ys = _column(rows, "val_map5")
    ax_map.plot(xs, ys, "o-", color="tab:green")
    if ys:
        best = max(range(len(ys)), key=ys.__getitem__)
        ax_map.annotate(f"best {ys[best]:.3f}", (xs[best], ys[best]), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=8)
    ax_map.margins(y=0.2)
    ax_map.set_ylabel("validation MAP@5")
    ax_k.semilogy(*_column(rows, "k"), color="tab:red", label="K (miner noise scale)")
    ax_lr = ax_k.twinx()
    ax_lr.semilogy(*_column(rows, "lr"), color="tab:purple", linestyle="--", label="learning rate")
    ax_k.set_ylabel("K", color="tab:red")
    ax_lr.set_ylabel("learning rate", color="tab:purple")
    ax_k.set_xlabel("epoch")
    stages = [int(r["epoch"]) for prev, r in zip(rows, rows[1:]) if r["stage"] != prev["stage"]]
    for ax in (ax_loss, ax_map, ax_k):
        for epoch in stages:
            ax.axvline(epoch - 0.5, color="gray", linewidth=0.6, linestyle=":")
    fig.suptitle(f"{Path(log_csv).parent.name}: stages separated by dotted lines", fontsize=10)
    fig.tight_layout()
    out_png = Path(out_png)
    try:
        atomic_write(out_png, lambda tmp: fig.savefig(tmp, dpi=90))
    finally:
        plt.close(fig)
    return out_png
