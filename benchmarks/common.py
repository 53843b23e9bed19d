"""Shared pieces of every group of benchmarks (``seeds/omniglot.py``, ``flukes/humpback.py``, ...). Not a test.

* :func:`shared_data` finds ``../shared/data/...`` beside the checkout (None when absent:
  the benchmarks then print a message and exit 0; nothing from there is copied into the repo).
* :func:`build_competition` writes a Kaggle-format mini-competition (``train/``, ``test/``,
  ``train.csv``, ``sample_submission.csv``, ``test_solution.csv``) from lists of
  ``(image path, id)``; images get anonymous names so that a file name never gives its id away.
* :func:`one_shot_tasks` / :func:`one_shot_accuracy`: N-way one-shot tasks as in Lake et al.
  (one group's image of each of N ids is the gallery, another group's images are the queries).
* :class:`PixelMethod` (raw-pixel cosine nearest neighbour, :mod:`whale.baseline`) and
  :class:`SiameseMethod` (a trained run folder) share one interface: ``features(paths)``
  ``[n, d] float32`` and ``scores(fq, fg)`` ``[n_q, n_g] float32``, so every method is
  evaluated by the same code (:func:`evaluate_competition`).
* :func:`train_variants` trains the config twice on fold 0: with the config's adversarial
  schedule and with random negatives only (every stage at K = 1000, same epochs).
* :func:`results_table`, :func:`miner_verdict`, :func:`final_json` print the results; the last
  stdout line of a benchmark is one JSON object ``{"benchmark", "metrics", "seconds"}``.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from whale import NEW_WHALE

TOTAL_BUDGET_S = 1170.0
"""Default wall-clock budget of one benchmark: under 20 minutes on 2 CPU cores, all included."""
EVAL_RESERVE_S = 90.0
"""Seconds kept back from the training budget for the evaluation after training."""
RANDOM_K = 1000.0
"""K of the random-negatives ablation: noise this large swamps the scores (Algorithm 1)."""


# ------------------------------------------------------------------------------------ data
def repo_root() -> Path:
    """The checkout holding ``benchmarks/`` and ``whale/``."""
    return Path(__file__).resolve().parents[1]


def shared_data(*parts: str) -> Path | None:
    """``<checkout>/../shared/data/<parts>`` if it exists, else None."""
    path = repo_root().parent / "shared" / "data" / Path(*parts)
    return path if path.exists() else None


def build_competition(out, train: Sequence[tuple], test: Sequence[tuple] = (),
                      suffix: str | None = None) -> Path:
    """Write a Kaggle-format competition folder from ``(image path, id)`` pairs.

    Args:
        out: the folder; its ``train/`` and ``test/`` are emptied first.
        train: ``(path, id)`` per training image; ``id`` may be ``new_whale``.
        test: ``(path, id)`` per test image; the ids go to ``test_solution.csv`` only.
        suffix: file suffix of the copies (e.g. ``".jpg"``); None keeps each source's suffix.

    Returns:
        ``out``. Training images are named ``tr00000.<suffix>``..., test images
        ``te00000.<suffix>``..., in the given order; ``sample_submission.csv`` lists the test
        images with the placeholder prediction ``new_whale``.

    Raises:
        ValueError: an id is empty, or a source file is missing (the message names it).
    """
    out = Path(out)
    for sub in ("train", "test"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)

    def copy(items, folder, prefix) -> pd.DataFrame:
        rows = []
        for i, (src, label) in enumerate(items):
            src, label = Path(src), str(label)
            if not label.strip():
                raise ValueError(f"{src}: empty id; expected an individual's name or {NEW_WHALE}")
            if not src.is_file():
                raise ValueError(f"{src}: image file not found")
            name = f"{prefix}{i:05d}{suffix if suffix is not None else src.suffix.lower()}"
            shutil.copyfile(src, out / folder / name)
            rows.append((name, label))
        return pd.DataFrame(rows, columns=["Image", "Id"])

    tr = copy(train, "train", "tr")
    te = copy(test, "test", "te")
    tr.to_csv(out / "train.csv", index=False)
    te.to_csv(out / "test_solution.csv", index=False)
    pd.DataFrame({"Image": te["Image"], "Id": NEW_WHALE}).to_csv(out / "sample_submission.csv", index=False)
    return out


# ------------------------------------------------------------------------ one-shot tasks
def one_shot_tasks(ids: Sequence[str], groups: Sequence[str], n_way: int = 20, n_tasks: int = 40,
                   seed: int = 0, families: Sequence[str] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """N-way one-shot tasks over a set of images.

    Each task draws two distinct groups (Omniglot: drawers) A and B and ``n_way`` distinct ids
    that have an image in both; the gallery is A's image of each id, the queries are B's
    images, in the same id order (query ``i`` belongs with gallery ``i``). With ``families``
    (Omniglot: alphabets) the ids of a task come from one family when it has enough ids
    (harder, as in Lake et al. and Koch et al.), else from all.

    Args:
        ids, groups: ``[n]`` str, the id and group of each image.
        n_way: ids per task. n_tasks: number of tasks. seed: seed of the draw.
        families: ``[n]`` str family of each image's id, or None.

    Returns:
        ``n_tasks`` pairs ``(gallery, queries)``, each ``[n_way]`` int64 indices into the
        images.

    Raises:
        ValueError: lengths differ, or no pair of groups has ``n_way`` ids in common.
    """
    ids, groups = np.asarray(ids, dtype=str), np.asarray(groups, dtype=str)
    fam = np.asarray(families if families is not None else [""] * len(ids), dtype=str)
    if not len(ids) == len(groups) == len(fam):
        raise ValueError(f"ids ({len(ids)}), groups ({len(groups)}) and families ({len(fam)}) "
                         "must have one entry per image")
    where: dict[tuple[str, str], int] = {}
    for i, key in enumerate(zip(ids, groups)):
        where.setdefault(key, i)  # first image of an (id, group) pair
    family_of = dict(zip(ids, fam))
    group_names = np.unique(groups)
    rng = np.random.default_rng(seed)
    tasks = []
    for t in range(n_tasks):
        for _attempt in range(100):
            a, b = rng.choice(group_names, size=2, replace=False) if len(group_names) > 1 else (None, None)
            if a is None:
                break
            both = np.array(sorted({i for (i, g) in where if g == a} & {i for (i, g) in where if g == b}))
            if len(both) < n_way:
                continue
            fams = np.array([family_of[i] for i in both])
            names, counts = np.unique(fams, return_counts=True)
            big = names[counts >= n_way]
            if len(big):
                both = both[fams == rng.choice(big)]
            chosen = rng.choice(both, size=n_way, replace=False)
            tasks.append((np.array([where[(c, a)] for c in chosen], dtype=np.int64),
                          np.array([where[(c, b)] for c in chosen], dtype=np.int64)))
            break
        else:
            a = None
        if a is None:
            raise ValueError(f"task {t}: no two groups share {n_way} ids; expected at least "
                             f"{n_way} ids with images in two groups")
    return tasks


def one_shot_accuracy(score_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                      tasks: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Share of queries whose best-scoring gallery image is their own id, over all tasks.

    ``score_fn(queries, gallery)`` gets ``[n_way]`` int64 indices and returns the
    ``[n_way, n_way]`` query-vs-gallery scores (higher = more alike). Ties count as wrong
    unless the right image is the first of the tied ones (``argmax``).
    """
    right = total = 0
    for gallery, queries in tasks:
        s = np.asarray(score_fn(queries, gallery), dtype=np.float64)
        if s.shape != (len(queries), len(gallery)):
            raise ValueError(f"score_fn returned shape {s.shape}, expected {(len(queries), len(gallery))}")
        right += int((s.argmax(axis=1) == np.arange(len(queries))).sum())
        total += len(queries)
    return right / total if total else 0.0


