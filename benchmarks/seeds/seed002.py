"""Seed 002 exactly, on real flukes: Moskvyak et al.'s protocol (section III-E, IV-C, Table II's whale column). Not a test.

    python benchmarks/seeds/seed002.py --out runs/seed002 [--methods pixels,keypoints,triplet,triplet-mined]
        [--folds 0,1,2,3,4] [--redraws 10] [--config configs/seed002.yaml] [--set KEY=VALUE ...]
    python benchmarks/seeds/seed002.py --out runs/seed002 --pairs-report   # the keypoint pairs of every fold matched so far
    python benchmarks/seeds/seed002.py --out runs/seed002 --pack .seed002_data   # the photos to carry to a GPU machine

``--time-budget S`` stops each learned row's training cleanly before S seconds and measures the model as trained
(the GPU suite's step ``seed002_triplet`` runs the 5 folds so, at 224 x 448, with ``configs/seed002_gpu.yaml``).

Data: ``../shared/data/humpback/{train.csv,train/}`` beside the checkout (real 2019 competition photos), read in
place: nothing is copied; a training folder is a ``train.csv``, a ``bounding_boxes.csv`` and a ``train`` link to
the source's photos (the benchmark prints a message and exits 0 when the data is absent). The paper's selection:
the individuals with at least :data:`MIN_PHOTOS` photos (``new_whale`` left out).

Protocol (:func:`identity_folds`, :mod:`whale.metrics`), mean +- sd over the folds:

* 5 complementary folds by identity: the individuals shuffled (``--seed``) and dealt round-robin, so each is in
  exactly one fold; fold ``f`` is the test set of round ``f``, the other four train;
* top-1/5/10 (:func:`whale.metrics.top_k_identities`): per draw (:func:`whale.metrics.retrieval_draws`,
  ``--redraws`` draws), the database is the training photos plus 2 random photos of each test individual, the
  individual's other photos are the queries, so each query has exactly two matching photos in the database
  (section IV-C); the mean over the draws is the fold's figure;
* TPR at FAR = 0.01 and ROC AUC (:func:`whale.metrics.pair_verification`) over all pairs within the test fold
  (section III-E: the paper's ~180,000 pairs, ~1,800 positive).

Methods (rows), each scored as a photo against the database and every pair of the test fold:

* ``pixels``: raw pixels, the photo's content (its white padding cut, :func:`whale.data.images.content_box`) at
  32 x 32 gray, cosine (:class:`benchmarks.common.PixelMethod`);
* ``imagenet``: the ``--config``'s pretrained branch (a ``trunk:`` config, e.g. ``configs/seed002_lite0_cpu.yaml``)
  as it comes, nothing trained, cosine (:class:`benchmarks.common.FrozenBranchMethod`): what the training adds;
* ``keypoints``: the training-free matcher (``--keypoint-config``, :class:`whale.keypoints.KeypointMatcher`),
  nothing trained. Its LNBNN votes depend on the gallery, so each draw builds its own matcher on that draw's
  database; the pairs of the test fold are every photo matched against all the other photos of the fold
  (:func:`leave_one_out_scores`: one index, the photo's own descriptors left out of its neighbours);
* ``triplet``: the paper's model as far as 2 CPU cores allow (``--config``, ``configs/seed002.yaml``): the
  triplet loss with semi-hard triplets inside random P x K batches (15 x 3, the paper's whale batches), a
  256-d embedding not normalised (the paper's Table IV), trained on all four training folds (``whale train``'s
  fold -1: no validation, the final model), every stage at K = 1000 (random batches);
* ``triplet-mined``: the same stages with the config's K schedule: our adversarial miner (Algorithm 1 of the
  whale paper) seeds the P x K batches with identities the model confuses;
* ``learned``: the ``--config`` as written, its objective and its K schedule, trained as the triplet rows are
  (e.g. ``configs/flukes_lite0_cpu.yaml``, the competition's best CPU network: sub-center ArcFace on the frozen
  Lite0 trunk). Its folder is ``fold<f>/config``: one ``--out`` per config.

Results: ``OUT/results.json``, one row per (fold, method), written as each finishes (a killed run resumes:
``OUT/fold<f>/keypoint_pairs.npz`` keeps the keypoint matcher's pair scores of a test fold;
finished rows are kept, training runs resume). The last lines print the table (mean +- sd over the folds, the
paper's Table II row beside) and one JSON object.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from whale import NEW_WHALE  # noqa: E402

MIN_PHOTOS = 3
"""The paper keeps the whales with at least three photos (section IV-A.2)."""
N_FOLDS = 5
M_MATCHES = 2
"""Matching photos of each query's individual in the database (section IV-C)."""
FAR = 0.01
METHODS = ("pixels", "imagenet", "keypoints", "triplet", "triplet-mined", "learned")
LEARNED = {"triplet": "random", "triplet-mined": "adversarial", "learned": "config"}
"""Learned rows -> their training folder: K = 1000 in every stage (random P x K), or the config's K schedule
(``adversarial``, ``config``: the same training; ``learned`` names a config that is not the triplet's)."""
PAPER = {"top1": (0.6278, 0.0164), "top5": (0.8820, 0.0067), "top10": (0.9346, 0.0063), "tpr_at_far": (0.73, None),
         "auc": (0.980, None)}
