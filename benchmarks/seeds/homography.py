"""Seed 000 (Moskvyak & Maire 2017): learning homographic equivalence of disk patterns, Table I. Not a test.

    python benchmarks/seeds/homography.py --out runs/homography [--quick] [--seeds 0,1,2]
    python benchmarks/seeds/homography.py --out runs/homography48 --size 48 --patterns 300 --images-per-stage 2400 \\
        --test-images 1200 --epochs-per-stage 2,2 --widths 8,16,16,32,32 --fc 64  # ~12 min, 2 cores
    KERAS_BACKEND=jax python benchmarks/seeds/homography.py --out runs/homography_full   # the paper's scale (GPU)

Data (section IV-B, :mod:`whale.data.homography`): seed patterns of 10 black disks on a white
square on a black canvas (150 px, square 100 px, disks 5 px; ``--size`` scales all three), 2,000
training, 200 validation and 2,000 test patterns (``--patterns N``: N, N/10, N). Each curriculum
stage (section IV-C) draws its own 2,000 training and 200 validation homographies: stage 1
``R = 15, |phi| <= 90``, stage 2 ``R = 25, |phi| <= 180`` (R scaled with the square); the test set
has 2,000 homographies of stage 2's difficulty. A stage holds ``K = 48,000`` images
(``--images-per-stage``): ``K / 2 = 24,000`` pairs for the siamese rows, ``K / 3 = 16,000``
triplets for the triplet rows, drawn once per seed and shared by the rows of one architecture
("saved datasets ... allow fair comparison"). Test: ``--test-images 30,000`` images = 15,000
pairs and 10,000 triplets (Table I's counts).

Network (section III-C, Fig. 5): BatchNorm (momentum 0.9, ``--bn-momentum``: the text gives
none), then 5 x [conv 5x5, BatchNorm, ReLU, max-pool 2x2], flatten, FC + ReLU, FC -> ``d = 128``;
Xavier-uniform convolutions, FC layers with L2 0.01 and zero biases; Adam. The text gives
neither the filter counts nor the first FC's width: they are ``--widths`` (default
32,64,64,128,128) and ``--fc`` (default 256). The paper's images have 3 colour channels; the
patterns are gray, so the input has 1.

Rows (Table I) and the two readings the text forces (docs/homography.md):

* the model's output is the Euclidean distance ``D`` of the two embeddings. "The distance ... is
  passed to the sigmoid" cannot be taken literally: ``sigmoid(D) >= 0.5`` for every ``D >= 0``, so
  no pair would ever fall below the 0.5 threshold. Where a value in ``[0, 1]`` is needed (the
  cross-entropy, which takes ``log D`` and ``log(1 - D)``), the output is ``2 sigmoid(D) - 1 =
  tanh(D / 2)``: 0 for equal embeddings, 1 at infinity. The contrastive, hinge and MSE losses are
  written on ``D`` itself and are trained on it. Accuracy thresholds at 0.5 the quantity each
  loss is trained on (the paper's cross-entropy formula also lacks its minus sign: we minimise
  the negative log-likelihood).
* the triplet's second distance is written ``D(P+, P-)``, but Fig. 7 labels the swapped triplet
  ``(P^a, P^-, P^+)`` with ``y = (1, 0)``: ``D(image 1, image 2) = D(P^-, P^+)`` is then a
  negative pair labelled 0. Only the anchor-based reading, distances ``D(image 0, image 1)`` and
  ``D(image 0, image 2)``, matches both label forms; the hinge is ``max(0, m + D_pos^2 - D_neg^2)``
  with the positive chosen by the label.

A triplet is correct when both its distances are on the right side of 0.5 (section IV-D).
``--variant`` also trains the transformation-equivalence task (section IV-A: same homography =
positive) with the siamese + cross-entropy and triplet + hinge models; the paper reports over
95% for both. ``--seeds 0,1,2`` repeats everything per seed (data, pairs and weights all follow
the seed) and prints mean +- sd beside Table I; ``results.json`` under ``--out`` holds every figure.
The last stdout line is ``{"benchmark": "homography", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
from whale.data import homography as hg  # noqa: E402
from whale.core.files import write_json_atomic, write_text_atomic  # noqa: E402

ROWS = {  # key: (architecture, loss, equivalence, Table I accuracy or the variant's ">95%")
    "siamese_ce": ("siamese", "cross-entropy", "pattern", 0.9306),
    "siamese_contrastive": ("siamese", "contrastive", "pattern", 0.8417),
    "triplet_hinge": ("triplet", "hinge", "pattern", 0.9714),
    "triplet_mse": ("triplet", "mse", "pattern", 0.8969),
}
VARIANT_ROWS = {
    "siamese_ce_transformation": ("siamese", "cross-entropy", "transformation", 0.95),
    "triplet_hinge_transformation": ("triplet", "hinge", "transformation", 0.95),
}
CURRICULUM = ((15.0, 90.0), (25.0, 180.0))
"""(R in px on the paper's 100 px square, |phi| bound in degrees) of each training stage."""
MARGIN = 1.0
THRESHOLD = 0.5
EMBEDDING = 128


@dataclass(frozen=True)
class Scale:
    """Everything that sets the size of a run (the paper's values as defaults)."""

    size: int = 150
    patterns: int = 2000
    images_per_stage: int = 48000
    test_images: int = 30000
    epochs: tuple[int, ...] = (20, 10)
    widths: tuple[int, ...] = (32, 64, 64, 128, 128)
    fc: int = 256
    batch: int = 32
    lr: float = 1e-3
    curriculum: tuple[tuple[float, float], ...] = CURRICULUM
    bn_momentum: float = 0.9  # Keras' 0.99 leaves the inference statistics at their start after a few hundred steps
    eager: bool = False  # tiny runs: tracing the graphs would cost more than running them

    @property
    def square(self) -> int:
        return int(round(self.size * hg.SQUARE / hg.SIZE))

    @property
    def diameter(self) -> int:
        return max(3, int(round(self.size * hg.DIAMETER / hg.SIZE)))

    def radius(self, R: float) -> float:
        return R * self.square / hg.SQUARE


QUICK = Scale(size=32, patterns=12, images_per_stage=72, test_images=60, epochs=(1, 1), widths=(4, 4, 8, 8, 8),
              fc=16, batch=12, eager=True)


# ------------------------------------------------------------------------------ data
class Split:
    """Seed patterns and per-stage homographies of one split (train, validation or test)."""

    def __init__(self, rng: np.random.Generator, scale: Scale, n_patterns: int, n_homographies: int,
                 stages: tuple[tuple[float, float], ...]):
        self.patterns = np.stack([hg.draw_pattern(rng, scale.size, scale.square, hg.DISKS, scale.diameter)[0]
                                  for _ in range(n_patterns)])
        self.homographies = [np.stack([hg.random_homography(rng, scale.radius(R), phi, scale.size, scale.square)
                                       for _ in range(n_homographies)]) for R, phi in stages]

    def items(self, rng: np.random.Generator, architecture: str, stage: int, images: int,
              equivalence: str) -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)``: ``x`` ``[n, k, size, size]`` uint8 (k = 2 or 3 images), ``y`` ``[n]`` or ``[n, 2]`` labels."""
        sample = hg.sample_pairs if architecture == "siamese" else hg.sample_triplets
        k = 2 if architecture == "siamese" else 3
        homs = self.homographies[stage]
        p, t, y = sample(rng, len(self.patterns), len(homs), max(images // k, 2), equivalence)
        return hg.render(self.patterns, homs, p, t), y


# ------------------------------------------------------------------------------ model
def build_branch(scale: Scale):
    """The shared subnetwork f (Fig. 5): ``[b, size, size, 1]`` float32 in [0, 1] -> ``[b, 128]``."""
    import keras
    from keras import layers

    inp = keras.Input((scale.size, scale.size, 1))
    x = layers.BatchNormalization(momentum=scale.bn_momentum)(inp)
    for w in scale.widths:
        x = layers.Conv2D(w, 5, padding="same", kernel_initializer="glorot_uniform",
                          bias_initializer="glorot_uniform")(x)
        x = layers.BatchNormalization(momentum=scale.bn_momentum)(x)
        x = layers.Activation("relu")(x)
        x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    reg = keras.regularizers.L2(0.01)
    x = layers.Dense(scale.fc, activation="relu", kernel_regularizer=reg, bias_initializer="zeros")(x)
    x = layers.Dense(EMBEDDING, kernel_regularizer=reg, bias_initializer="zeros")(x)
    return keras.Model(inp, x, name="branch")


def squashed(loss: str) -> bool:
    """Whether the row's output is ``2 sigmoid(D) - 1`` (cross-entropy) rather than ``D``."""
    return loss == "cross-entropy"


