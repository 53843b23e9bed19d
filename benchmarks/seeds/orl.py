"""Seed 004's ORL experiment (Chen Liu 2013, Section 4.3, Table 4.1): similarity models compared. Not a test.

    python benchmarks/seeds/orl.py --out runs/bench_orl [--quick] [--steps N | --search-steps 300,1000,3000] [--splits 5]
        [--seed S] [--c-grid 0.01,0.1,1,10,100]

Data: ``../shared/data/orl/att_faces`` beside the checkout (``s1..s40/1..10.pgm``, 92 x 112
grey; Olivetti Research Laboratory); a missing folder is an error that names it.

Protocol (the thesis' where it says, ours where it is silent; docs/orl.md lists which is which):

1. Each image down-sampled to 28 x 28 (PIL's box filter), 784 inputs, each image standardised
   to zero mean and unit sd (ours: without it the same nets score ~10 points lower).
2. A split: per person 5 random images train (200), the other 5 test (200). Before anything
   trains the code checks that train, validation and test share no file and no bytes (SHA-1).
3. A ``784 - 1000 - 20`` MLP branch, sigmoid units in both layers (thesis eqs. 3.3-3.6; its
   MNIST nets say sigmoid), Glorot-uniform initialisation; the similarity model on top
   (:mod:`whale.objectives.similarity`), ``alpha`` learned jointly (``alpha = exp(a)``).
4. Each step 400 pairs drawn on the fly from the 200 training images, 200 of one person and 200
   of two; loss = mean over the pairs. SGD with Nesterov momentum on a trapezoidal schedule
   (0.5 -> 0.99 over the first 20% of steps, held, down to 0.9 over the last 20%), learning
   rate ``--lr`` (0.01), for a number of steps searched per model (300, 1000 or 3000, ``--search-steps``;
   ``--steps N`` fixes it). The 200 training images go through the branch once per step
   and the pairs index their embeddings: the same loss and gradient as 800 branch passes, 4x cheaper.
5. An L2-SVM (``LinearSVC(loss="squared_hinge")``, primal, features standardised on the rows it
   fits) on the 20 outputs, ``C`` in 0.01..100 chosen by 5-fold
   validation over the training images (each fold holds out one image per person), refit on
   all 200, scored on the 200 test images.
6. ``delta`` (clipped L1 models) and DrLIM's ``margin`` searched "using held-out validation
   data", and (ours) the initial ``alpha`` (1 or 10) of the five probabilistic models, then the
   number of steps: on the first split's training images only, 4 per person train, 1 validates
   (:data:`SEARCHED`, :data:`STEPS_GRID`).
7. 5 splits (new split and initialisation each); mean (sd) beside Table 4.1.

Below the table, the same splits through a ranking evaluation: each test image against the 200
training images by the learned Cauchy similarity (per-id maximum; top-1 and MAP@5 from
:mod:`whale.metrics`), and the raw-pixel cosine nearest neighbour (:mod:`whale.baseline`).

Writes ``OUT/orl.json``; the last stdout line is ``{"benchmark": "orl", ...}``.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import harness  # noqa: E402
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from whale.core.errors import DataError, MissingFileError, run_cli  # noqa: E402

PEOPLE, VIEWS, TRAIN_VIEWS, SIZE, DIM, HIDDEN, PAIRS = 40, 10, 5, 28, 20, 1000, 400
# Table 4.1: accuracy % (sd) on the 200 test images, 5 repeats
PUBLISHED = {
    "gaussian": (87.02, 0.71), "flattened_gaussian": (92.40, 1.80), "laplacian": (86.70, 2.80),
    "clipped_l1": (91.80, 1.88), "prob_clipped_l1": (89.44, 3.20), "cauchy": (94.30, 1.70),
}
PUBLISHED_CNN = 94.05
NAMES = {"gaussian": "Gaussian", "flattened_gaussian": "Flattened Gaussian", "laplacian": "Laplacian",
         "clipped_l1": "Clipped L1 [6]", "prob_clipped_l1": "Probabilistic clipped L1",
         "cauchy": "Cauchy", "drlim": "DrLIM (contrastive)"}
MODELS = ("gaussian", "flattened_gaussian", "laplacian", "clipped_l1", "prob_clipped_l1", "cauchy", "drlim")
QUICK_MODELS = ("gaussian", "clipped_l1", "cauchy")
ALPHA_GRID = (1.0, 10.0)  # initial alpha of the five probabilistic models (the thesis gives none)
STEPS_GRID = (300, 1000, 3000)  # SGD steps, searched last for every model (the thesis gives none)
SEARCHED = {  # searched one after the other on held-out training images, in this order
    "gaussian": (("alpha_init", ALPHA_GRID),), "flattened_gaussian": (("alpha_init", ALPHA_GRID),),
    "laplacian": (("alpha_init", ALPHA_GRID),), "cauchy": (("alpha_init", ALPHA_GRID),),
    "prob_clipped_l1": (("delta", (1.0, 2.0, 4.0)), ("alpha_init", ALPHA_GRID)),
    "clipped_l1": (("delta", (1.0, 2.0, 4.0)),), "drlim": (("margin", (0.5, 1.0, 2.0)),),
}
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
ACTIVATION = "sigmoid"  # both layers (thesis eqs. 3.3-3.6)
NORMALISE = True  # each image to zero mean, unit sd (the thesis' "illuminations were normalized")
MOMENTUM = (0.5, 0.99, 0.9)  # trapezoid: start, plateau, end


# --------------------------------------------------------------------------------- data
def find_faces(data: str | None = None) -> Path:
    """The ``att_faces`` folder: ``data`` or ``<checkout>/../shared/data/orl/att_faces``."""
    root = Path(data) if data else Path(__file__).resolve().parents[2].parent / "shared" / "data" / "orl" / "att_faces"
    if not (root / "s1" / "1.pgm").is_file():
        raise MissingFileError(
            f"ORL faces not found in {root}: expected s1..s{PEOPLE}/1..{VIEWS}.pgm (the AT&T/ORL "
            f"database, 92 x 112 grey) there, or pass --data FOLDER")
    return root


def load_faces(root: Path) -> tuple[np.ndarray, list[list[Path]], list[list[str]]]:
    """``(pixels, paths, digests)``: pixels uint8 ``[40, 10, 28, 28]``, paths and SHA-1s ``[40][10]``."""
    from PIL import Image

    pixels = np.empty((PEOPLE, VIEWS, SIZE, SIZE), np.uint8)
    paths = [[root / f"s{p + 1}" / f"{v + 1}.pgm" for v in range(VIEWS)] for p in range(PEOPLE)]
    digests = []
    for p in range(PEOPLE):
        row = []
        for v in range(VIEWS):
            path = paths[p][v]
            if not path.is_file():
                raise MissingFileError(f"{path}: missing; expected {VIEWS} images per person in {root}")
            raw = path.read_bytes()
            row.append(hashlib.sha1(raw).hexdigest())
            with Image.open(path) as im:
                im = im.convert("L")
                if im.size != (92, 112):
                    raise DataError(f"{path}: expected a 92 x 112 image, got {im.size[0]} x {im.size[1]}")
                pixels[p, v] = np.asarray(im.resize((SIZE, SIZE), Image.BOX))
        digests.append(row)
    return pixels, paths, digests


def make_split(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per person 5 random views train, 5 test: two ``[40, 5]`` int arrays of view indices."""
    rng = np.random.default_rng([seed, 4])
    order = np.stack([rng.permutation(VIEWS) for _ in range(PEOPLE)])
    return np.sort(order[:, :TRAIN_VIEWS], 1), np.sort(order[:, TRAIN_VIEWS:], 1)