"""Table II, humpback whales, Inception-Ft (ImageNet InceptionV3 fine-tuned, 224 x 448), mean +- sd over 5 splits."""
COLUMNS = (("top1", "top-1"), ("top5", "top-5"), ("top10", "top-10"), ("tpr_at_far", "TPR at FAR 0.01"),
           ("auc", "AUC"))


# ---------------------------------------------------------------------------------------------- data
def read_photos(root: Path) -> pd.DataFrame:
    """``Image, Id, path`` of the individuals of ``root/train.csv`` with at least :data:`MIN_PHOTOS` photos.

    Raises:
        ValueError: columns other than ``Image,Id`` first, or a listed photo missing under ``root/train``.
    """
    df = pd.read_csv(root / "train.csv")
    if list(df.columns[:2]) != ["Image", "Id"]:
        raise ValueError(f"{root / 'train.csv'}: expected columns Image,Id, found {','.join(df.columns)}")
    df = df[df["Id"] != NEW_WHALE]
    counts = df["Id"].value_counts()
    df = df[df["Id"].isin(counts.index[counts >= MIN_PHOTOS])].sort_values(["Id", "Image"]).reset_index(drop=True)
    df["path"] = [root / "train" / n for n in df["Image"]]
    missing = [str(p) for p in df["path"] if not p.is_file()]
    if missing:
        raise ValueError(f"{root / 'train.csv'}: {len(missing)} photos missing under train/, e.g. {missing[0]}")
    return df


def identity_folds(ids, n_folds: int = N_FOLDS, seed: int = 0) -> dict[str, int]:
    """Individual -> fold: the distinct ``ids`` shuffled by ``seed`` and dealt round-robin (complementary folds)."""
    names = sorted(set(map(str, ids)))
    order = np.random.default_rng([seed, 2]).permutation(len(names))
    return {names[i]: r % n_folds for r, i in enumerate(order)}


def content_boxes(paths, cache: Path | None = None) -> list[tuple[int, int, int, int]]:
    """Each photo's box without its white padding (:func:`whale.data.images.content_box`), kept in ``cache``."""
    from whale.data.images import content_box, load_image

    known = {}
    if cache is not None and cache.is_file():
        known = {r.Image: (r.x0, r.y0, r.x1, r.y1) for r in pd.read_csv(cache).itertuples()}
    boxes = [known.get(Path(p).name) or tuple(int(v) for v in content_box(load_image(p))) for p in paths]
    if cache is not None and len(known) < len(paths):
        cache.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([(Path(p).name, *b) for p, b in zip(paths, boxes)],
                     columns=["Image", "x0", "y0", "x1", "y1"]).to_csv(cache, index=False)
    return boxes


def training_folder(out: Path, source: Path, train: pd.DataFrame, boxes: dict[str, tuple]) -> Path:
    """A competition folder of the training photos, read in place: ``train.csv``, ``bounding_boxes.csv``
    (their content boxes) and ``train`` linked to ``source/train``; no test photos."""
    out.mkdir(parents=True, exist_ok=True)
    link = out / "train"
    if link.is_symlink() and link.resolve() != (source / "train").resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to((source / "train").resolve(), target_is_directory=True)
    (out / "test").mkdir(exist_ok=True)
    train[["Image", "Id"]].to_csv(out / "train.csv", index=False)
    pd.DataFrame([(n, *boxes[n]) for n in train["Image"]],
                 columns=["Image", "x0", "y0", "x1", "y1"]).to_csv(out / "bounding_boxes.csv", index=False)
    return out