# ------------------------------------------------------------------------------ methods
class PixelMethod:
    """Raw-pixel cosine nearest neighbour (:mod:`whale.baseline`) on whole images."""

    name = "pixel NN (cosine)"

    def __init__(self, size: int = 32, channels: int = 1, margin: float = 0.05):
        self.size, self.channels, self.margin = size, channels, margin

    def features(self, paths: Sequence, boxes: Sequence | None = None) -> np.ndarray:
        """``[n, size*size*channels] float32``, rows L2-normalised; ``boxes``: per photo ``(x0, y0, x1, y1)`` to
        crop to (widened by ``margin``), or None for whole images."""
        from whale.baseline import pixel_features
        from whale.data import load_crop

        boxes = [None] * len(paths) if boxes is None else list(boxes)
        return pixel_features(np.stack([load_crop(p, b, self.size, channels=self.channels, margin=self.margin)
                                        for p, b in zip(paths, boxes)]))

    def scores(self, fq: np.ndarray, fg: np.ndarray) -> np.ndarray:
        from whale.baseline import cosine_scores

        return cosine_scores(fq, fg)


class FrozenBranchMethod:
    """A trunk config's pretrained branch as it comes, nothing trained (:mod:`whale.inference.trunk`: its maps, the
    rest of its backbone, global max pooling), cosine: what ImageNet features alone do."""

    name = "ImageNet features (cosine)"

    def __init__(self, config, cache=None):
        from whale.config import load_config
        from whale.inference.trunk import TrunkMaps

        self.maps, self.top = TrunkMaps.for_config(load_config(config), cache, progress=False)

    def features(self, paths: Sequence, boxes: Sequence | None = None) -> np.ndarray:
        """``[n, d] float32``, rows L2-normalised."""
        from whale.inference.features import ImageBatches, compute_features
        from whale.inference.trunk import first_view

        store = self.maps.store(list(paths), boxes)
        f = compute_features(self.top, ImageBatches(store, None, store.map_size, 64, plain=first_view),
                             progress=False)
        return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)

    def scores(self, fq: np.ndarray, fg: np.ndarray) -> np.ndarray:
        from whale.baseline import cosine_scores

        return cosine_scores(fq, fg)


