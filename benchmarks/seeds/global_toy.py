"""Seed 001's toy experiment (section 4, Fig. 3): is the global loss robust to flipped labels? Not a test.

    python benchmarks/seeds/global_toy.py [--seeds 0,1,2] [--epochs 300] [--plot grids.png]
    python benchmarks/seeds/global_toy.py --quick          # a few seconds: 1 seed, 20 epochs, coarse grid

Seed 001 (Kumar B G, Carneiro, Reid 2016) draws 80 points of two 2-D Gaussian classes, flips the
labels of 5% of them (4 points), trains an embedding net B(256,2,1)-B(512,1,1)-C(128,1,1) with a
unit-norm output (B = convolution + batch normalisation + ReLU; on a 2-D input these are dense
layers) with (b) the triplet loss (eq. 5), (c) triplet + global (TGLoss, eq. 10), (d) the global
loss (eq. 6), under identical settings, then labels a grid of the input plane by its nearest
training point in the embedding space. Its claim (Fig. 3, qualitative): the triplet loss
over-fits the flipped points (islands of the wrong label around them), TGLoss less so, and the
global loss's label map stays coherent around the outliers.

Here, each loss is the batch function of :mod:`whale.objectives.globalloss` or :mod:`whale.objectives.losses`,
on the whole training
set as one batch (80 points: every pair and every triplet); also the semi-hard triplet loss
(seed 002) and the contrastive loss, and 1-NN in the raw input plane as the no-learning
reference. Measured: the grid's accuracy against the clean (Bayes) boundary, per loss, over
``--seeds`` (data, flips and initial weights all follow the seed), mean +- sd.

What the paper leaves open and what is chosen here (docs/global_toy.md):

* class means (-0.7, -0.7) and (0.7, 0.7), covariance 0.35^2 I (two distinct clouds inside the
  figure's [-2, 2] square); equal priors and covariances make the Bayes boundary the line
  x + y = 0; 4 of the 80 labels flipped, drawn uniformly;
* the optimiser of section 5.2 (SGD, momentum 0.9, weight decay 5e-4, learning rate 0.01
  decaying after each epoch to 1e-4), one full-batch step per epoch, 300 epochs;
* loss parameters of section 5.2: m = 0.01, gamma = 1, t = 0.4, lambda = 0.8; semi-hard margin 0.5
  (seed 002's code), contrastive margin 1;
* the grid: 81 x 81 points on [-2, 2]^2; nearest neighbour by cosine (unit-norm embeddings: the
  same as Euclidean), computed with the network in inference mode (batch-norm moving statistics).

The last stdout line is ``{"benchmark": "global_toy", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402

N_POINTS = 80
FLIP_FRACTION = 0.05
MEANS = np.array([[-0.7, -0.7], [0.7, 0.7]])
SIGMA = 0.35
EXTENT = 2.0
LOSSES = ("triplet", "tgloss", "global", "semihard", "contrastive", "global_triplet", "tgloss_triplet")
"""Rows of the table (``--losses`` picks some); ``1nn-input`` is always added as the reference."""
LABELS = {"triplet": "triplet, eq. 5 (seed 001)", "tgloss": "TGLoss, eq. 10", "global": "global, eq. 6",
          "semihard": "semi-hard triplet (seed 002)", "contrastive": "contrastive (DrLIM)",
          "global_triplet": "global, eq. 6, one triplet per point",
          "tgloss_triplet": "TGLoss, eq. 10, one triplet per point",
          "1nn-input": "1-NN in the input plane (no training)"}
PAPER = ("Seed 001, Fig. 3 (qualitative): the triplet loss over-fits the flipped labels, TGLoss less, "
         "the global loss's label map stays coherent around them.")


# ------------------------------------------------------------------------------ data
def toy_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x [80, 2] float32, noisy labels [80] int32, clean labels [80] int32)``: 40 points per class."""
    rng = np.random.default_rng(seed)
    clean = np.repeat(np.arange(2, dtype=np.int32), N_POINTS // 2)
    x = (MEANS[clean] + SIGMA * rng.standard_normal((N_POINTS, 2))).astype(np.float32)
    noisy = clean.copy()
    flip = rng.choice(N_POINTS, int(round(FLIP_FRACTION * N_POINTS)), replace=False)
    noisy[flip] = 1 - noisy[flip]
    return x, noisy, clean


def grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(points [n*n, 2] float32, Bayes labels [n*n] int32)`` on ``[-EXTENT, EXTENT]^2``, rows = y."""
    axis = np.linspace(-EXTENT, EXTENT, n, dtype=np.float32)
    gx, gy = np.meshgrid(axis, axis)
    pts = np.stack([gx.ravel(), gy.ravel()], axis=1)
    bayes = (pts @ (MEANS[1] - MEANS[0]) > 0.5 * (MEANS[1] @ MEANS[1] - MEANS[0] @ MEANS[0])).astype(np.int32)
    return pts, bayes


def nearest_labels(f_query: np.ndarray, f_train: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The label of each query's nearest training point (Euclidean): ``[n_q]`` int32."""
    d = (f_query ** 2).sum(1)[:, None] - 2.0 * f_query @ f_train.T + (f_train ** 2).sum(1)[None, :]
    return labels[np.argmin(d, axis=1)].astype(np.int32)


# ------------------------------------------------------------------------------ training
def loss_fn(name: str):
    """``fn(y_true [B], y_pred [B, 128]) -> scalar`` for Keras's ``compile``."""
    from keras import ops

    from whale.objectives import globalloss as G
    from whale.objectives import losses as L

    if name == "triplet":
        return lambda y, f: G.ratio_triplet_loss(y, f, m=0.01)
    if name == "tgloss":
        return lambda y, f: G.tg_loss(y, f, gamma=1.0, t=0.4, lam=0.8, m=0.01)
    if name == "global":
        return lambda y, f: G.global_loss(y, f, t=0.4, lam=0.8)
    if name == "global_triplet":  # eq. 6 as written: one matching and one non-matching distance per triplet
        return lambda y, f: G.global_loss(y, f, t=0.4, lam=0.8, pairs="triplet")
    if name == "tgloss_triplet":
        return lambda y, f: G.tg_loss(y, f, gamma=1.0, t=0.4, lam=0.8, m=0.01, pairs="triplet")
    if name == "semihard":
        return lambda y, f: L.semihard_triplet_loss(y, f, margin=0.5)
    if name == "contrastive":
        def contrastive(y, f):
            y = ops.reshape(y, (-1,))
            same = ops.cast(ops.equal(ops.expand_dims(y, 1), ops.expand_dims(y, 0)), "float32")
            n = ops.shape(f)[0]
            i = ops.arange(n)
            upper = ops.cast(ops.less(ops.expand_dims(i, 1), ops.expand_dims(i, 0)), "float32")
            per_pair = L.contrastive_loss(ops.reshape(same, (-1,)), ops.reshape(L.pairwise_sq_distances(f), (-1,)))
            return ops.sum(per_pair * ops.reshape(upper, (-1,))) / ops.sum(upper)
        return contrastive
    raise ValueError(f"global_toy: unknown loss {name!r}; expected one of {LOSSES}")


def build_net(seed: int):
    """Seed 001's toy net: B(256)-B(512)-C(128), unit-norm output; ``[B, 2] -> [B, 128]`` float32."""
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((2,))
    h = inp
    for width in (256, 512):
        h = keras.layers.ReLU()(keras.layers.BatchNormalization()(keras.layers.Dense(width)(h)))
    out = keras.layers.UnitNormalization()(keras.layers.Dense(128)(h))
    return keras.Model(inp, out)


def train_and_label(name: str, seed: int, epochs: int, points: np.ndarray) -> tuple[np.ndarray, float]:
    """Train on seed ``seed``'s data with loss ``name``; ``(grid labels [n] int32, seconds)``."""
    import keras

    x, noisy, _ = toy_data(seed)
    t0 = time.time()
    if name == "1nn-input":
        return nearest_labels(points, x, noisy), time.time() - t0
    model = build_net(seed)
    lr = keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=max(epochs - 1, 1), decay_rate=0.01)
    # XLA's compilation (TensorFlow's "auto") costs more than 300 steps of this small net on a CPU.
    model.compile(optimizer=keras.optimizers.SGD(lr, momentum=0.9, weight_decay=5e-4), loss=loss_fn(name),
                  jit_compile=keras.backend.backend() != "tensorflow")
    model.fit(x, noisy.astype(np.float32), batch_size=N_POINTS, epochs=epochs, shuffle=False, verbose=0)
    f_train = keras.ops.convert_to_numpy(model(x, training=False))
    f_grid = keras.ops.convert_to_numpy(model(points, training=False))
    if not (np.all(np.isfinite(f_train)) and np.all(np.isfinite(f_grid))):
        raise FloatingPointError(f"global_toy: loss {name}, seed {seed}: the embedding is not finite")
    return nearest_labels(f_grid, f_train, noisy), time.time() - t0