# ------------------------------------------------------------------------------------------ scoring
def protocol_row(method, train: pd.DataFrame, test: pd.DataFrame, boxes: dict, redraws: int, seed: int) -> dict:
    """Seed 002's figures of a method whose scores do not depend on the gallery (``features``/``scores``)."""
    from whale.metrics import retrieval_protocol

    f_train = method.features(list(train["path"]), [boxes[n] for n in train["Image"]])
    f_test = method.features(list(test["path"]), [boxes[n] for n in test["Image"]])
    res = retrieval_protocol(method.scores(f_test, f_train), method.scores(f_test, f_test), train["Id"], test["Id"],
                             m=M_MATCHES, redraws=redraws, seed=seed, far=FAR)
    return flatten(res)


def flatten(res: dict) -> dict:
    """A protocol result as a flat row: ``top1`` (mean over the draws), ``top1_draws_sd``, ..."""
    out = {}
    for key, value in res.items():
        if isinstance(value, tuple):
            out[key], out[f"{key}_draws_sd"] = value
        else:
            out[key] = value
    return out


class LeaveOneOut:
    """A :class:`whale.keypoints.index.DescriptorIndex` searched with one photo's own rows left out.

    ``exclude`` names the photo; :meth:`search` asks the index for ``slack`` more neighbours, drops that photo's
    rows, and asks again deeper for the few descriptors that lost more than ``slack`` (duplicated keypoints, whose
    upright descriptors are identical, find their own photo several times), so every descriptor gets exactly the
    neighbours an index without the photo would give (the same index: exactly so for ``index: exact``).
    """

    def __init__(self, index, slack: int = 4):
        self.index, self.slack, self.exclude = index, int(slack), -1
        self.owner, self.local = index.owner, index.local

    def __len__(self) -> int:
        return len(self.index)

    def search(self, desc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        dist = np.full((len(desc), k), np.inf, np.float32)
        rows = np.full((len(desc), k), -1, np.int64)
        todo, depth = np.arange(len(desc)), k + self.slack
        own_rows = int((self.owner == self.exclude).sum())
        while len(todo):
            d, r = self.index.search(desc[todo], min(depth, len(self.index)))
            keep = (r >= 0) & (self.owner[np.maximum(r, 0)] != self.exclude)
            enough = (keep.sum(axis=1) >= k) | (depth >= k + own_rows) | (depth >= len(self.index))
            for i in np.flatnonzero(enough):
                sel = np.flatnonzero(keep[i])[:k]
                dist[todo[i], :len(sel)], rows[todo[i], :len(sel)] = d[i, sel], r[i, sel]
            todo, depth = todo[~enough], depth * 2
        return dist, rows


def leave_one_out_scores(cfg, feats, ids=None, progress: bool = False) -> np.ndarray:
    """``[n, n] float32``: every photo of ``feats`` matched against all the others (its own column 0).

    What a :class:`whale.keypoints.KeypointMatcher` built on the other ``n - 1`` photos scores, for each photo,
    from one index of the ``n`` photos (:class:`LeaveOneOut`). Every keypoint is kept (``select.keep: 1``): these
    are the test fold's pairs, and a selector fitted on their identities would have learned from the answers.
    """
    from whale.keypoints import KeypointMatcher
    from whale.core.progress import progress_bar

    matcher = KeypointMatcher(cfg.without_selection(), feats, ids)
    matcher.index = LeaveOneOut(matcher.index)
    out = np.zeros((len(feats), len(feats)), np.float32)
    for i in progress_bar(range(len(feats)), desc=f"matching {len(feats)} photos against the others", enabled=progress):
        matcher.index.exclude = i
        out[i] = matcher.match([feats[i]], progress=False).scores[0]
        out[i, i] = 0.0
    return out


def cached_pair_scores(path: Path | None, names, compute) -> tuple[np.ndarray, bool]:
    """``compute()``'s ``[n, n]`` scores of the photos ``names``, kept in ``path`` (``.npz``: ``names``, ``scores``)
    so that a killed run does not match the test fold again; a file of other photos is recomputed. Returns the
    scores and whether they were read back."""
    from whale.core.files import atomic_write

    names = np.asarray(names).astype(str)
    if path is not None and path.is_file():
        with np.load(path, allow_pickle=False) as z:
            if z["names"].shape == names.shape and (z["names"] == names).all():
                return z["scores"], True
    scores = compute()
    if path is not None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, names=names, scores=scores)

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, write)
    return scores, False


