"""What the real flukes' benchmarks share: the split, its pack, the submission's metrics, the user's commands.

One module that the fluke benchmarks import and that imports none of them (``benchmarks/flukes/humpback.py``,
``humpback_runs.py``, ``humpback_pack.py``, ``benchmarks/gpu/gpu_flukes.py`` and the others: no import circle).

* the split (:func:`build_split`), as Kaggle's 2019 test set was made (``benchmarks/flukes/humpback.py``'s
  docstring says how): :func:`read_source`, :func:`split_flukes`, :func:`check_disjoint`, :func:`assert_disjoint`;
  :func:`mirror_split` draws a validation split from ``train`` the same way;
* the pack (``benchmarks/flukes/humpback_pack.py``'s docstring): the splits' photos small enough to travel to a lent
  GPU (:func:`pack`, :func:`tar_parts`), and there the split's folder again (:func:`untar_parts`, :func:`materialize`);
* measuring: a submission's figures (:func:`submission_metrics`), the known whales' ranking by ids alone
  (:func:`ranking_metrics`), a validation split's (:func:`validation_metrics`, and the joint screens'
  :func:`identification_figures`), one method's row
  (:func:`method_row`), the machine reference (:func:`machine_reference`);
* the user's commands: :func:`whale_command` (resumable ``train``/``score`` steps), :func:`ensemble_and_check`,
  :func:`earlier_run_of` (an earlier run's folder, checked to be of the same split).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks import common
from whale import NEW_WHALE

KAGGLE_NEW_SHARE = 0.276
"""The 2019 competition's share of new_whale test images: what a user would expect a batch to hold, and what
``--tune-new-share`` weighs validation's open-set queries to (fold 0 here holds about 10% of them)."""
REFERENCE_PHOTOS = 100
""":func:`machine_reference`'s photos."""
PARTS = ("part1", "part2")
"""The pack's two parts, each carried by one device call."""
FIRST_PART_BYTES = 26 * 2**20
"""``part1``'s photos: what fits one call beside the wheels (~30 MB: .whl/ and the Lite0 wheel) and the tree."""


# --------------------------------------------------------------------- the split
def read_source(root: Path) -> pd.DataFrame:
    """``Image, Id, path`` rows of ``root/train.csv`` whose photo exists under ``root/train``."""
    df = pd.read_csv(root / "train.csv")
    if list(df.columns[:2]) != ["Image", "Id"]:
        raise ValueError(f"{root / 'train.csv'}: expected columns Image,Id, found {','.join(df.columns)}")
    df["path"] = [root / "train" / n for n in df["Image"]]
    missing = [str(p) for p in df["path"] if not p.is_file()]
    if missing:
        raise ValueError(f"{root / 'train.csv'}: {len(missing)} photos missing under train/, e.g. {missing[0]}")
    return df


def split_flukes(df: pd.DataFrame, seed: int) -> tuple[list[tuple], list[tuple]]:
    """``(train, test)`` lists of ``(photo path, id)`` (the rules: ``benchmarks/flukes/humpback.py``'s docstring);
    test ids go to test_solution.csv."""
    rng = np.random.default_rng(seed)
    groups = df.groupby("Id").indices
    names = sorted(groups)
    test_rows, train_rows = [], []
    singles = []
    for name in names:
        rows = groups[name]
        if len(rows) == 1:
            singles.append(rows[0])
            continue
        q = int(rng.choice(rows))
        test_rows.append(q)
        train_rows += [int(r) for r in rows if r != q]
    singles = rng.permutation(singles)
    n_new = len(singles) // 2
    new_queries, unidentified = singles[:n_new], singles[n_new:]
    paths, ids = df["path"].to_numpy(), df["Id"].to_numpy()
    train = [(paths[r], ids[r]) for r in train_rows] + [(paths[r], NEW_WHALE) for r in unidentified]
    test = [(paths[r], ids[r]) for r in test_rows] + [(paths[r], NEW_WHALE) for r in new_queries]
    order = rng.permutation(len(test))  # known and new queries mixed, as in a real test folder
    return train, [test[i] for i in order]