class SiameseMethod:
    """A trained run folder (checkpoint ``best``): branch features, head scores."""

    def __init__(self, run_dir, name: str, checkpoint: str = "best", trunk_cache=None):
        from whale.inference.runs import load_run_model, RunScorer

        model, cfg = load_run_model(run_dir, checkpoint)
        self.name, self.run_dir = name, Path(run_dir)
        if cfg.trunk.layer is None:
            self._rs = RunScorer(model, cfg.model.channels, cfg.box_margin, verbose=False)
        else:  # its branch reads the maps of its trunk (kept in trunk_cache)
            self._rs = RunScorer.for_config(model, cfg, verbose=False, trunk_cache=trunk_cache)

    def features(self, paths: Sequence, boxes: Sequence | None = None) -> np.ndarray:
        """``[n, d] float32`` branch features of the whole images, or of their ``boxes`` (widened by the run's
        ``box_margin``, as in training)."""
        return self._rs.features(list(paths), [None] * len(paths) if boxes is None else list(boxes))[0, 0]

    def scores(self, fq: np.ndarray, fg: np.ndarray) -> np.ndarray:
        return self._rs.scorer.matrix(fq, fg, progress=False).astype(np.float32)


# --------------------------------------------------------------------------- evaluation
def top_k_ids(scores: np.ndarray, gallery_ids: Sequence[str], k: int) -> list[list[str]]:
    """The ``k`` best ids per query by per-id max score (no ``new_whale``)."""
    from whale.ranking import top_id_scores

    names, idx, _ = top_id_scores(scores, gallery_ids, k=k)
    return [list(r) for r in names[idx]]


def evaluate_competition(method, comp_dir, seed: int = 0, fold: int = 0,
                         groups: dict[str, str] | None = None) -> dict[str, float]:
    """MAP@5 and top-1/5/10 accuracy of ``method`` on a mini-competition's test set.

    The ``new_whale`` threshold is tuned on validation fold ``fold`` of ``train.csv`` (the
    toolkit's fold rules, the fold's own training images as gallery); the test images are then
    ranked against every known-id training image. Top-k accuracy counts the test images of
    known ids only (is the true id among the k best ids, ``new_whale`` left out).

    ``groups`` (test image name -> group, e.g. the view of a lion photo) adds ``by_group``:
    ``{group: {"n", "top1", "top5", "top10"}}`` over the test images of known ids in each group.

    Returns:
        ``{"val_map5", "threshold", "map5", "top1", "top5", "top10", "new_whale_share"}``
        (and ``by_group``).
    """
    from whale.data import load_competition, read_solution
    from whale.metrics import map_at_k, top_k_accuracy
    from whale.ranking import predict_top5, tune_threshold
    from whale.data import fold_data, ImageSet

    comp = load_competition(comp_dir)
    data = fold_data(comp, fold, seed)
    known = ImageSet.known(comp)
    ids = known.ids
    f_all = method.features(known.paths)
    f_gal = f_all[known.positions(data.gallery.names)]
    f_val = method.features(data.val.paths)
    t, val_map, _ = tune_threshold(method.scores(f_val, f_gal), data.gallery.ids, data.val.ids)
    f_test = method.features([comp.test_path(n) for n in comp.test_images])
    s_test = method.scores(f_test, f_all)
    sol = read_solution(comp_dir, comp.test_images)
    actual = [sol[n] for n in comp.test_images]
    preds = predict_top5(s_test, ids, t)
    is_known = np.array([a != NEW_WHALE for a in actual])
    top = top_k_ids(s_test[is_known], ids, 10)
    act_known = [a for a, k in zip(actual, is_known) if k]
    out = {"val_map5": float(val_map), "threshold": float(t), "map5": map_at_k(preds, actual),
           "top1": top_k_accuracy(top, act_known, 1), "top5": top_k_accuracy(top, act_known, 5),
           "top10": top_k_accuracy(top, act_known, 10),
           "new_whale_share": float(np.mean([p[0] == NEW_WHALE for p in preds]))}
    if groups is not None:
        names_known = [n for n, k in zip(comp.test_images, is_known) if k]
        out["by_group"] = {}
        for g in sorted({groups[n] for n in names_known}):
            sel = [i for i, n in enumerate(names_known) if groups[n] == g]
            out["by_group"][g] = {"n": len(sel), **{f"top{k}": top_k_accuracy([top[i] for i in sel],
                                                                               [act_known[i] for i in sel], k)
                                                    for k in (1, 5, 10)}}
    return out