def keypoint_row(cfg, store, train: pd.DataFrame, test: pd.DataFrame, redraws: int, seed: int, log=print,
                 pairs_cache: Path | None = None) -> dict:
    """Seed 002's figures of the keypoint matcher: one matcher per draw on that draw's database (module docstring);
    the test fold's pair scores kept in ``pairs_cache`` (:func:`cached_pair_scores`)."""
    from whale.keypoints import KeypointMatcher
    from whale.metrics import pair_verification, retrieval_draws, retrieval_queries, top_k_identities

    t0 = time.perf_counter()
    f_train = store.features(list(train["path"]), progress=False)
    f_test = store.features(list(test["path"]), progress=False)
    train_ids, test_ids = train["Id"].to_numpy(str), test["Id"].to_numpy(str)
    seconds = {"features": time.perf_counter() - t0}
    t0 = time.perf_counter()
    scores, cached = cached_pair_scores(pairs_cache, test["Image"],
                                        lambda: leave_one_out_scores(cfg, f_test, test_ids))
    row = pair_verification(scores, test_ids, FAR)
    seconds["pairs"] = time.perf_counter() - t0
    if cached:
        log(f"  keypoints: pair scores of the test fold read from {pairs_cache}")
    log(f"  keypoints: pairs of the test fold in {seconds['pairs']:.0f} s: TPR {row['tpr_at_far']:.3f}, "
        f"AUC {row['auc']:.3f}")
    tops: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for d, picked in enumerate(retrieval_draws(test_ids, M_MATCHES, redraws, seed)):
        queries = retrieval_queries(test_ids, picked, M_MATCHES)
        gallery_ids = np.concatenate([train_ids, test_ids[picked]])
        matcher = KeypointMatcher.build(cfg, f_train + [f_test[i] for i in np.flatnonzero(picked)], gallery_ids)
        scores = matcher.match([f_test[i] for i in queries], progress=False).scores
        for key, value in top_k_identities(scores, gallery_ids, test_ids[queries]).items():
            tops.setdefault(key, []).append(value)
        log(f"  keypoints: draw {d + 1}/{redraws}, {len(queries)} queries, top-10 {tops['top10'][-1]:.3f} "
            f"({time.perf_counter() - t0:.0f} s)")
    seconds["draws"] = time.perf_counter() - t0
    for key, values in tops.items():
        row[key], row[f"{key}_draws_sd"] = float(np.mean(values)), float(np.std(values))
    row.update(queries=int(len(queries)), identities=int(len(set(test_ids))), seconds_steps=seconds)
    return row


# ----------------------------------------------------------------------------------------- training
def learned_config(path, overrides: dict | None, sampler: str):
    """The run config: ``path`` with ``--set`` overrides; ``random``: every stage at K = 1000
    (:func:`benchmarks.common.random_negatives`), ``adversarial`` or ``config``: the config's K schedule."""
    from whale.config import load_config

    cfg = load_config(path, overrides or {})
    if not cfg.objective.identities:
        raise ValueError(f"{path}: objective {cfg.objective.name} is not an identity objective (P x K batches)")
    return common.random_negatives(cfg) if sampler == "random" else cfg


def train_learned(cfg, data_dir: Path, run_dir: Path, log=print, budget_s: float | None = None,
                  trunk_cache=None) -> dict:
    """``whale train``'s fold -1 (every training photo, no validation, the final model) into ``run_dir``
    (resumed if it exists); its seconds and epochs. ``budget_s``: stop cleanly before this many seconds
    (the trainer's deadline); ``finished`` says whether the schedule ran to its end, ``checkpoint`` which model
    to measure (``best``, the final one, when it did; else ``last``, the model as trained when time ran out)."""
    from whale.training.trainer import train_fold

    t0 = time.time()
    res = train_fold(cfg, data_dir, -1, run_dir, resume=True, verbose=0, log=lambda m: log(f"    {m}"),
                     deadline=None if budget_s is None else t0 + budget_s, trunk_cache=trunk_cache)
    if res.epochs_done == 0:
        raise RuntimeError(f"{run_dir}: the time budget ({budget_s:g} s) ended before the first epoch; "
                           "nothing to measure (give --time-budget more seconds)")
    row = {"train_s": time.time() - t0, "epochs": f"{res.epochs_done}/{res.epochs_total}",
           "finished": bool(res.finished), "checkpoint": "best" if res.finished else "last"}
    if budget_s is not None:
        row["train_budget_s"] = budget_s
    return row