def build_model(architecture: str, loss: str, scale: Scale):
    """Siamese (2 inputs -> ``[b, 1]``) or triplet (3 inputs -> ``[b, 2]``: D(0, 1), D(0, 2)) model."""
    import keras
    from keras import layers, ops

    branch = build_branch(scale)
    k = 2 if architecture == "siamese" else 3
    inputs = [keras.Input((scale.size, scale.size, 1), name=f"image{i}") for i in range(k)]
    emb = [branch(x) for x in inputs]

    def distance(a, b):
        d = ops.sqrt(ops.maximum(ops.sum(ops.square(a - b), axis=-1, keepdims=True), 1e-12))
        return 2.0 * ops.sigmoid(d) - 1.0 if squashed(loss) else d

    outs = [layers.Lambda(lambda ab: distance(*ab))([emb[0], e]) for e in emb[1:]]
    out = outs[0] if k == 2 else layers.Concatenate()(outs)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Adam(scale.lr), loss=loss_function(loss), run_eagerly=scale.eager)
    return model


def loss_function(loss: str):
    """``f(y_true, d)``: labels ``[b, 1]`` or ``[b, 2]`` (0 = same class), outputs of the same shape."""
    from keras import ops

    def contrastive(y, d):
        y = ops.cast(y, d.dtype)
        return ops.mean(0.5 * (1 - y) * ops.square(d) + 0.5 * y * ops.square(ops.relu(MARGIN - d)))

    def cross_entropy(y, d):
        y, d = ops.cast(y, d.dtype), ops.clip(d, 1e-6, 1 - 1e-6)
        return -ops.mean(y * ops.log(d) + (1 - y) * ops.log(1 - d))

    def hinge(y, d):
        y = ops.cast(y, d.dtype)
        pos = ops.sum((1 - y) * d, axis=-1)
        neg = ops.sum(y * d, axis=-1)
        return ops.mean(ops.relu(MARGIN + ops.square(pos) - ops.square(neg)))

    def mse(y, d):
        return ops.mean(ops.sum(ops.square(d - ops.cast(y, d.dtype)), axis=-1))

    table = {"contrastive": contrastive, "cross-entropy": cross_entropy, "hinge": hinge, "mse": mse}
    if loss not in table:
        raise ValueError(f"loss: expected one of {sorted(table)}, received {loss!r}")
    return table[loss]