# ----------------------------------------------------------------------------- training
def random_negatives(cfg):
    """The same run with random negatives only: every stage at K = 1000, no decay."""
    from whale.config import config_from_dict

    d = cfg.to_dict()
    d["name"] = f"{cfg.name}-random"
    for s in d["stages"]:
        s["k"], s["k_end"] = RANDOM_K, None
    return config_from_dict(d, source=f"{cfg.name} (random negatives)")


def prepare(args):
    """Start of a benchmark run: TensorFlow set up, ``args.out`` created, the config loaded
    with ``args.seed`` (shortened with ``--quick``). Returns ``(cfg, out)``."""
    from whale.config import load_config

    setup_tensorflow()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config, overrides={"seed": args.seed})
    if args.quick:
        cfg = quick_config(cfg, 0.2)
    return cfg, out


def quick_config(cfg, epochs_scale: float = 0.25, label: str = "quick"):
    """A copy with each stage's length (epochs, steps or pairs) scaled by ``epochs_scale``
    (rounded, at least 1): shortened for ``--quick``, or lengthened."""
    from whale.config import LENGTH_KEYS, config_from_dict

    d = cfg.to_dict()
    for s in d["stages"]:
        key = next(k for k in LENGTH_KEYS if k in s)
        s[key] = max(1, int(round(s[key] * epochs_scale)))
    return config_from_dict(d, source=f"{cfg.name} ({label})")


def training_budget(total_s: float | None, t0: float) -> float | None:
    """Seconds left for training: ``total_s`` since ``t0`` minus :data:`EVAL_RESERVE_S`
    (None when ``total_s`` is None or 0: no limit)."""
    if not total_s:
        return None
    return max(60.0, total_s - (time.time() - t0) - EVAL_RESERVE_S)


@dataclass
class Variant:
    """One trained model of a benchmark."""

    label: str
    run_dir: Path
    best_val_map5: float | None
    seconds: float
    epochs_done: int
    epochs_total: int


def train_variants(cfg, comp_dir, out_dir, budget_s: float | None = None, log=print,
                   methods: Sequence[str] = ("random", "adversarial")) -> list[Variant]:
    """Train fold 0 twice: ``random`` (K = 1000 only), then ``adversarial`` (the config's schedule).

    Run folders: ``out_dir/random`` and ``out_dir/adversarial`` (an existing one is resumed).
    ``methods``: which of the two to train (in that order). ``budget_s``: wall-clock seconds
    for all; each gets an equal share, and a run that would overrun stops early (its best
    checkpoint so far is evaluated; ``epochs_done`` says how far it got), so that both variants
    see the same time.
    """
    from whale.training.trainer import train_fold

    unknown = set(methods) - {"random", "adversarial"}
    if unknown or not methods:
        raise ValueError(f"methods: expected 'random' and/or 'adversarial', received {list(methods)}")
    out = []
    for label, c in (("random", random_negatives(cfg)), ("adversarial", cfg)):
        if label not in methods:
            continue
        t0 = time.time()
        deadline = None if budget_s is None else t0 + budget_s / len(methods)
        log(f"--- training {label} negatives -> {Path(out_dir) / label}")
        res = train_fold(c, comp_dir, 0, Path(out_dir) / label, resume=True, deadline=deadline,
                         verbose=0, log=lambda m, lb=label: log(f"  [{lb}] {m}"))
        out.append(Variant(label, Path(out_dir) / label, res.best_val_map5, time.time() - t0,
                           res.epochs_done, res.epochs_total))
        log(f"--- {label}: {res.epochs_done}/{res.epochs_total} epochs, best validation MAP@5 "
            f"{res.best_val_map5}, {time.time() - t0:.0f} s")
    return out


