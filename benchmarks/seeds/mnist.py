"""Seed 004 on MNIST (Chen Liu 2013, Section 4.4, Tables 4.2-4.4): a siamese MLP trained on similarity labels only,
its outputs classified by a softmax. Not a test.

    python benchmarks/seeds/mnist.py --mnist DIR --out runs/mnist [--nets none:1000,pca40:1000] [--epochs E] [--seeds 0]

Data: ``DIR`` holds the four files of MNIST as LeCun distributes them, uncompressed
(``train-images.idx3-ubyte``, ``train-labels.idx1-ubyte``, ``t10k-images.idx3-ubyte``, ``t10k-labels.idx1-ubyte``;
``-idx3-ubyte`` spellings are accepted too); the loader checks their magic numbers, shapes and the known
per-digit counts of both sets, so another data set under those names is refused. No copy ships with the toolkit
(docs/orl.md says where one comes from).

Protocol (Section 4.4; docs/orl.md lists what is the thesis' and what is ours):

1. The 60,000 training images split at random (``seed``) into 50,000 training and 10,000 validation images;
   the 10,000 test images are scored once, at the end.
2. Inputs: ``none`` = the 784 pixels / 255; ``pcaK`` = the training images' first K principal components and
   their quadratics (every product ``z_i z_j``, ``i <= j``: K (K + 1) / 2 inputs, 465 for K = 30 as the thesis
   says; 820 for K = 40, where the thesis says 840), each input standardised on the training images.
3. Base pairs: 50,000 of one digit and 50,000 of two digits, drawn once from the training images; each epoch
   runs through them in a new order in mini-batches of 400 pairs.
4. The net ``Input - H... - 30 - 1``: sigmoid layers (as the thesis' ORL and MNIST nets), Glorot-uniform, the
   Cauchy similarity on the 30 outputs (alpha learned), binary cross-entropy of the similarity labels; Nesterov
   SGD with the trapezoidal momentum schedule of benchmarks/seeds/orl.py, learning rate ``--lr``.
5. A softmax classifier (multinomial logistic regression) on the 30 outputs of the training images, its ``C``
   chosen on the validation images; test error = share of the 10,000 test images it gets wrong.

``--nets`` lists the nets as ``INPUT:WIDTHS`` (``none:1000`` is 784-1000-30-1, ``pca40:1000-1000`` two hidden
layers, ``none:`` no hidden layer, 784-20-1 as Table 4.3 says). Writes ``OUT/mnist.json``; the last stdout line
is ``{"benchmark": "mnist", ...}``.
"""
from __future__ import annotations

import json
import re
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import harness  # noqa: E402
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from whale.core.errors import DataError, MissingFileError, run_cli  # noqa: E402

FILES = {"train_images": "train-images.idx3-ubyte", "train_labels": "train-labels.idx1-ubyte",
         "test_images": "t10k-images.idx3-ubyte", "test_labels": "t10k-labels.idx1-ubyte"}