def check_disjoint(train: list[tuple], test: list[tuple], log=print) -> tuple[list[tuple], list[tuple]]:
    """The split with every query's bytes absent from ``train`` (such queries join ``train``), checked.

    Raises:
        ValueError: a ``new_whale`` query whose photo's true id is in ``train`` (by id), or, after the move,
            any byte-identical photo on both sides (by SHA-1 of the file).
    """
    digest_train = set(common.byte_digests([p for p, _ in train]))
    digest_test = common.byte_digests([p for p, _ in test])
    moved = [t for t, d in zip(test, digest_test) if d in digest_train]
    if moved:
        log(f"split: {len(moved)} query photos have a byte-identical twin in train: moved to train")
        test = [t for t, d in zip(test, digest_test) if d not in digest_train]
        train = train + [(p, i) for p, i in moved]
    return train, test


def assert_disjoint(comp_dir: Path, truth_ids: dict[str, str]) -> dict:
    """Check the written folder itself: ``new_whale`` queries' individuals absent from train.csv, no query
    photo byte-identical to a train photo. Returns counts for the report; raises ValueError otherwise."""
    train = pd.read_csv(comp_dir / "train.csv")
    test_names = sorted(truth_ids)
    d_train = set(common.byte_digests([comp_dir / "train" / n for n in train["Image"]]))
    d_test = common.byte_digests([comp_dir / "test" / n for n in test_names])
    shared = sum(d in d_train for d in d_test)
    if shared:
        raise ValueError(f"{comp_dir}: {shared} test photos are byte-identical to train photos")
    return {"train": len(train), "test": len(test_names),
            "known_queries": sum(v != NEW_WHALE for v in truth_ids.values()),
            "new_queries": sum(v == NEW_WHALE for v in truth_ids.values())}


def build_split(source: Path, out: Path, seed: int, log=print) -> tuple[Path, dict[str, str], dict[str, str]]:
    """The seed's competition folder ``out`` and ``(folder, truth, true_individual)``: the test image ->
    truth (its id or ``new_whale``) and -> its real individual (to check new queries' ids against train)."""
    df = read_source(source)
    train, test = split_flukes(df, seed)
    train, test = check_disjoint(train, test, log)
    source_id = dict(zip(df["path"].astype(str), df["Id"]))
    comp = common.build_competition(out, train, test, suffix=".jpg")
    truth = dict(zip(*pd.read_csv(comp / "test_solution.csv")[["Image", "Id"]].to_numpy().T))
    individual = {f"te{i:05d}.jpg": source_id[str(p)] for i, (p, _) in enumerate(test)}
    train_individuals = {source_id[str(p)] for p, _ in train}
    clash = [n for n, t in truth.items() if t == NEW_WHALE and individual[n] in train_individuals]
    if clash:
        raise ValueError(f"{comp}: new_whale queries whose individual is in train, e.g. {clash[0]}")
    return comp, truth, individual


def mirror_split(comp_dir: Path, seed: int) -> tuple:
    """A validation split drawn from ``train`` as the test set was drawn from the whole data: one photo per
    individual with two or more ``train`` photos is a known query (so 1-photo galleries occur, as in the
    test), every ``train`` photo labelled ``new_whale`` an open-set query, the other known photos the gallery.

    Returns:
        ``(gallery_paths, gallery_ids, query_paths, query_ids)``, ids as str arrays.
    """
    df = pd.read_csv(comp_dir / "train.csv")
    known = df[df["Id"] != NEW_WHALE]
    rng = np.random.default_rng(1000 + seed)
    query_rows = [g.index[rng.integers(len(g))] for _, g in known.groupby("Id", sort=True) if len(g) >= 2]
    gallery = known.drop(index=query_rows)
    queries = pd.concat([known.loc[query_rows], df[df["Id"] == NEW_WHALE]])

    def paths(frame):
        return [comp_dir / "train" / name for name in frame["Image"]]

    return (paths(gallery), gallery["Id"].to_numpy(str), paths(queries), queries["Id"].to_numpy(str))