def run(losses, seeds, epochs: int, n_grid: int, log=print) -> tuple[list[dict], dict]:
    """Every loss on every seed: ``(rows, label maps)``; a row holds ``loss``, ``acc`` per seed, mean, sd."""
    points, bayes = grid(n_grid)
    rows, maps = [], {}
    for name in ("1nn-input", *losses):
        accs, secs = [], 0.0
        for seed in seeds:
            labels, s = train_and_label(name, seed, epochs, points)
            accs.append(float(np.mean(labels == bayes)))
            secs += s
            maps[(name, seed)] = labels
        stats = common.mean_sd(accs)
        rows.append({"loss": name, "accs": accs, "mean": stats["mean"], "sd": stats["sd"], "seconds": secs})
        log(f"{LABELS[name]}: grid accuracy {stats['mean']:.3f} +- {stats['sd']:.3f} ({secs:.0f} s)")
    return rows, maps


def table(rows: list[dict], seeds) -> str:
    """Markdown: one row per loss, the accuracy per seed, mean +- sd (sample sd), train seconds."""
    head = "| loss | " + " | ".join(f"seed {s}" for s in seeds) + " | mean +- sd | train s |"
    lines = [head, "| --- " * (len(seeds) + 3) + "|"]
    for r in rows:
        lines.append(f"| {LABELS[r['loss']]} | " + " | ".join(f"{a:.3f}" for a in r["accs"])
                     + f" | {r['mean']:.3f} +- {r['sd']:.3f} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def plot(path, maps: dict, names, seed: int, n_grid: int) -> None:
    """The label maps of ``seed`` (one panel per loss, training points on top) written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from whale.core.files import atomic_write

    x, noisy, clean = toy_data(seed)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.4))
    for ax, name in zip(np.atleast_1d(axes), names):
        ax.imshow(maps[(name, seed)].reshape(n_grid, n_grid), origin="lower", cmap="RdYlGn", alpha=0.35,
                  extent=(-EXTENT, EXTENT, -EXTENT, EXTENT), vmin=0, vmax=1)
        ax.scatter(x[:, 0], x[:, 1], c=noisy, cmap="RdYlGn", vmin=0, vmax=1, s=12, edgecolors="k", linewidths=0.3)
        flipped = noisy != clean
        ax.scatter(x[flipped, 0], x[flipped, 1], facecolors="none", edgecolors="b", s=60, linewidths=1.0)
        ax.plot([-EXTENT, EXTENT], [EXTENT, -EXTENT], "k--", linewidth=0.6)
        ax.set_title(LABELS[name], fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110))
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 seed, 20 epochs, a 21 x 21 grid (a few seconds)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2; 0 with --quick)")
    p.add_argument("--epochs", type=int, default=None, help="full-batch steps (default 300; 20 with --quick)")
    p.add_argument("--grid", type=int, default=None, help="grid points per side (default 81; 21 with --quick)")
    p.add_argument("--losses", default=",".join(LOSSES), help=f"comma-separated subset of {','.join(LOSSES)}")
    p.add_argument("--plot", default=None, help="write the first seed's label maps to this PNG")
    args = p.parse_args(argv)
    t0 = time.time()
    seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",") if s.strip()]
    epochs = args.epochs or (20 if args.quick else 300)
    n_grid = args.grid or (21 if args.quick else 81)
    losses = [s.strip() for s in args.losses.split(",") if s.strip()]
    unknown = [s for s in losses if s not in LOSSES]
    if unknown or not seeds:
        p.error(f"--losses: expected names from {','.join(LOSSES)}, received {unknown}" if unknown
                else "--seeds: expected at least one seed")
    common.setup_tensorflow()
    import keras

    print(f"seed 001 toy experiment: {N_POINTS} points, {FLIP_FRACTION:.0%} labels flipped, "
          f"{epochs} full-batch SGD steps, {n_grid}x{n_grid} grid, seeds {seeds}, backend {keras.backend.backend()}")
    rows, maps = run(losses, seeds, epochs, n_grid)
    print()
    quick = " (--quick)" if args.quick else ""
    print(f"Grid accuracy of 1-NN in the embedding against the clean (Bayes) boundary{quick}")
    print(table(rows, seeds))
    print(PAPER)
    if args.plot:
        plot(args.plot, maps, [r["loss"] for r in rows], seeds[0], n_grid)
        print(f"label maps of seed {seeds[0]}: {args.plot}")
    metrics = {f"acc_{r['loss']}": r["mean"] for r in rows}
    metrics.update({f"sd_{r['loss']}": r["sd"] for r in rows})
    metrics.update(seeds=",".join(map(str, seeds)), epochs=epochs, grid=n_grid, quick=bool(args.quick))
    print(common.final_json("global_toy", metrics, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