def pack_photos(df: pd.DataFrame, boxes: dict[str, tuple], dest: Path, quality: int = 65) -> dict:
    """The selected photos' content (their white padding cut, ``boxes``) re-encoded as JPEG ``quality`` (Huffman
    tables optimised) under ``dest/train``, with ``dest/train.csv``: a ``--source`` small enough to travel to a GPU
    machine (its 64 MiB limit), giving the same individuals, folds and draws (they depend on the ids and names
    only). Returns ``{"photos", "bytes"}``."""
    import cv2

    from whale.data.images import load_image

    (dest / "train").mkdir(parents=True, exist_ok=True)
    total = 0
    for name, path in zip(df["Image"], df["path"]):
        x0, y0, x1, y1 = boxes[name]
        bgr = np.ascontiguousarray(load_image(path)[y0:y1, x0:x1, ::-1])
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality), cv2.IMWRITE_JPEG_OPTIMIZE, 1])
        if not ok:
            raise ValueError(f"{path}: could not encode its content as JPEG")
        (dest / "train" / name).write_bytes(buf.tobytes())
        total += len(buf)
    df[["Image", "Id"]].to_csv(dest / "train.csv", index=False)
    return {"photos": len(df), "bytes": total}


# -------------------------------------------------------------------------------------------- report
def summary(rows: list[dict]) -> tuple[str, dict]:
    """Markdown table of mean +- sd over the folds per method (the paper's row first), and the same as a dict."""
    lines = ["| method | folds | " + " | ".join(h for _, h in COLUMNS) + " | seconds per fold |",
             "| --- " * (len(COLUMNS) + 3) + "|"]
    cells = [f"{v * 100:.2f}% +- {sd * 100:.2f}" if sd is not None else f"{v * 100:.0f}%" if k != "auc" else f"{v:.3f}"
             for k, (v, sd) in ((k, PAPER[k]) for k, _ in COLUMNS)]
    lines.append("| paper, Table II (Inception-Ft, 224 x 448, ImageNet) | 5 | " + " | ".join(cells) + " | |")
    stats = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["fold"])
        s = {k: common.mean_sd([r[k] for r in mine]) for k, _ in COLUMNS}
        s["seconds"] = common.mean_sd([r["seconds"] for r in mine])
        stats[method] = {**s, "folds": [r["fold"] for r in mine]}
        fmt = [f"{s[k]['mean'] * 100:.2f}% +- {s[k]['sd'] * 100:.2f}" if k != "auc" else
               f"{s[k]['mean']:.3f} +- {s[k]['sd']:.3f}" for k, _ in COLUMNS]
        lines.append(f"| {method} | {len(mine)} ({','.join(str(r['fold']) for r in mine)}) | " + " | ".join(fmt)
                     + f" | {s['seconds']['mean']:.0f} |")
    return "\n".join(lines), stats


def keypoint_pairs_report(out: Path, df: pd.DataFrame) -> tuple[str, dict]:
    """TPR at FAR and AUC of every test fold whose keypoint pair scores are kept in ``out/fold<f>/keypoint_pairs.npz``
    (:func:`cached_pair_scores`), also of folds whose draws never ran: a Markdown table (one line per fold, then
    mean +- sd over them) and the same as a dict."""
    from whale.metrics import pair_verification

    id_of = dict(zip(df["Image"], df["Id"]))
    rows = []
    for path in sorted(out.glob("fold[0-9]/keypoint_pairs.npz")):
        with np.load(path, allow_pickle=False) as z:
            names, scores = z["names"], z["scores"]
        res = pair_verification(scores, [id_of[n] for n in names], FAR)
        rows.append({"fold": int(path.parent.name[4:]), "photos": len(names), **res})
    lines = ["| keypoints, pairs of the test fold | photos | pairs | positive | TPR at FAR 0.01 | AUC |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| fold {r['fold']} | {r['photos']} | {r['pairs']} | {r['positive_pairs']} | "
              f"{r['tpr_at_far'] * 100:.2f}% | {r['auc']:.3f} |" for r in rows]
    stats = {}
    if rows:
        stats = {k: common.mean_sd([r[k] for r in rows]) for k in ("tpr_at_far", "auc")}
        lines.append(f"| mean +- sd, {len(rows)} folds | | | | {stats['tpr_at_far']['mean'] * 100:.2f}% +- "
                     f"{stats['tpr_at_far']['sd'] * 100:.2f} | {stats['auc']['mean']:.3f} +- {stats['auc']['sd']:.3f} |")
    return "\n".join(lines), {"folds": [r["fold"] for r in rows], **stats}