# ------------------------------------------------------------------------------ reports
def results_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> str:
    """A Markdown table: ``rows`` of dicts, ``columns`` of ``(key, header)``; floats as %.3f."""
    def cell(v):
        if v is None:
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(h for _, h in columns) + " |",
             "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join(lines)


def miner_verdict(adversarial: float, random: float, what: str) -> str:
    """One sentence: does adversarial mining help on ``what``, and by how much."""
    gap = adversarial - random
    if abs(gap) < 1e-9:
        return f"miner: no difference on {what} ({adversarial:.3f} both)"
    word = "helps" if gap > 0 else "hurts"
    return (f"miner {word} on {what}: adversarial {adversarial:.3f} vs random negatives "
            f"{random:.3f} (gap {gap:+.3f})")


def with_miner_gaps(metrics: dict) -> dict:
    """``metrics`` plus ``miner_gap_X`` = ``X_adversarial - X_random`` for every ``X`` that has both."""
    out = dict(metrics)
    for key in list(metrics):
        if key.endswith("_adversarial") and not key.startswith(("train_s", "val_", "epochs")):
            what = key[: -len("_adversarial")]
            if f"{what}_random" in metrics:
                out[f"miner_gap_{what}"] = metrics[key] - metrics[f"{what}_random"]
    return out


def with_boxes(comp_dir, boxes_csv, out_dir) -> Path:
    """A copy of competition ``comp_dir`` whose boxes are ``boxes_csv``: its CSVs copied,
    ``train/`` and ``test/`` as links. Every training and test image must have a row there
    (ValueError naming how many lack one): an image without a box would be used whole."""

    from whale.data import load_competition

    comp_dir, out_dir = Path(comp_dir), Path(out_dir)
    comp = load_competition(comp_dir)
    names = set(comp.train["Image"]) | set(comp.test_images)
    missing = sorted(names - set(pd.read_csv(boxes_csv)["Image"]))
    if missing:
        raise ValueError(f"{boxes_csv}: no box for {len(missing)} of {comp_dir}'s {len(names)} images, "
                         f"e.g. {missing[0]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train.csv", "sample_submission.csv", "test_solution.csv"):
        shutil.copy(comp_dir / name, out_dir / name)
    for d in ("train", "test"):
        if not (out_dir / d).exists():
            os.symlink((comp_dir / d).resolve(), out_dir / d)
    shutil.copy(boxes_csv, out_dir / "bounding_boxes.csv")
    return out_dir


def wait_or_kill(proc, log, timeout_s: float):
    """A child process's exit status, or ``"killed"`` when it ran past ``timeout_s`` seconds (killed then); its
    ``log`` file closed either way."""
    import subprocess

    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "killed"
    log.close()
    return rc


def byte_digests(paths: Sequence) -> list[str]:
    """The SHA-1 of each file's bytes: byte-identical images have the same digest."""
    import hashlib

    return [hashlib.sha1(Path(p).read_bytes()).hexdigest() for p in paths]


def mean_sd(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "sd", "se", "n"}`` of ``values`` (sample standard deviation, ``se = sd / sqrt(n)``)."""
    v = np.asarray(values, dtype=float)
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return {"mean": float(v.mean()), "sd": sd, "se": sd / np.sqrt(len(v)), "n": int(len(v))}


def seed_table(results: Sequence[dict], keys: Sequence[tuple[str, str]]) -> tuple[str, dict]:
    """A Markdown table of ``keys`` (``(metric, label)``) per seed plus mean +- sd, and the summary dict."""
    summary = {k: mean_sd([r[k] for r in results]) for k, _ in keys}
    lines = ["| seed | " + " | ".join(h for _, h in keys) + " |", "| --- " * (len(keys) + 1) + "|"]
    lines += [f"| {r['seed']} | " + " | ".join(f"{r[k]:.3f}" for k, _ in keys) + " |" for r in results]
    lines.append("| mean +- sd | " + " | ".join(f"{summary[k]['mean']:.3f} +- {summary[k]['sd']:.3f}"
                                                  for k, _ in keys) + " |")
    return "\n".join(lines), summary


def final_json(benchmark: str, metrics: dict, seconds: float) -> str:
    """The benchmark's last stdout line."""
    clean = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in metrics.items()}
    return json.dumps({"benchmark": benchmark, "metrics": clean, "seconds": round(seconds, 1)})