def check_disjoint(sets: dict[str, np.ndarray], paths, digests) -> None:
    """Raise ``DataError`` if two named sets of ``[40, k]`` views share a file or a file's bytes."""
    seen_files, seen_bytes = {}, {}
    for name, views in sets.items():
        for p in range(views.shape[0]):
            for v in views[p]:
                f, b = str(paths[p][v]), digests[p][v]
                for table, key in ((seen_files, f), (seen_bytes, b)):
                    other = table.setdefault(key, name)
                    if other != name:
                        raise DataError(f"{f}: in both the {other} and the {name} images "
                                        f"({'same file' if table is seen_files else 'byte-identical'}); "
                                        f"expected disjoint sets")


# --------------------------------------------------------------------------------- training
def sample_pairs(rng: np.random.Generator, n_people: int, per_person: int, n: int = PAIRS) -> tuple:
    """``n`` pairs of row indices into images laid out person-major (``p * per_person + j``).

    Returns ``(pairs [n, 2] int32, same [n] float32)``: the first half one person's two different
    images, the second half two different people's.
    """
    half = n // 2
    p = rng.integers(n_people, size=half)
    a = rng.integers(per_person, size=half)
    b = (a + rng.integers(1, per_person, size=half)) % per_person
    q1 = rng.integers(n_people, size=n - half)
    q2 = (q1 + rng.integers(1, n_people, size=n - half)) % n_people
    first = np.concatenate([p * per_person + a, q1 * per_person + rng.integers(per_person, size=n - half)])
    second = np.concatenate([p * per_person + b, q2 * per_person + rng.integers(per_person, size=n - half)])
    same = np.concatenate([np.ones(half, np.float32), np.zeros(n - half, np.float32)])
    return np.stack([first, second], 1).astype(np.int32), same