def run_fold(args, df: pd.DataFrame, folds: dict[str, int], fold: int, method: str, boxes: dict, log=print) -> dict:
    """One row: ``method`` trained (if learned) on the four other folds and measured on fold ``fold``."""
    test = df[df["Id"].map(folds) == fold].reset_index(drop=True)
    train = df[df["Id"].map(folds) != fold].reset_index(drop=True)
    if set(test["Id"]) & set(train["Id"]):
        raise RuntimeError(f"fold {fold}: an individual is on both sides")
    seed = args.seed * 100 + fold  # the fold's draws
    t0 = time.perf_counter()
    row: dict = {}
    if method == "pixels":
        row = protocol_row(common.PixelMethod(32, 1, margin=0.0), train, test, boxes, args.redraws, seed)
    elif method == "imagenet":  # the --config's pretrained branch as it comes: what its training adds to ImageNet
        frozen = common.FrozenBranchMethod(args.config, Path(args.out) / "trunk-cache")
        row = protocol_row(frozen, train, test, boxes, args.redraws, seed)
    elif method == "keypoints":
        from whale.keypoints import FeatureStore

        store = FeatureStore(args.keypoint_cfg, args.cache)
        row = keypoint_row(args.keypoint_cfg, store, train, test, args.redraws, seed, log,
                           Path(args.out) / f"fold{fold}" / "keypoint_pairs.npz")
    else:
        sampler = LEARNED[method]
        work = Path(args.out) / f"fold{fold}"
        data_dir = training_folder(work / "data", args.source, train, boxes)
        cfg = learned_config(args.config, args.overrides, sampler)
        log(f"  training {method} ({sampler}) on {len(train)} photos of {train['Id'].nunique()} individuals "
            f"-> {work / sampler}")
        trunk_cache = Path(args.out) / "trunk-cache"  # a trunk config's maps: every fold reads the same photos
        row.update(train_learned(cfg, data_dir, work / sampler, log, args.time_budget, trunk_cache))
        model = common.SiameseMethod(work / sampler, method, checkpoint=row["checkpoint"], trunk_cache=trunk_cache)
        row.update(protocol_row(model, train, test, boxes, args.redraws, seed))
    row.update(method=method, fold=fold, seconds=round(time.perf_counter() - t0, 1), redraws=args.redraws,
               train_photos=len(train),
               test_photos=len(test), test_individuals=int(test["Id"].nunique()))
    log(f"fold {fold} {method}: " + ", ".join(f"{h} {row[k]:.3f}" for k, h in COLUMNS) + f" ({row['seconds']:.0f} s)")
    return row


def results(path: Path) -> harness.RowFile:
    """``path``'s rows, one per (fold, method), each added as it ends (:class:`benchmarks.harness.RowFile`: under a
    lock, so that two commands on the same ``--out``, e.g. the training-free rows beside a training, keep each
    other's rows)."""
    return harness.RowFile(path, ("fold", "method"))