def accuracy(distances: np.ndarray, labels: np.ndarray, threshold: float = THRESHOLD) -> float:
    """Share of items whose every distance is on its label's side: ``< threshold`` when 0, ``>=`` when 1.

    ``distances`` and ``labels``: ``[n]``/``[n, 1]`` (pairs) or ``[n, 2]`` (triplets: both must be right).
    """
    d = np.asarray(distances, np.float64).reshape(len(labels), -1)
    y = np.asarray(labels).reshape(len(labels), -1)
    right = np.where(y == 0, d < threshold, d >= threshold)
    return float(right.all(axis=1).mean())


def order_accuracy(distances: np.ndarray, labels: np.ndarray) -> float | None:
    """Triplets ``[n, 2]``: share with the positive's distance below the negative's (threshold-free); None for pairs."""
    d, y = np.asarray(distances, np.float64), np.asarray(labels)
    if d.ndim != 2 or d.shape[1] != 2:
        return None
    return float((np.where(y[:, 0] == 0, d[:, 0], d[:, 1]) < np.where(y[:, 0] == 0, d[:, 1], d[:, 0])).mean())


def distance_report(distances: np.ndarray, labels: np.ndarray, threshold: float = THRESHOLD) -> dict:
    """What the 0.5 threshold sees: accuracy, the threshold-free order accuracy (triplets), and where the distances sit.

    ``distances``, ``labels``: as :func:`accuracy`. Returns ``{"accuracy", "order_accuracy", "median": {"positive",
    "negative"}, "positive_below": share of label-0 distances < threshold, "negative_at_or_above": share of label-1
    distances >= threshold}`` (the hinge hypothesis of docs/homography.md: a hinge-trained triplet is right at 0.5
    only once its positive distance is below it).
    """
    d = np.asarray(distances, np.float64).reshape(len(labels), -1)
    y = np.asarray(labels).reshape(d.shape)
    pos, neg = d[y == 0], d[y == 1]
    return {"accuracy": accuracy(d, y, threshold), "order_accuracy": order_accuracy(d, y),
            "median": {"positive": float(np.median(pos)), "negative": float(np.median(neg))},
            "positive_below": float((pos < threshold).mean()), "negative_at_or_above": float((neg >= threshold).mean())}