def momentum_at(step, total: int):
    """The trapezoid (keras.ops; ``step`` a tensor): 0.5 -> 0.99 over 20% of steps, held, -> 0.9 over the last 20%."""
    from keras import ops

    start, top, end = MOMENTUM
    t = ops.cast(step, "float32") / float(max(total, 1))
    up = start + (top - start) * ops.minimum(t / 0.2, 1.0)
    down = top + (end - top) * ops.clip((t - 0.8) / 0.2, 0.0, 1.0)
    return ops.where(t < 0.8, up, down)


def build(kind: str, images: np.ndarray, steps: int, lr: float, seed: int, **constants):
    """The siamese net over a fixed image table: ``model(pairs [B, 2] int32)`` -> logit or [h1, h2].

    Returns ``(model, branch, similarity_layer)``; compiled with the pair loss of ``kind``.
    """
    import keras
    from keras import ops

    from whale.objectives import similarity as sim

    keras.utils.set_random_seed(seed)
    branch = keras.Sequential([keras.Input((SIZE * SIZE,)),
                               keras.layers.Dense(HIDDEN, activation=ACTIVATION),
                               keras.layers.Dense(DIM, activation="sigmoid")], name="branch")
    table = ops.convert_to_tensor(inputs(images))

    class PairEmbed(keras.layers.Layer):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def call(self, pairs):
            h = self.net(table)  # every training image once; the pairs index the embeddings
            return ops.take(h, pairs[:, 0], axis=0), ops.take(h, pairs[:, 1], axis=0)

    pairs = keras.Input((2,), dtype="int32")
    h1, h2 = PairEmbed(branch)(pairs)
    layer = sim.SimilarityModel(kind, DIM, returns="logit" if kind in sim.SIMILARITIES else "probability",
                                **constants)
    if kind in sim.SIMILARITIES:
        out = layer([h1, h2])
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
    else:
        layer([h1, h2])  # built, weightless: the baselines' cost needs only h1, h2
        out = keras.layers.Concatenate()([h1, h2])

        def loss(same, hh):
            return layer.loss(same, hh[:, :DIM], hh[:, DIM:])

    model = keras.Model(pairs, out)
    model.compile(optimizer=trapezoid_sgd(lr, steps), loss=loss)
    return model, branch, layer


def trapezoid_sgd(lr: float, steps: int):
    """Nesterov SGD at learning rate ``lr`` whose momentum follows :func:`momentum_at` over ``steps`` steps."""
    import keras
    from keras import ops

    class TrapezoidSGD(keras.optimizers.SGD):
        def update_step(self, gradient, variable, learning_rate):
            mom = momentum_at(self.iterations, steps)
            m = self.momentums[self._get_variable_index(variable)]
            lr_ = ops.cast(learning_rate, variable.dtype)
            self.assign(m, m * mom - gradient * lr_)
            self.assign_add(variable, m * mom - gradient * lr_)

    return TrapezoidSGD(learning_rate=lr, momentum=MOMENTUM[0], nesterov=True)