def single_photo_queries(g_ids: np.ndarray, q_ids: np.ndarray) -> np.ndarray:
    """``[known queries] bool``: the known queries whose individual has one gallery photo."""
    photos_of = pd.Series(g_ids).value_counts()
    return photos_of.reindex(q_ids[q_ids != NEW_WHALE]).to_numpy() == 1


# ---------------------------------------------------------------------- the pack
def split_rows(df: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Split ``seed``'s folder as rows ``Image, Id, set, source`` (``source``: the row of ``df``), named as
    :func:`benchmarks.common.build_competition` names them (``tr00000.jpg``, ``te00000.jpg``)."""
    train, test = check_disjoint(*split_flukes(df, seed), log=lambda *_: None)
    row_of = {str(p): i for i, p in enumerate(df["path"])}
    rows = [(f"tr{i:05d}.jpg", label, "train", row_of[str(p)]) for i, (p, label) in enumerate(train)]
    rows += [(f"te{i:05d}.jpg", label, "test", row_of[str(p)]) for i, (p, label) in enumerate(test)]
    return pd.DataFrame(rows, columns=["Image", "Id", "set", "source"])


def pack(source: Path, dest: Path, seeds: list[int], shape: tuple[int, int], margin: float = 0.05,
         quality: int = 60, first_part_bytes: int = FIRST_PART_BYTES, log=print) -> dict:
    """Write the pack (``benchmarks/flukes/humpback_pack.py``'s docstring) into ``dest``; returns ``{"photos",
    "bytes", "parts"}``.

    Photos are named ``P<row>.jpg`` (WebP inside: decoding is by content) and go to ``part1`` until it holds
    ``first_part_bytes``, then to ``part2``; ``part2/splits/`` holds the seeds' rows and ``part2/pack.json`` what
    the pack is (shape, quality, margin, counts).
    """
    import cv2

    from whale.core.progress import progress_bar
    from whale.data.images import load_crop

    df = read_source(source)
    for part in PARTS:
        (dest / part / "photos").mkdir(parents=True, exist_ok=True)
    (dest / "part2" / "splits").mkdir(parents=True, exist_ok=True)
    sizes = {part: 0 for part in PARTS}
    where = {}
    for i, path in enumerate(progress_bar(df["path"], total=len(df), desc="pack")):
        crop = load_crop(path, None, shape, channels=1, margin=margin, crop="content")[:, :, 0]
        ok, buf = cv2.imencode(".webp", crop, [cv2.IMWRITE_WEBP_QUALITY, int(quality)])
        if not ok:
            raise ValueError(f"{path}: could not encode its crop as WebP")
        part = "part1" if sizes["part1"] + len(buf) <= first_part_bytes else "part2"
        (dest / part / "photos" / f"P{i:05d}.jpg").write_bytes(buf.tobytes())
        sizes[part] += len(buf)
        where[i] = part
    for seed in seeds:
        rows = split_rows(df, seed)
        rows["photo"] = [f"{where[s]}/photos/P{s:05d}.jpg" for s in rows["source"]]
        rows.drop(columns="source").to_csv(dest / "part2" / "splits" / f"seed{seed}.csv", index=False)
    info = {"photos": len(df), "bytes": sizes, "shape": list(shape), "quality": quality, "margin": margin,
            "channels": 1, "seeds": seeds, "source": str(source)}
    (dest / "part2" / "pack.json").write_text(json.dumps(info, indent=2))
    log(f"pack: {len(df)} photos, part1 {sizes['part1'] / 2**20:.1f} MiB, part2 {sizes['part2'] / 2**20:.1f} MiB")
    return info


def tar_parts(dest: Path) -> dict[str, int]:
    """``dest/part1.tar`` and ``dest/part2.tar`` (uncompressed: WebP does not shrink): what a device call carries,
    one file whose size is its bytes; :func:`untar_parts` unpacks them there. Returns each tar's bytes."""
    import tarfile

    sizes = {}
    for part in PARTS:
        with tarfile.open(dest / f"{part}.tar", "w") as tar:
            tar.add(dest / part, arcname=part)
        sizes[part] = (dest / f"{part}.tar").stat().st_size
    return sizes


def untar_parts(dest: Path) -> None:
    """Unpack the carried ``part*.tar`` of ``dest`` that are not unpacked yet (a warm machine keeps the first call's)."""
    import tarfile

    for part in PARTS:
        if (dest / f"{part}.tar").is_file() and not (dest / part).is_dir():
            with tarfile.open(dest / f"{part}.tar") as tar:
                tar.extractall(dest, filter="data")


def pack_seeds(pack_dir: Path) -> list[int]:
    """The split seeds a pack holds."""
    return sorted(int(p.stem[4:]) for p in (Path(pack_dir) / "part2" / "splits").glob("seed*.csv"))


def materialize(pack_dir: Path, seed: int, dest: Path) -> tuple[Path, dict[str, str]]:
    """Split ``seed``'s competition folder ``dest`` from the pack (hard links; copies where links fail) and its
    truth ``{test image: id}``.

    Raises:
        FileNotFoundError: the pack lacks the seed or a photo (names which part to carry).
    """
    pack_dir = Path(pack_dir)
    rows_path = pack_dir / "part2" / "splits" / f"seed{seed}.csv"
    if not rows_path.is_file():
        raise FileNotFoundError(f"{rows_path}: no split {seed} in the pack (carry {pack_dir.name}/part2)")
    rows = pd.read_csv(rows_path, dtype=str, keep_default_na=False)
    for sub in ("train", "test"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    for name, part_photo, kind in zip(rows["Image"], rows["photo"], rows["set"]):
        src, target = pack_dir / part_photo, dest / kind / name
        if not src.is_file():
            raise FileNotFoundError(f"{src}: missing from the pack (carry {pack_dir.name}/{part_photo.split('/')[0]})")
        if not target.exists():
            try:
                os.link(src, target)
            except OSError:
                target.write_bytes(src.read_bytes())
    train, test = rows[rows["set"] == "train"], rows[rows["set"] == "test"]
    train[["Image", "Id"]].to_csv(dest / "train.csv", index=False)
    test[["Image", "Id"]].to_csv(dest / "test_solution.csv", index=False)
    pd.DataFrame({"Image": test["Image"], "Id": "new_whale"}).to_csv(dest / "sample_submission.csv", index=False)
    return dest, dict(zip(test["Image"], test["Id"]))


# --------------------------------------------------------------------- measuring
def read_submission(path: Path) -> dict[str, list[str]]:
    """``{image: [5 labels]}`` of a 2019-format submission CSV."""
    df = pd.read_csv(path)
    return {str(i): str(p).split() for i, p in zip(df["Image"], df["Id"])}


def read_solution(path: Path) -> dict[str, str]:
    """``{image: true id}`` of a split's ``test_solution.csv`` (``new_whale`` included)."""
    df = pd.read_csv(path)
    return {str(i): str(w) for i, w in zip(df.iloc[:, 0], df.iloc[:, 1])}


def submission_metrics(pred: dict[str, list[str]], truth: dict[str, str]) -> dict[str, float]:
    """MAP@5 over all queries, known and ``new_whale`` ones apart, the ``new_whale`` share at rank 1 and its true
    share among the queries, and that share split by why (new whales; known whales whose id is not among the five;
    known whales it pushed down a rank) (:func:`whale.submission.submission_figures`, the figures of ``whale
    submission score``)."""
    from whale.submission import submission_figures

    f = submission_figures(pred, truth, NEW_WHALE)
    return {"map5": f["map5"], "map5_known": f["map5_known"], "map5_new": f["map5_open"],
            "new_whale_first": f["open_first"], "new_whale_true": f["open_share"],
            "new_first_new": f["open_first_open"], "new_first_missed": f["open_first_missed"],
            "new_first_found": f["open_first_found"]}


WHY_NEW_FIRST = (("new_first_new", "of it, new whales"), ("new_first_missed", "known, id not among the five"),
                 ("new_first_found", "known, id pushed down a rank"))
""":func:`submission_metrics`' split of ``new_whale`` first by why: each key and its column heading."""
def known_hits(scores: np.ndarray, gallery_ids, truth) -> tuple[np.ndarray, np.ndarray]:
    """Where each known query's whale is among its five best ids by the per-id maximum, ``new_whale`` never predicted:
    ``(known [queries] bool, hit [known queries, 5] bool)`` of ``scores [queries, gallery photos]`` and the queries'
    ids ``truth``. The one ranking every figure of known whales below is read from (MAP@5 ids only, top-1, top-5)."""
    from whale.ranking import top_id_scores

    truth = np.asarray(truth, str)
    known = truth != NEW_WHALE
    names, idx, _ = top_id_scores(scores[known], np.asarray(gallery_ids, str), k=5)
    return known, names[idx] == truth[known][:, None]


def average_precision5(hit: np.ndarray) -> np.ndarray:
    """``[queries]`` precision at the first hit of :func:`known_hits`' rows (MAP@5 with one true id a query)."""
    return (hit / np.arange(1, hit.shape[1] + 1)).sum(axis=1)


def ranking_metrics(scores: np.ndarray, query: np.ndarray, gallery_ids: np.ndarray, truth: dict[str, str]) -> dict:
    """Top-1 / top-5 and the MAP@5 of the known queries by the per-id maximum (``new_whale`` never predicted), and
    that MAP@5 of the queries whose whale has one gallery photo (``map5_one_photo``: 44% of the known queries)."""
    q_ids = np.array([truth[str(q)] for q in query], dtype=str)
    known, hit = known_hits(scores, gallery_ids, q_ids)
    ap = average_precision5(hit)
    one = single_photo_queries(np.asarray(gallery_ids, str), q_ids)
    return {"top1": float(hit[:, 0].mean()), "top5": float(hit.any(axis=1).mean()),
            "map5_known_no_new": float(ap.mean()), "map5_one_photo": float(ap[one].mean()) if one.any() else np.nan}


def validation_metrics(scores: np.ndarray, g_ids: np.ndarray, q_ids: np.ndarray) -> dict:
    """``scores [queries, gallery photos]`` on a validation split: known MAP@5 (all, one gallery photo), top-1/5,
    MAP@5 with ``new_whale`` at the threshold tuned on the same queries and the share of queries it puts
    ``new_whale`` first for (``new_whale_first``)."""
    from whale.ranking import top_id_scores, tune_threshold
    from whale.ranking.newwhale import new_whale_share

    _, hit = known_hits(scores, g_ids, q_ids)
    ap5 = average_precision5(hit)
    single = single_photo_queries(g_ids, q_ids)
    threshold, val_map, _ = tune_threshold(scores, g_ids, q_ids)
    top1 = top_id_scores(scores, g_ids, k=1)[2][:, 0]
    return {"map5_known": float(ap5.mean()), "map5_known_single": float(ap5[single].mean()) if single.any() else None,
            "top1": float(hit[:, 0].mean()), "top5": float(hit.any(1).mean()), "map5_tuned": float(val_map),
            "new_whale_first": new_whale_share(top1, threshold)}


def identification_figures(scores: np.ndarray, gallery_ids, truth, one_photo: np.ndarray | None = None) -> dict:
    """A validation's figures of ``scores [queries, gallery photos]`` as the joint screens print them: MAP@5 with
    the ``new_whale`` threshold tuned on the same queries (and that threshold), the known whales' MAP@5 by ids alone
    (of the ``one_photo [queries] bool`` queries alone too, where given), their top-5, and the share of all queries
    that are known whales whose id is nowhere among the five (``unfound_share``)."""
    from whale.ranking import tune_threshold

    gallery_ids, truth = np.asarray(gallery_ids, str), np.asarray(truth, str)
    threshold, tuned, _ = tune_threshold(scores, gallery_ids, truth)
    known, hit = known_hits(scores, gallery_ids, truth)
    ap, found = average_precision5(hit), hit.any(axis=1)
    out = {"map5_tuned": float(tuned), "threshold": float(threshold), "known_ids_only": float(ap.mean())}
    if one_photo is not None:
        single = np.asarray(one_photo, bool)[known]
        out["one_photo_ids_only"] = float(ap[single].mean()) if single.any() else float("nan")
    return {**out, "top5": float(found.mean()), "unfound_share": float((~found).sum() / len(truth))}


def evaluate_setting(cfg, cache, g_paths, g_ids, q_paths, q_ids, keep: dict | None = None) -> dict:
    """One keypoint config on a validation split: :func:`validation_metrics`, descriptors per photo, seconds. The
    keypoint selector is read back from the store when a run fitted it on this gallery under the same settings
    (:mod:`whale.keypoints.selectcache`), else fitted and kept there. ``keep``: a dict given the score matrix
    (``"scores"``)."""
    from whale.keypoints import FeatureStore
    from whale.keypoints.selectcache import SelectorCache

    store = FeatureStore(cfg, cache)
    t0 = time.perf_counter()
    fg = store.features(g_paths, progress=False)
    g_keys = store.keys
    fv = store.features(q_paths, progress=False)
    q_keys = store.keys
    t_feat = time.perf_counter() - t0
    kept = SelectorCache(store.folder, cfg, g_keys, g_ids, NEW_WHALE)
    matcher, _ = kept.matcher(fg, g_ids)
    result = matcher.match(fv, progress=False, keys=q_keys)
    kept.keep(matcher)
    if keep is not None:
        keep["scores"] = result.scores
    return {**validation_metrics(result.scores, g_ids, q_ids),
            "descriptors_per_photo": len(matcher.index) / max(1, len(fg)),
            "seconds": {"features": t_feat, "select_gallery": matcher.select_seconds,
                        **{f"select_{step}": v for step, v in matcher.select_steps.items()},
                        **{f"check_{step}": v for step, v in getattr(matcher.check, "seconds", {}).items()},
                        "index": matcher.index_seconds, **result.seconds}}


def screen_table(rows: list[dict]) -> str:
    lines = ["| setting | known MAP@5 | 1 gallery photo | top-1 | top-5 | MAP@5, threshold tuned | descriptors/photo |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['setting']} | {r['map5_known']:.3f} | "
              f"{'-' if r['map5_known_single'] is None else format(r['map5_known_single'], '.3f')} | {r['top1']:.3f} | "
              f"{r['top5']:.3f} | {r['map5_tuned']:.3f} | "
              f"{format(r['descriptors_per_photo'], '.0f') if 'descriptors_per_photo' in r else '-'} |" for r in rows]
    return "\n".join(lines)


def method_row(name: str, sub: Path, test_scores, truth: dict[str, str], seconds: dict) -> dict:
    row = {"method": name, **submission_metrics(read_submission(sub), truth)}
    if test_scores is not None:
        row.update(ranking_metrics(test_scores.scores, test_scores.query, test_scores.gallery_ids, truth))
    row["seconds"] = seconds
    return row


def machine_reference(source: Path, log=print) -> float:
    """Seconds to extract the shipped RootSIFT features (``configs/keypoints.yaml``'s, whatever config the run
    measures) of the source's first :data:`REFERENCE_PHOTOS` photos in one process (no store): the machine's speed
    in the same run, the same work in every run, so that times compare across days and configs. Said to ``log``."""
    from whale.keypoints import extract, load_keypoint_config

    cfg = load_keypoint_config().features
    paths = sorted((source / "train").glob("*.jpg"))[:REFERENCE_PHOTOS]
    t0 = time.perf_counter()
    for p in paths:
        extract(p, cfg)
    seconds = time.perf_counter() - t0
    log(f"machine reference: {REFERENCE_PHOTOS} photos' keypoints in {seconds:.1f} s, one process")
    return seconds


# ----------------------------------------------------------- the user's commands
def slug(name: str) -> str:
    """A file name for a row name: ``learned flukes_lite0_cpu`` -> ``learned_flukes_lite0_cpu``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def whale_command(args: list[str], log_path: Path, log=print) -> float:
    """Run ``python -m whale ARGS`` (the user's ``whale`` command), its output into ``log_path``; its wall time.

    A ``train`` or ``score`` step that finished before with the same arguments (its marker ``<log>.done.json``
    beside the log) is not run again: a killed benchmark, run again with the same command, goes on from its first
    unfinished step and reports the times measured then. The ensembles, seconds each, always run again.

    Raises:
        RuntimeError: a non-zero exit (the log file named).
    """
    done = log_path.with_name(log_path.name + ".done.json")
    if args[0] in ("train", "score") and done.is_file():
        record = json.loads(done.read_text())
        if record.get("args") == args:
            log(f"$ whale {' '.join(args)}\n  finished earlier in {record['seconds']:.0f} s  (log {log_path})")
            return record["seconds"]
    done.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "whale", *args]
    log(f"$ whale {' '.join(args)}")
    returncode, seconds, _ = common.run_measured(cmd, log_path, cwd=common.repo_root(),
                                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if returncode:
        raise RuntimeError(f"whale {args[0]} failed (exit {returncode}); see {log_path}")
    log(f"  {seconds:.0f} s  (log {log_path})")
    done.write_text(json.dumps({"args": args, "seconds": seconds}))
    return seconds


def ensemble_and_check(runs: list[Path], sub: Path, comp: Path, work: Path, extra=(), log=print) -> tuple[float, list[str]]:
    """``whale ensemble RUNS --tune --out SUB`` and ``whale submission check SUB``; seconds and the ensemble's log lines."""
    t = whale_command(["ensemble", *map(str, runs), "--tune", "--out", str(sub), *extra], work / f"{sub.stem}.ensemble.log", log)
    t += whale_command(["submission", "check", str(sub), "--sample", str(comp / "sample_submission.csv")],
                       work / f"{sub.stem}.check.log", log)
    return t, (work / f"{sub.stem}.ensemble.log").read_text().splitlines()


def tuned_weights(lines: list[str], n: int) -> list[float] | None:
    """The weights an ensemble's ``--tune-weights`` chose, read from its output."""
    for line in lines:
        if line.startswith("tuned weights "):
            return [float(x) for x in line[len("tuned weights "):].split(":")[0].split(",")][:n]
    return None


def earlier_run_of(root, seed: int, comp: Path, kind: str = "keypoints") -> Path:
    """``ROOT/seedN/KIND`` (``keypoints``: the matcher's scores of an earlier ``--methods keypoints`` run;
    ``learned``: an earlier ``--methods learned`` run's trained model and scores), checked to be of split ``comp``:
    the folder it scored (its ``run.json``'s ``data``) holds the same ``train.csv``, ``test_solution.csv`` and
    photos, byte for byte, and its test score file names the same queries.

    Raises:
        ValueError: no such folder, or it scored another split (file named).
    """
    from whale.inference.scorefile import load_score_file, score_path

    run = Path(root) / f"seed{seed}" / kind
    option = "--keypoint-runs" if kind == "keypoints" else "--learned-runs"  # learned, learned-<config>[-<variant>]
    files = [score_path(run, "test"), score_path(run, "val"), run / "run.json"]
    if not all(f.is_file() for f in files):
        raise ValueError(f"{option}: expected {', '.join(map(str, files))} "
                         f"(benchmarks/flukes/humpback.py --methods {kind} "
                         f"--out {root}), found none")
    scored = Path(json.loads((run / "run.json").read_text())["data"])

    def content(folder: Path) -> tuple:
        photos = sorted((folder / "train").glob("*.jpg")) + sorted((folder / "test").glob("*.jpg"))
        return ((folder / "train.csv").read_bytes(), (folder / "test_solution.csv").read_bytes(),
                [p.name for p in photos], common.byte_digests(photos))

    if not scored.is_dir() or content(scored) != content(comp):
        raise ValueError(f"{run / 'run.json'}: it scored {scored}, another split than {comp}")
    test = load_score_file(files[0])
    if sorted(map(str, test.query)) != sorted(pd.read_csv(comp / "test_solution.csv")["Image"].astype(str)):
        raise ValueError(f"{files[0]}: its queries are not {comp}'s test photos")
    return run