def _inputs(x: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
    """The inputs for items ``idx`` of ``x`` ``[n, k, s, s]`` uint8: k arrays ``[b, s, s, 1]`` float32 in [0, 1]."""
    return [x[idx, j, ..., None].astype(np.float32) / 255.0 for j in range(x.shape[1])]


def predict(model, x: np.ndarray, batch: int = 128) -> np.ndarray:
    """The model's distances on ``x`` ``[n, k, s, s]`` uint8: ``[n, 1]`` or ``[n, 2]`` float64.

    Every batch has ``batch`` items (the last one padded with repeats), so the graph is traced once.
    """
    out = []
    for i in range(0, len(x), batch):
        idx = np.arange(i, i + batch) % len(x)
        out.append(np.asarray(model.predict_on_batch(_inputs(x, idx)), np.float64)[:min(batch, len(x) - i)])
    return np.concatenate(out)


def fit_epoch(model, x: np.ndarray, y: np.ndarray, rng: np.random.Generator, batch: int) -> float:
    """One epoch over ``x`` in an order drawn from ``rng``, full batches only; returns the mean training loss."""
    order = rng.permutation(len(x))
    losses = []
    for i in range(0, max(len(order) - batch + 1, 1), batch):
        idx = np.sort(order[i:i + batch])
        out = model.train_on_batch(_inputs(x, idx), y[idx].reshape(len(idx), -1).astype(np.float32))
        losses.append(float(out[0] if isinstance(out, (list, tuple)) else out))
    return float(np.mean(losses))


# ------------------------------------------------------------------------------ run
def run_seed(seed: int, scale: Scale, rows: dict, log=print, trace: bool = False) -> dict:
    """Train and test every row of ``rows`` on one seed's data; ``{row: {"test_accuracy", ...}}``.

    ``trace``: also score the test set after every epoch (``"trace"``: one :func:`distance_report` per epoch,
    with its ``epoch`` counted over both stages): accuracy and distances at every training length of one run.
    """
    import keras

    t0 = time.time()
    n_val = max(4, scale.patterns // 10)
    train = Split(np.random.default_rng([seed, 0]), scale, scale.patterns, scale.patterns, scale.curriculum)
    val = Split(np.random.default_rng([seed, 1]), scale, n_val, n_val, scale.curriculum)
    test = Split(np.random.default_rng([seed, 2]), scale, scale.patterns, scale.patterns, scale.curriculum[-1:])
    log(f"seed {seed}: {scale.patterns} + {n_val} + {scale.patterns} patterns at {scale.size} px drawn "
        f"({time.time() - t0:.1f} s)")
    cache: dict = {}

    def data(split, name, architecture, stage, images, equivalence):
        key = (name, architecture, stage, equivalence)
        if key not in cache:
            rng = np.random.default_rng([seed, 3, ("train", "val", "test").index(name),
                                         int(architecture == "triplet"), stage, int(equivalence != "pattern")])
            cache[key] = split.items(rng, architecture, stage, images, equivalence)
        return cache[key]

    results = {}
    for name, (architecture, loss, equivalence, _) in rows.items():
        r = list({**ROWS, **VARIANT_ROWS}).index(name)  # a row's draws do not depend on which rows run
        t1 = time.time()
        keras.utils.set_random_seed(seed * 1000 + r)
        model = build_model(architecture, loss, scale)
        stages, curve = [], []
        xt, yt = data(test, "test", architecture, 0, scale.test_images, equivalence)
        for stage, epochs in enumerate(scale.epochs):
            x, y = data(train, "train", architecture, stage, scale.images_per_stage, equivalence)
            xv, yv = data(val, "val", architecture, stage, max(scale.images_per_stage // 10, 6), equivalence)
            for epoch in range(epochs):
                loss_value = fit_epoch(model, x, y, np.random.default_rng([seed, 4, r, stage, epoch]), scale.batch)
                if trace:
                    curve.append({"epoch": len(curve) + 1, "stage": stage, "loss": loss_value,
                                  **distance_report(predict(model, xt), yt)})
            stages.append({"stage": stage, "R": scale.curriculum[stage][0], "phi_max": scale.curriculum[stage][1],
                           "train_items": len(x), "epochs": epochs, "last_loss": loss_value,
                           "val_accuracy": accuracy(predict(model, xv), yv)})
        report = distance_report(predict(model, xt), yt)
        results[name] = {"test_accuracy": report["accuracy"], "test_order_accuracy": report["order_accuracy"],
                         "test_median_distance": report["median"], "test_positive_below": report["positive_below"],
                         "test_negative_at_or_above": report["negative_at_or_above"],
                         "test_items": len(xt), "stages": stages, "seconds": time.time() - t1}
        if trace:
            results[name]["trace"] = curve
        res = results[name]
        log(f"seed {seed} {name}: test accuracy {res['test_accuracy']:.4f} on {len(xt)} "
            f"{'pairs' if architecture == 'siamese' else 'triplets'} (order {res['test_order_accuracy']}, "
            f"median distances {res['test_median_distance']}, positives below {THRESHOLD} "
            f"{res['test_positive_below']:.3f}); validation after each stage "
            f"{[round(s['val_accuracy'], 3) for s in stages]} ({res['seconds']:.0f} s)")
        keras.backend.clear_session()
    return results


def table(per_seed: list[dict], rows: dict) -> tuple[str, dict]:
    """Table I beside our figures: a Markdown table and ``{row: {"mean", "sd", ...}}``."""
    summary, lines = {}, ["| architecture | loss | task | test items | paper | ours (mean +- sd) | seeds |",
                          "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, (architecture, loss, equivalence, paper) in rows.items():
        accs = [res[name]["test_accuracy"] for res in per_seed]
        s = common.mean_sd(accs)
        summary[name] = {**s, "paper": paper, "per_seed": accs}
        paper_cell = f"{paper:.2%}" if equivalence == "pattern" else f"> {paper:.0%}"
        kind = "pairs" if architecture == "siamese" else "triplets"
        lines.append(f"| {architecture} | {loss} | {equivalence} equivalence | {per_seed[0][name]['test_items']} "
                     f"{kind} | {paper_cell} | {s['mean']:.2%} +- {s['sd']:.2%} | {s['n']} |")
    return "\n".join(lines), summary


def trace_table(per_seed: list[dict], rows: dict) -> str:
    """The ``--trace`` curves: per row and epoch, mean +- sd over seeds of what :func:`distance_report` measures."""
    lines = ["| row | epoch | accuracy at 0.5 | order accuracy | median positive | median negative "
             "| positives < 0.5 | negatives >= 0.5 |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(values, fmt="{:.3f}"):
        values = [v for v in values if v is not None]
        if not values:
            return "-"
        s = common.mean_sd(values)
        return (fmt + " +- " + fmt).format(s["mean"], s["sd"])

    for name in rows:
        for i in range(len(per_seed[0][name]["trace"])):
            points = [res[name]["trace"][i] for res in per_seed]
            lines.append(f"| {name} | {points[0]['epoch']} | {cell([p['accuracy'] for p in points])} "
                         f"| {cell([p['order_accuracy'] for p in points])} "
                         f"| {cell([p['median']['positive'] for p in points], '{:.2f}')} "
                         f"| {cell([p['median']['negative'] for p in points], '{:.2f}')} "
                         f"| {cell([p['positive_below'] for p in points])} "
                         f"| {cell([p['negative_at_or_above'] for p in points])} |")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="folder for results.json and table.md")
    p.add_argument("--quick", action="store_true", help="a tiny run that checks the plumbing (seconds)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--size", type=int, help="image side in px (default 150; square and disks scale with it)")
    p.add_argument("--patterns", type=int, help="training (and test) seed patterns and homographies per stage "
                                                "(default 2000; validation a tenth)")
    p.add_argument("--images-per-stage", type=int, help="K images per training stage (default 48000: "
                                                        "24000 pairs or 16000 triplets)")
    p.add_argument("--test-images", type=int, help="test images (default 30000: 15000 pairs, 10000 triplets)")
    p.add_argument("--epochs-per-stage", help="N or one N per stage (default 20,10)")
    p.add_argument("--curriculum", help="R:PHI per stage, R in px on the 100 px square (default 15:90,25:180; "
                                        "the test set has the last stage's difficulty)")
    p.add_argument("--widths", help="the five conv layers' filters (default 32,64,64,128,128)")
    p.add_argument("--fc", type=int, help="width of the first FC layer (default 256)")
    p.add_argument("--batch", type=int, help="batch size (default 32)")
    p.add_argument("--bn-momentum", type=float, help="BatchNorm's moving-average momentum (default 0.9)")
    p.add_argument("--rows", help=f"comma-separated subset of {','.join({**ROWS, **VARIANT_ROWS})} "
                                  "(default the four of Table I)")
    p.add_argument("--variant", action="store_true", help="also the transformation-equivalence rows")
    p.add_argument("--trace", action="store_true", help="score the test set after every epoch (results.json: "
                                                        "each row's 'trace'; table.md: the curve per row)")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def scale_from(args) -> Scale:
    scale = QUICK if args.quick else Scale()
    changes = {k: getattr(args, a) for k, a in (("size", "size"), ("patterns", "patterns"),
                                                ("images_per_stage", "images_per_stage"),
                                                ("test_images", "test_images"), ("fc", "fc"), ("batch", "batch"),
                                                ("bn_momentum", "bn_momentum"))
               if getattr(args, a) is not None}
    if args.curriculum:
        changes["curriculum"] = tuple(tuple(float(v) for v in st.split(":")) for st in args.curriculum.split(","))
    stages = len(changes.get("curriculum", scale.curriculum))
    if args.epochs_per_stage:
        e = tuple(int(v) for v in args.epochs_per_stage.split(","))
        changes["epochs"] = e * stages if len(e) == 1 else e
    elif stages != len(scale.epochs):
        changes["epochs"] = scale.epochs[:1] * stages
    if args.widths:
        changes["widths"] = tuple(int(v) for v in args.widths.split(","))
    scale = replace(scale, **changes)
    if len(scale.epochs) != stages or len(scale.widths) != 5 or any(len(st) != 2 for st in scale.curriculum):
        raise ValueError(f"--epochs-per-stage: expected 1 or {stages} values, --widths 5, --curriculum R:PHI pairs; "
                         f"received {scale.epochs}, {scale.widths} and {scale.curriculum}")
    if scale.size < 2 ** 5 or scale.patterns < 2:
        raise ValueError(f"--size >= 32 (five 2x2 poolings) and --patterns >= 2 expected, received "
                         f"{scale.size} and {scale.patterns}")
    return scale


def main(argv=None) -> dict:
    args = parse_args(argv)
    common.setup_tensorflow()
    t0 = time.time()
    log = (lambda *a, **k: None) if args.quiet else (lambda *a, **k: print(*a, **k, flush=True))
    scale = scale_from(args)
    every = {**ROWS, **VARIANT_ROWS}
    names = args.rows.split(",") if args.rows else list(ROWS)
    if any(k not in every for k in names):
        raise ValueError(f"--rows: expected names from {sorted(every)}, received {args.rows!r}")
    rows = {k: every[k] for k in names}
    if args.variant:
        rows.update(VARIANT_ROWS)
    seeds = [int(s) for s in str(args.seeds).split(",")]
    log(f"scale: {asdict(scale)}; square {scale.square} px, disks {scale.diameter} px, "
        f"R = {[round(scale.radius(R), 2) for R, _ in scale.curriculum]} px; seeds {seeds}")
    per_seed = [run_seed(seed, scale, rows, log, args.trace) for seed in seeds]
    text, summary = table(per_seed, rows)
    if args.trace:
        text += "\n\n" + trace_table(per_seed, rows)
    seconds = time.time() - t0
    header = (f"Moskvyak & Maire 2017, Table I: accuracy at threshold {THRESHOLD} (a triplet counts when both "
              f"pairs are right); {len(seeds)} seed(s), {seconds:.0f} s")
    log(header + "\n" + text)
    payload = {"benchmark": "homography", "scale": asdict(scale), "seeds": seeds, "summary": summary,
               "per_seed": per_seed, "seconds": seconds, "argv": list(argv if argv is not None else sys.argv[1:]),
               "backend": os.environ.get("KERAS_BACKEND")}
    write_json_atomic(args.out / "results.json", payload)
    write_text_atomic(args.out / "table.md", header + "\n\n" + text + "\n")
    metrics = {f"{k}_mean": v["mean"] for k, v in summary.items()} | {f"{k}_sd": v["sd"] for k, v in summary.items()}
    print(common.final_json("homography", metrics, seconds))
    return payload


if __name__ == "__main__":
    from whale.core.errors import run_cli

    sys.exit(run_cli(lambda argv: main(argv) and 0, prog="benchmarks/seeds/homography.py"))