def train(kind: str, images: np.ndarray, per_person: int, steps: int, lr: float, seed: int,
          progress: bool = True, **constants):
    """Train ``kind`` on ``images`` ``[people * per_person, 28, 28]`` (person-major) for ``steps``.

    Returns ``(branch, alpha [20] float32, final loss)``.
    """
    from whale.core.progress import progress_bar

    model, branch, layer = build(kind, images, steps, lr, seed, **constants)
    rng = np.random.default_rng([seed, 7])
    loss = float("nan")
    for _ in progress_bar(range(steps), total=steps, desc=kind, enabled=progress):
        pairs, same = sample_pairs(rng, len(images) // per_person, per_person)
        loss = model.train_on_batch(pairs, same[:, None])
    loss = float(np.asarray(loss[0] if isinstance(loss, (list, tuple)) else loss))
    return branch, np.asarray(layer.alpha, np.float32), loss


def embed(branch, images: np.ndarray) -> np.ndarray:
    """``[n, 28, 28]`` uint8 -> ``[n, 20]`` float32."""
    from keras import ops

    # one direct call (400 rows at most): predict() would retrace a new function per model
    return np.asarray(ops.convert_to_numpy(branch(inputs(images), training=False)), np.float32)


def inputs(images: np.ndarray) -> np.ndarray:
    """``[n, 28, 28]`` uint8 -> ``[n, 784]`` float32 branch inputs: pixels / 255, or per image
    standardised (zero mean, unit sd) when :data:`NORMALISE`."""
    x = images.reshape(len(images), -1).astype(np.float32) / 255.0
    if NORMALISE:
        x -= x.mean(1, keepdims=True)
        x /= x.std(1, keepdims=True) + 1e-6
    return x


# --------------------------------------------------------------------------------- evaluation
def l2_svm(f_train, y_train, f_test, y_test, folds: np.ndarray, grid=C_GRID) -> tuple[float, float]:
    """L2-SVM accuracy on the test features with ``C`` (from ``grid``) chosen by validation folds of the training rows.

    ``folds``: ``[n_train]`` int, the validation fold of each training row. Returns ``(accuracy, C)``.
    """
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    def fit(C, X, y):
        # primal liblinear (200 rows, 20 columns): fast at any C; features standardised on the fit rows
        return make_pipeline(StandardScaler(), LinearSVC(loss="squared_hinge", C=C, dual=False,
                                                         max_iter=1000)).fit(X, y)

    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        val = {C: np.mean([(fit(C, f_train[folds != k], y_train[folds != k])
                            .predict(f_train[folds == k]) == y_train[folds == k]).mean()
                           for k in np.unique(folds)]) for C in grid}
        best = max(grid, key=lambda C: (val[C], -C))
        acc = float((fit(best, f_train, y_train).predict(f_test) == y_test).mean())
    return acc, best


def ranking(scores: np.ndarray, gallery_ids, query_ids) -> dict[str, float]:
    """Top-1 and MAP@5 of ``scores`` ``[n_query, n_gallery]`` (per-id maximum)."""
    from benchmarks.common import top_k_ids
    from whale.metrics import map_at_k, top_k_accuracy

    top = top_k_ids(scores, [str(i) for i in gallery_ids], 5)
    truth = [str(i) for i in query_ids]
    return {"top1": top_k_accuracy(top, truth, 1), "map5": map_at_k(top, truth, 5)}


def search_constants(kind, pixels, paths, digests, steps, lr, seed, log, steps_grid=(), c_grid=C_GRID) -> dict:
    """``delta`` / ``margin`` / ``alpha_init`` of ``kind``, then its ``steps`` (from ``steps_grid``,
    when given), by held-out validation on split 0's training images.

    4 training images per person train, the 5th validates (L2-SVM accuracy); the test images are
    never seen. Each constant of :data:`SEARCHED` in turn, the ones before it fixed at their best
    (trained for ``steps``); ``steps`` last, with all of them fixed.
    """
    train_views, test_views = make_split(seed)
    fit_views, val_views = train_views[:, 1:], train_views[:, :1]
    check_disjoint({"search-fit": fit_views, "search-validation": val_views, "test": test_views}, paths, digests)
    fit_img = np.concatenate([pixels[p, fit_views[p]] for p in range(PEOPLE)])
    val_img = np.concatenate([pixels[p, val_views[p]] for p in range(PEOPLE)])
    y_fit, y_val = np.repeat(np.arange(PEOPLE), 4), np.arange(PEOPLE)
    folds = np.tile(np.arange(4), PEOPLE)
    chosen, cache = {}, {}
    searched = SEARCHED.get(kind, ()) + ((("steps", steps_grid),) if steps_grid else ())
    for name, grid in searched:
        scores = {}
        for value in grid:
            trial = {**chosen, name: value}
            key = tuple(sorted({"steps": steps, **trial}.items()))  # trained at `steps` unless searching them
            if key not in cache:
                kwargs = dict(trial)
                n = kwargs.pop("steps", steps)
                branch, _, _ = train(kind, fit_img, 4, n, lr, seed + 1000, progress=False, **kwargs)
                cache[key], _ = l2_svm(embed(branch, fit_img), y_fit, embed(branch, val_img), y_val, folds, c_grid)
            scores[value] = cache[key]
        chosen[name] = max(grid, key=lambda v: (scores[v], -v))
        log(f"  {kind}: {name} search on held-out training images " +
            ", ".join(f"{v:g}: {100 * a:.1f}%" for v, a in scores.items()) + f" -> {chosen[name]:g}")
    return chosen


def run_split(split: int, seed: int, models, constants, pixels, paths, digests, steps, lr, log,
              c_grid=C_GRID) -> dict:
    """Every model on one split: ``{"accuracy": {kind: %}, "C": {...}, "ranking": {...}}``."""
    from whale.baseline import cosine_scores, pixel_features
    from whale.objectives.similarity import similarity_matrix

    train_views, test_views = make_split(seed + split)
    folds = np.tile(np.arange(TRAIN_VIEWS), PEOPLE)  # fold k holds out the k-th training view of each person
    for k in range(TRAIN_VIEWS):
        check_disjoint({"train": train_views[:, np.arange(TRAIN_VIEWS) != k],
                        "validation": train_views[:, k:k + 1], "test": test_views}, paths, digests)
    tr_img = np.concatenate([pixels[p, train_views[p]] for p in range(PEOPLE)])
    te_img = np.concatenate([pixels[p, test_views[p]] for p in range(PEOPLE)])
    y_tr, y_te = np.repeat(np.arange(PEOPLE), TRAIN_VIEWS), np.repeat(np.arange(PEOPLE), VIEWS - TRAIN_VIEWS)
    out = {"accuracy": {}, "C": {}, "alpha": {}, "loss": {}, "ranking": {}}
    for kind in models:
        t0 = time.time()
        kwargs = dict(constants.get(kind, {}))
        n = kwargs.pop("steps", steps)
        branch, alpha, loss = train(kind, tr_img, TRAIN_VIEWS, n, lr, seed * 100 + split, progress=False, **kwargs)
        f_tr, f_te = embed(branch, tr_img), embed(branch, te_img)
        acc, C = l2_svm(f_tr, y_tr, f_te, y_te, folds, c_grid)
        out["accuracy"][kind], out["C"][kind], out["loss"][kind] = 100 * acc, C, loss
        out["alpha"][kind] = [float(alpha.min()), float(alpha.max())]
        if kind == "cauchy":
            out["ranking"]["cauchy"] = ranking(similarity_matrix("cauchy", f_te, f_tr, alpha), y_tr, y_te)
        log(f"  split {split} {kind:18s} {100 * acc:6.2f}%  C={C:g}  loss={loss:.4f}  "
            f"alpha {alpha.min():.3g}..{alpha.max():.3g}  {time.time() - t0:.1f}s")
    pix = cosine_scores(pixel_features(te_img), pixel_features(tr_img))
    out["ranking"]["pixels"] = ranking(pix, y_tr, y_te)
    return out


def table(results: dict, models) -> str:
    """Our mean (sd) beside Table 4.1, one row per model."""
    lines = [f"{'model':26s} {'steps':>6s} {'ours: accuracy % (sd)':>22s} {'thesis Table 4.1':>17s} "
             f"{'gap / thesis sd':>16s}"]
    for kind in models:
        ours = results["summary"][kind]
        pub = PUBLISHED.get(kind)
        pub_s = f"{pub[0]:.2f} ({pub[1]:.2f})" if pub else "-"
        gap = f"{(ours['mean'] - pub[0]) / pub[1]:+.1f}" if pub else "-"
        lines.append(f"{NAMES[kind]:26s} {results['steps'][kind]:6d} {ours['mean']:14.2f} ({ours['sd']:.2f}) "
                     f"{pub_s:>17s} {gap:>16s}")
    lines.append(f"{'CNN on class labels [6]':26s} {'-':>6s} {'-':>22s} {PUBLISHED_CNN:17.2f} {'-':>16s}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = harness.parser(__doc__, "folder for orl.json")
    p.add_argument("--data", default=None, help="att_faces folder (default ../shared/data/orl/att_faces)")
    p.add_argument("--quick", action="store_true", help="1 split, 40 steps, 3 models, no search")
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--steps", type=int, default=None,
                   help="SGD steps of every training, no steps search (default: searched per model; quick 40)")
    p.add_argument("--search-steps", default=",".join(map(str, STEPS_GRID)),
                   help="steps grid searched per model on held-out training images (default %(default)s); "
                        "the other constants are searched at its first value")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--c-grid", default=",".join(f"{c:g}" for c in C_GRID),
                   help="the L2-SVM's C values, chosen by 5-fold validation on the training images "
                        "(default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(MODELS))
    args = p.parse_args(argv)
    from benchmarks.common import mean_sd
    from whale.core.files import write_json_atomic

    t_start = time.time()
    root = find_faces(args.data)
    models = tuple(args.models.split(",")) if args.models else (QUICK_MODELS if args.quick else MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise DataError(f"--models: unknown {', '.join(unknown)}; expected some of {', '.join(MODELS)}")
    splits = 1 if args.quick else args.splits
    try:
        steps_grid = () if args.steps or args.quick else tuple(int(v) for v in args.search_steps.split(","))
    except ValueError:
        raise DataError(f"--search-steps {args.search_steps!r}: expected comma-separated step counts, e.g. 300,1000")
    if any(n < 1 for n in steps_grid):
        raise DataError(f"--search-steps {args.search_steps!r}: step counts must be positive")
    steps = args.steps or (40 if args.quick else steps_grid[0])
    try:
        c_grid = tuple(float(v) for v in args.c_grid.split(","))
    except ValueError:
        raise DataError(f"--c-grid {args.c_grid!r}: expected comma-separated positive numbers, e.g. 0.001,0.01,0.1")
    if not c_grid or any(not c > 0 for c in c_grid):
        raise DataError(f"--c-grid {args.c_grid!r}: expected comma-separated positive numbers, e.g. 0.001,0.01,0.1")
    pixels, paths, digests = load_faces(root)
    log = print
    what = f"steps searched in {', '.join(map(str, steps_grid))}" if steps_grid else f"{steps} steps"
    log(f"orl: {root}, {splits} split(s), {what} of {PAIRS} pairs, lr {args.lr}, models {', '.join(models)}")
    constants = {}
    for kind in models:
        if (kind in SEARCHED or steps_grid) and not args.quick:
            constants[kind] = search_constants(kind, pixels, paths, digests, steps, args.lr, args.seed, log,
                                               steps_grid, c_grid)
    per_split = [run_split(s, args.seed, models, constants, pixels, paths, digests, steps, args.lr, log, c_grid)
                 for s in range(splits)]
    results = {
        "benchmark": "orl", "splits": splits, "lr": args.lr, "seed": args.seed, "steps_grid": list(steps_grid),
        "c_grid": list(c_grid),
        "steps": {kind: constants.get(kind, {}).get("steps", steps) for kind in models},
        "constants": constants, "per_split": per_split,
        "summary": {k: mean_sd([r["accuracy"][k] for r in per_split]) for k in models},
        "ranking": {m: {k: mean_sd([r["ranking"][m][k] for r in per_split]) for k in ("top1", "map5")}
                    for m in per_split[0]["ranking"]},
        "published": PUBLISHED, "published_cnn": PUBLISHED_CNN,
    }
    results["seconds"] = round(time.time() - t_start, 1)
    print()
    print(table(results, models))
    print("\nranking, test images against the 200 training images (per-id maximum), mean (sd) over splits:")
    for m, r in results["ranking"].items():
        what = "Cauchy similarity (learned alpha)" if m == "cauchy" else "raw pixels, cosine"
        print(f"  {what:34s} top-1 {100 * r['top1']['mean']:.2f}% ({100 * r['top1']['sd']:.2f})"
              f"  MAP@5 {r['map5']['mean']:.4f} ({r['map5']['sd']:.4f})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "orl.json", results)
    print(json.dumps({"benchmark": "orl", "metrics": {k: round(v["mean"], 2) for k, v in results["summary"].items()},
                      "seconds": results["seconds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="orl.py"))