def main(argv=None) -> int:
    from whale.config.overrides import overrides

    p = harness.parser(__doc__, "work folder (training folders, runs, keypoint store, results.json)", report=True)
    p.add_argument("--methods", default="pixels,keypoints,triplet", help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--folds", default="0,1,2,3,4", help="comma-separated test folds (0-4)")
    p.add_argument("--redraws", type=int, default=10, help="databases drawn per fold for top-k (default 10)")
    p.add_argument("--seed", type=int, default=0, help="the folds' and the draws' seed")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "seed002.yaml"),
                   help="the learned rows' run config (default configs/seed002.yaml)")
    p.add_argument("--keypoint-config", default=str(common.repo_root() / "configs" / "keypoints.yaml"),
                   help="the keypoint matcher's config (default configs/keypoints.yaml)")
    p.add_argument("--cache", default=None, help="the keypoint feature store (default OUT/keypoint-store)")
    p.add_argument("--source", default=None, help="the photos (default ../shared/data/humpback beside the checkout)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a value of the learned rows' config (repeatable), e.g. 'stages[0].epochs=2'")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="learned rows: stop each training cleanly before this many seconds and measure the model "
                        "as trained (the row records its epochs; a GPU session's fixed budget)")
    p.add_argument("--pack", default=None, metavar="DIR",
                   help="measure nothing: write the selected photos' content crops (JPEG, --pack-quality) and their "
                        "train.csv to DIR, a --source to carry to another machine")
    p.add_argument("--pack-quality", type=int, default=65,
                   help="JPEG quality of --pack (default 65: the 5,706 photos in 44 MiB, under the GPU machine's 64)")
    p.add_argument("--pairs-report", action="store_true",
                   help="measure nothing: print TPR and AUC of the keypoint pair scores kept in OUT/fold<f>/")
    args = p.parse_args(argv)
    if args.report:
        return harness.finish("seed002", results(Path(args.out) / "results.json").rows(), summary, _flat)
    methods = [m for m in args.methods.split(",") if m]
    fold_list = [int(f) for f in args.folds.split(",") if f]
    bad = [m for m in methods if m not in METHODS]
    if bad or not all(0 <= f < N_FOLDS for f in fold_list) or args.redraws < 1:
        p.error(f"expected methods of {', '.join(METHODS)}, folds in 0..{N_FOLDS - 1} and --redraws >= 1; "
                f"received {args.methods!r}, {args.folds!r}, {args.redraws}")
    args.source = Path(args.source) if args.source else common.shared_data("humpback")
    if args.source is None or not (args.source / "train.csv").is_file():
        print("no ../shared/data/humpback beside the checkout: nothing to measure")
        return 0
    try:  # bad settings fail here, before any work
        args.overrides = overrides(args.set)
        if any(m in LEARNED for m in methods):
            learned_config(args.config, args.overrides, "random")
        if "keypoints" in methods:
            from whale.keypoints import load_keypoint_config

            args.keypoint_cfg = load_keypoint_config(args.keypoint_config)
    except ValueError as err:
        p.error(str(err))
    if any(m in LEARNED for m in methods):
        common.setup_tensorflow()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.cache = Path(args.cache) if args.cache else out / "keypoint-store"
    t0 = time.perf_counter()
    df = read_photos(args.source)
    folds = identity_folds(df["Id"], N_FOLDS, args.seed)
    boxes = dict(zip(df["Image"], content_boxes(list(df["path"]), out / "content_boxes.csv")))
    sizes = [(int((df["Id"].map(folds) == f).sum()), sum(v == f for v in folds.values())) for f in range(N_FOLDS)]
    print(f"{len(df)} photos of {df['Id'].nunique()} individuals with >= {MIN_PHOTOS} photos; folds (photos, "
          f"individuals): {sizes}", flush=True)
    if args.pack:
        res = pack_photos(df, boxes, Path(args.pack), args.pack_quality)
        print(f"{res['photos']} photos ({res['bytes'] / 2**20:.1f} MiB) -> {args.pack}")
        return 0
    if args.pairs_report:
        table, stats = keypoint_pairs_report(out, df)
        print(table)
        print(common.final_json("seed002_keypoint_pairs", {f"{k}_{s}": v[s] for k, v in stats.items()
                                                           if isinstance(v, dict) for s in ("mean", "sd")},
                                time.perf_counter() - t0))
        return 0
    jobs = [harness.Job((fold, method), lambda f=fold, m=method: run_fold(args, df, folds, f, m, boxes))
            for fold in fold_list for method in methods]
    rows = harness.run_jobs(results(out / "results.json"), jobs)
    return harness.finish("seed002", rows, summary, _flat, time.perf_counter() - t0)


def _flat(stats: dict) -> dict:
    """The final JSON line's metrics: each method's mean of each figure."""
    return {f"{m}_{k}": v["mean"] for m, s in stats.items() for k, v in s.items() if isinstance(v, dict)}


if __name__ == "__main__":
    sys.exit(main())