DIGIT_COUNTS = {"train": (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
                "test": (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009)}
"""Images per digit of MNIST's training and test sets: what makes a folder MNIST and not another data set."""
TRAIN, VALIDATION, BASE_PAIRS, BATCH, DIM, DIM_NO_HIDDEN = 50000, 10000, 50000, 400, 30, 20
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
PUBLISHED = {  # thesis test error % (sd), Tables 4.2-4.4: (input, hidden widths) -> figure
    ("none", (60,)): (4.27, None), ("none", (800,)): (2.80, None), ("none", (1000,)): (2.60, 0.21),
    ("pca30", (60,)): (2.80, None), ("pca30", (800,)): (2.70, None), ("pca30", (1000,)): (2.34, None),
    ("pca40", (60,)): (2.68, None), ("pca40", (800,)): (2.1, None), ("pca40", (1000,)): (1.93, 0.14),
    ("none", ()): ("> 10", None), ("pca40", ()): ("> 5", None),
    ("none", (1000, 1000)): ("> 5", None), ("pca40", (1000, 1000)): ("> 5", None),
}
QUICK = {"train": 2000, "validation": 500, "test": 1000, "base_pairs": 2000}


# --------------------------------------------------------------------------------- data
def _idx(path: Path, magic: int, count: int) -> np.ndarray:
    if not path.is_file():
        raise MissingFileError(f"{path}: missing; expected MNIST's four idx files in {path.parent} "
                               f"({', '.join(FILES.values())})")
    raw = path.read_bytes()
    dims = magic & 0xFF
    head = struct.unpack(f">{1 + dims}I", raw[:4 * (1 + dims)]) if len(raw) >= 4 * (1 + dims) else ()
    shape = (count, 28, 28) if dims == 3 else (count,)
    if not head or head[0] != magic or tuple(head[1:]) != shape or len(raw) != 4 * (1 + dims) + int(np.prod(shape)):
        raise DataError(f"{path}: expected an idx file with magic {magic} and shape {shape}, received header {head} "
                        f"and {len(raw)} bytes")
    return np.frombuffer(raw, np.uint8, offset=4 * (1 + dims)).reshape(shape)


def load_mnist(folder) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(train_x [60000, 28, 28] uint8, train_y [60000] uint8, test_x [10000, 28, 28], test_y [10000])``.

    Raises:
        MissingFileError: a file is missing (``-idx3-ubyte`` spellings are accepted for ``.idx3-ubyte``).
        DataError: a file is not the idx file expected, or the per-digit counts are not MNIST's.
    """
    folder = Path(folder)

    def path(key):
        p = folder / FILES[key]
        return p if p.is_file() else folder / FILES[key].replace(".idx", "-idx")

    out = (_idx(path("train_images"), 2051, 60000), _idx(path("train_labels"), 2049, 60000),
           _idx(path("test_images"), 2051, 10000), _idx(path("test_labels"), 2049, 10000))
    for name, labels in (("train", out[1]), ("test", out[3])):
        counts = tuple(int(c) for c in np.bincount(labels, minlength=10))
        if counts != DIGIT_COUNTS[name]:
            raise DataError(f"{folder}: the {name} labels count {counts} images per digit; MNIST's are "
                            f"{DIGIT_COUNTS[name]}")
    return out


def split(n: int, seed: int, train: int = TRAIN, validation: int = VALIDATION) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint training and validation rows of the 60,000 training images, drawn by ``seed``."""
    order = np.random.default_rng([seed, 44]).permutation(n)
    return np.sort(order[:train]), np.sort(order[train:train + validation])


def quadratics(z: np.ndarray) -> np.ndarray:
    """``[n, K]`` -> ``[n, K (K + 1) / 2]``: every product ``z_i z_j``, ``i <= j`` (float32)."""
    i, j = np.triu_indices(z.shape[1])
    return (z[:, i] * z[:, j]).astype(np.float32)


def inputs(kind: str, fit: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Net inputs of ``kind`` (``none`` or ``pcaK``) for ``fit`` and ``others`` (``[n, 28, 28]`` uint8).

    ``none``: pixels / 255, ``[n, 784]``. ``pcaK``: the first K principal components of ``fit``, their quadratics
    (:func:`quadratics`), standardised with ``fit``'s means and sds. Everything is fitted on ``fit`` alone.
    """
    flat = [x.reshape(len(x), -1).astype(np.float32) / 255.0 for x in (fit, *others)]
    if kind == "none":
        return flat
    m = re.fullmatch(r"pca(\d+)", kind)
    if not m or not 1 <= int(m.group(1)) <= 784:
        raise DataError(f"--nets: input {kind!r}: expected none or pcaK with 1 <= K <= 784")
    mean = flat[0].mean(0)
    _, _, vt = np.linalg.svd(flat[0] - mean, full_matrices=False)
    basis = vt[:int(m.group(1))].T
    quad = [quadratics((x - mean) @ basis) for x in flat]
    mu, sd = quad[0].mean(0), quad[0].std(0) + 1e-6
    return [((q - mu) / sd).astype(np.float32) for q in quad]


def base_pairs(labels: np.ndarray, n_each: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_each`` pairs of one digit (two different images) and ``n_each`` of two digits, drawn once.

    Returns ``(pairs [2 n_each, 2] int64 rows of labels, same [2 n_each] float32)``.
    """
    rng = np.random.default_rng([seed, 45])
    by_digit = [np.flatnonzero(labels == d) for d in range(10)]
    digit = rng.integers(10, size=n_each)
    first, second = np.empty(n_each, np.int64), np.empty(n_each, np.int64)
    for d in range(10):
        rows = np.flatnonzero(digit == d)
        members = by_digit[d]
        a = rng.integers(len(members), size=len(rows))
        b = (a + rng.integers(1, len(members), size=len(rows))) % len(members)
        first[rows], second[rows] = members[a], members[b]
    x = rng.integers(len(labels), size=(4 * n_each, 2))
    x = x[labels[x[:, 0]] != labels[x[:, 1]]][:n_each]
    pairs = np.concatenate([np.stack([first, second], 1), x])
    return pairs, np.concatenate([np.ones(n_each, np.float32), np.zeros(n_each, np.float32)])


# --------------------------------------------------------------------------------- net
def parse_net(spec: str) -> tuple[str, tuple[int, ...]]:
    """``"pca40:1000-1000"`` -> ``("pca40", (1000, 1000))``; ``"none:"`` -> ``("none", ())``."""
    kind, sep, widths = spec.partition(":")
    try:
        hidden = tuple(int(w) for w in widths.split("-") if w) if sep else None
    except ValueError:
        hidden = None
    if hidden is None or any(w < 1 for w in hidden) or not re.fullmatch(r"none|pca\d+", kind):
        raise DataError(f"--nets {spec!r}: expected INPUT:WIDTHS, e.g. none:1000, pca40:1000-1000 or none:")
    return kind, hidden


def train_net(x: np.ndarray, pairs: np.ndarray, same: np.ndarray, hidden: tuple[int, ...], dim: int, epochs: int,
              lr: float, seed: int, log=None):
    """The siamese net on ``x`` ``[n, d]`` float32 over ``epochs`` passes through the base ``pairs``.

    Returns ``(branch, final mean loss, alpha [dim] float32)``.
    """
    import keras

    from benchmarks.seeds.orl import trapezoid_sgd
    from whale.objectives.similarity import SimilarityModel

    keras.utils.set_random_seed(seed)
    branch = keras.Sequential([keras.Input((x.shape[1],)), *[keras.layers.Dense(w, activation="sigmoid")
                                                               for w in hidden],
                               keras.layers.Dense(dim, activation="sigmoid")], name="branch")
    a, b = keras.Input((x.shape[1],)), keras.Input((x.shape[1],))
    layer = SimilarityModel("cauchy", dim, returns="logit")
    model = keras.Model([a, b], layer([branch(a), branch(b)]))
    per_epoch = len(pairs) // BATCH
    model.compile(optimizer=trapezoid_sgd(lr, epochs * per_epoch),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    rng = np.random.default_rng([seed, 46])
    loss = float("nan")
    for epoch in range(epochs):
        order = rng.permutation(len(pairs))
        losses = []
        for k in range(per_epoch):
            rows = order[k * BATCH:(k + 1) * BATCH]
            out = model.train_on_batch([x[pairs[rows, 0]], x[pairs[rows, 1]]], same[rows, None])
            losses.append(float(np.asarray(out[0] if isinstance(out, (list, tuple)) else out)))
        loss = float(np.mean(losses))
        if log:
            log(f"    epoch {epoch + 1}/{epochs}: loss {loss:.4f}")
    return branch, loss, np.exp(np.asarray(layer.log_alpha, np.float32))


def embed(branch, x: np.ndarray, batch: int = 5000) -> np.ndarray:
    """``[n, d]`` -> ``[n, dim]`` float32 (direct calls in blocks: no retracing)."""
    from keras import ops

    return np.concatenate([np.asarray(ops.convert_to_numpy(branch(x[i:i + batch], training=False)), np.float32)
                           for i in range(0, len(x), batch)])


def softmax_error(f_train, y_train, f_val, y_val, f_test, y_test) -> tuple[float, float, float]:
    """A multinomial logistic regression on standardised features, ``C`` chosen on validation.

    Returns ``(test error %, validation error % of the chosen C, C)``.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def fit(C):
        return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=500)).fit(f_train, y_train)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        models = {C: fit(C) for C in C_GRID}
        val = {C: float((m.predict(f_val) == y_val).mean()) for C, m in models.items()}
        best = max(C_GRID, key=lambda C: (val[C], -C))
        return 100.0 * float((models[best].predict(f_test) != y_test).mean()), 100.0 * (1.0 - val[best]), best


# --------------------------------------------------------------------------------- run
def run(net: str, data, seed: int, epochs: int, lr: float, sizes: dict, log) -> dict:
    """One net on one seed: ``{"net", "seed", "test_error", "val_error", "C", "loss", "seconds", ...}``."""
    train_x, train_y, test_x, test_y = data
    kind, hidden = parse_net(net)
    t0 = time.time()
    tr, va = split(len(train_x), seed, sizes["train"], sizes["validation"])
    te = np.arange(min(sizes["test"], len(test_x)))
    x_tr, x_va, x_te = inputs(kind, train_x[tr], train_x[va], test_x[te])
    pairs, same = base_pairs(train_y[tr], sizes["base_pairs"], seed)
    dim = DIM if hidden else DIM_NO_HIDDEN
    branch, loss, alpha = train_net(x_tr, pairs, same, hidden, dim, epochs, lr, seed, log)
    f = [embed(branch, x) for x in (x_tr, x_va, x_te)]
    err, val_err, C = softmax_error(f[0], train_y[tr], f[1], train_y[va], f[2], test_y[te])
    row = {"net": net, "architecture": "-".join(str(v) for v in (x_tr.shape[1], *hidden, dim, 1)), "seed": seed,
           "epochs": epochs, "lr": lr, "test_error": err, "val_error": val_err, "C": C, "loss": loss,
           "alpha": [float(alpha.min()), float(alpha.max())], "seconds": round(time.time() - t0, 1)}
    log(f"  {net} ({row['architecture']}) seed {seed}: test error {err:.2f}% (validation {val_err:.2f}%, C {C:g}), "
        f"loss {loss:.4f}, {row['seconds']:.0f} s")
    return row


def table(rows: list[dict]) -> str:
    from benchmarks.common import mean_sd

    lines = ["| net | architecture | epochs | seeds | ours: test error % (mean +- sd) | validation error % | thesis |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for net in dict.fromkeys(r["net"] for r in rows):
        mine = [r for r in rows if r["net"] == net]
        t, v = mean_sd([r["test_error"] for r in mine]), mean_sd([r["val_error"] for r in mine])
        pub = PUBLISHED.get(parse_net(net))
        pub_s = "-" if pub is None else (f"{pub[0]}%" + (f" ({pub[1]})" if pub[1] is not None else ""))
        lines.append(f"| {net} | {mine[0]['architecture']} | {mine[0]['epochs']} | {len(mine)} | {t['mean']:.2f} +- "
                     f"{t['sd']:.2f} | {v['mean']:.2f} +- {v['sd']:.2f} | {pub_s} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = harness.parser(__doc__, "folder for mnist.json")
    p.add_argument("--mnist", required=True, help="folder of MNIST's four idx files (uncompressed)")
    p.add_argument("--nets", default="none:1000,pca40:1000", help="comma-separated INPUT:WIDTHS (default %(default)s)")
    p.add_argument("--epochs", type=int, default=10, help="passes through the 100,000 base pairs (default %(default)s)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seeds", default="0", help="comma-separated seeds (split, pairs, initialisation)")
    p.add_argument("--quick", action="store_true", help="2,000 training images, 1,000 test images, 1 epoch")
    args = p.parse_args(argv)
    from whale.core.files import write_json_atomic

    t0 = time.time()
    nets = [n for n in args.nets.split(",") if n]
    for net in nets:
        parse_net(net)
    data = load_mnist(args.mnist)
    sizes = QUICK if args.quick else {"train": TRAIN, "validation": VALIDATION, "test": 10000,
                                      "base_pairs": BASE_PAIRS}
    epochs = 1 if args.quick else args.epochs
    print(f"mnist: {args.mnist}, nets {', '.join(nets)}, {epochs} epoch(s) of {2 * sizes['base_pairs']} pairs, "
          f"lr {args.lr}, seeds {args.seeds}", flush=True)
    rows = [run(net, data, int(seed), epochs, args.lr, sizes, lambda m: print(m, flush=True))
            for seed in args.seeds.split(",") if seed for net in nets]
    text = table(rows)
    print("\n" + text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seconds = round(time.time() - t0, 1)
    write_json_atomic(out / "mnist.json", {"benchmark": "mnist", "rows": rows, "table": text, "sizes": sizes,
                                           "seconds": seconds,
                                           "argv": list(argv if argv is not None else sys.argv[1:])})
    print(json.dumps({"benchmark": "mnist", "metrics": {r["net"] + f"/seed{r['seed']}": round(r["test_error"], 2)
                                                        for r in rows}, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="mnist.py"))