def setup_tensorflow(threads: int = 2) -> None:
    """Quiet TensorFlow on the CPU with a fixed number of threads (call before importing it).

    Does nothing under another Keras backend (``KERAS_BACKEND=jax`` on the GPU machine)."""

    from whale.command import quiet_unless_debugging

    quiet_unless_debugging()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if os.environ["KERAS_BACKEND"] != "tensorflow":
        return
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """``(resident, anonymous)`` MB of process ``pid`` and all its descendants now (Linux ``/proc``; zeros
    elsewhere): all their resident pages, and those that are no file's (``statm``'s resident less its shared):
    memory-mapped files' pages the kernel can drop and reread count in the first only."""
    children: dict[int, list[int]] = {}
    pages: dict[int, tuple[int, int]] = {}
    size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            resident, shared = (int(v) for v in (entry / "statm").read_text().split()[1:3])
        except (OSError, ValueError, IndexError):
            continue  # the process ended meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
        pages[int(entry.name)] = (resident, resident - shared)
    total = np.zeros(2)
    todo = [pid]
    while todo:
        p = todo.pop()
        total += pages.get(p, (0, 0))
        todo += children.get(p, [])
    resident, anonymous = total * size / 2 ** 20
    return float(resident), float(anonymous)


def run_measured(cmd: Sequence[str], log_path: Path, every_s: float = 0.5, **popen) -> tuple[int, float, dict]:
    """Run ``cmd``, its output into ``log_path``, sampling the memory of it and its worker processes every
    ``every_s`` seconds (:func:`tree_memory_mb`): ``(exit status, wall seconds, {"resident": peak MB,
    "anonymous": peak MB})``. A peak shorter than a sample may be missed."""
    import subprocess

    t0 = time.perf_counter()
    peak = np.zeros(2)
    with open(log_path, "w") as fh:
        proc = subprocess.Popen(list(cmd), stdout=fh, stderr=subprocess.STDOUT, **popen)
        while proc.poll() is None:
            peak = np.maximum(peak, tree_memory_mb(proc.pid))
            time.sleep(every_s)
    return proc.returncode, time.perf_counter() - t0, {"resident": float(peak[0]), "anonymous": float(peak[1])}


class MemoryLimit:
    """A Linux memory cgroup holding a child process under ``gb`` GB (page cache included, which the kernel then
    reclaims before it kills): ``preexec`` puts the child in it; ``peak_mb`` reads the cgroup's high-water mark;
    ``close`` removes it. Needs a writable cgroup v1 memory hierarchy or cgroup v2 (as root in a container);
    elsewhere ``RuntimeError`` says so."""

    V1 = Path("/sys/fs/cgroup/memory")
    V2 = Path("/sys/fs/cgroup")

    def __init__(self, gb: float):
        v2 = (self.V2 / "cgroup.controllers").is_file()
        self.path = (self.V2 if v2 else self.V1) / f"whale-benchmark-{os.getpid()}"
        limit = str(int(gb * 2 ** 30))
        try:
            self.path.mkdir()
            if v2:
                (self.path / "memory.max").write_text(limit)
                (self.path / "memory.swap.max").write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(limit)
                swap = self.path / "memory.memsw.limit_in_bytes"  # present when swap accounting is on
                if swap.is_file():
                    swap.write_text(limit)
        except OSError as e:
            raise RuntimeError(f"no memory cgroup to hold {gb} GB ({self.path}: {e}); run without the limit") from None
        self._peak = self.path / ("memory.peak" if v2 else "memory.max_usage_in_bytes")

    def preexec(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak_mb(self) -> float:
        try:
            return int(self._peak.read_text()) / 2 ** 20
        except (OSError, ValueError):
            return float("nan")

    def close(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass
