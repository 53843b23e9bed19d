"""What the adversarial miner's negatives are on real flukes: how many of its "other whale" pairs show the same whale.

    python benchmarks/flukes/mined_pairs.py --run runs/hbh/seed0/learned-flukes_lite0_head_cpu [--block 16]
        [--sample 300] [--cache runs/kpstore] [--out runs/mined_pairs/seed0]

A run trained under the miner (``whale train`` of a config whose K falls, e.g. ``configs/flukes_lite0_head_cpu.yaml``)
keeps the negatives of its last two mining blocks (``RUN/checkpoints/mined-eNNNN.npz``: pairs of training photos with
different ids, mined from the model at the block's start). Each pair is looked at in two ways that do not depend on
the network:

- **near copies**: the two photos' 64-bit perceptual hashes (:func:`whale.duplicates.phash`) differ in at most
  ``--hash-bits`` bits: the same photo under two ids (a label conflict);
- **the same fluke by geometry**: inliers of the two photos' RootSIFT correspondences verified by the shipped checked
  matcher's verifier (:func:`whale.keypoints.pairs.pair_matches`, ``configs/keypoints_checked.yaml``) on a sample of
  ``--sample`` pairs. The threshold is set on random different-id pairs of the same photos (the largest inlier count
  of all but the top 1% of them), so that about 1% of random negatives pass it; the share of mined negatives and
  of same-id pairs passing it is reported beside them.

Three kinds of pair, each drawn from the same training photos: the block's mined negatives (its first epoch), random
different-id pairs (what the paper's ablation trains on), and same-id pairs. If mined negatives pass the threshold
far more often than random ones, part of what the miner calls "hard" is the same whale under two ids, and training
pushes those apart. ``OUT/mined_pairs.png`` shows the mined negatives with the most inliers, side by side.
The last stdout line is ``{"benchmark": "mined_pairs", "metrics": {...}}``. Not a test.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402

KINDS = ("mined", "random", "same")
"""The pair kinds, in table order: the miner's negatives, random different-id pairs, same-id pairs."""


def mined_of(run: Path, block: int | None) -> tuple[int, np.ndarray, str]:
    """``(block_start, [n, 2] image-index pairs of the block's first epoch, key)`` of ``run``'s mined file: the
    given block, else the newest one kept."""
    folder = run / "checkpoints"
    files = sorted(folder.glob("mined-e*.npz"))
    if block is not None:
        files = [f for f in files if f.name == f"mined-e{block:04d}.npz"]
    if not files:
        kept = ", ".join(f.name for f in sorted(folder.glob("mined-e*.npz"))) or "none"
        raise SystemExit(f"{folder}: no mined negatives{'' if block is None else f' of block {block}'} (kept: {kept})")
    with np.load(files[-1], allow_pickle=False) as z:
        return int(z["block_start"]), np.asarray(z["epoch0"], np.int64), str(z["key"]) if "key" in z.files else ""


def block_k(run: Path, block_start: int) -> float | None:
    """K of the block's first epoch, from ``RUN/log.csv`` (epochs counted from 1 there)."""
    path = run / "log.csv"
    if not path.is_file():
        return None
    from whale.training.plots import _column as column  # a log.csv column's (epochs, values), blanks skipped

    with path.open(newline="", encoding="utf-8-sig") as f:
        epochs, ks = column(list(csv.DictReader(f)), "k")
    return dict(zip(epochs, ks)).get(block_start + 1)


def training_photos(run: Path, key: str):
    """The training photos the run's miner indexed (:class:`whale.data.ImageSet`), checked against the mined file's
    key (:func:`whale.training.minedfiles.training_key`): the run's own config, data folder and fold."""
    from whale.config import load_config
    from whale.training.foldjob import load_fold
    from whale.training.minedfiles import training_key

    meta = json.loads((run / "run.json").read_text())
    cfg = load_config(run / "config.yaml")
    data = load_fold(cfg, meta["data"], int(meta["fold"]), log=lambda *_: None).data
    for images in (data.pairs, data.mirrored().pairs):
        if not key or training_key(images) == key:
            return images
    raise SystemExit(f"{run}: its mined negatives index other photos than fold {meta['fold']} of {meta['data']} "
                     "(another training key): the data folder changed since the run")


def draw_pairs(ids: np.ndarray, n: int, same: bool, rng: np.random.Generator) -> np.ndarray:
    """``[n, 2]`` pairs of distinct photos whose ids are equal (``same``) or differ, drawn at random."""
    ids = np.asarray(ids, str)
    if same:
        groups = [np.flatnonzero(ids == u) for u in np.unique(ids)]
        groups = [g for g in groups if len(g) >= 2]
        if not groups:
            raise ValueError("no id has two photos: no same-id pair to draw")
        picked = rng.integers(len(groups), size=n)
        return np.array([rng.choice(groups[g], 2, replace=False) for g in picked], np.int64)
    if len(np.unique(ids)) < 2:
        raise ValueError("one id only: no different-id pair to draw")
    out = []
    while len(out) < n:
        a, b = rng.integers(len(ids), size=2)
        if ids[a] != ids[b]:
            out.append((a, b))
    return np.array(out, np.int64)


def inlier_threshold(random_inliers: np.ndarray, share: float = 0.01) -> int:
    """The smallest inlier count that at most ``share`` of random different-id pairs exceed: pairs with more
    inliers than this are "the same fluke by geometry"."""
    v = np.sort(np.asarray(random_inliers, np.int64))
    if not len(v):
        raise ValueError("no random pair to set the threshold on")
    return int(v[min(len(v) - 1, int(np.ceil(len(v) * (1 - share))) - 1)])


def hash_bits_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[n] int`` bits in which the ``[n] uint64`` hashes ``a`` and ``b`` differ, pair by pair."""
    x = np.bitwise_xor(np.asarray(a, np.uint64), np.asarray(b, np.uint64))
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(1)


def kind_row(pairs: np.ndarray, hashes: np.ndarray, inliers: np.ndarray | None, threshold: int | None,
             hash_bits: int) -> dict:
    """One kind's figures: pairs, near-copy share (all its pairs), and over its verified sample the inliers'
    median and the share above ``threshold``."""
    d = hash_bits_apart(hashes[pairs[:, 0]], hashes[pairs[:, 1]])
    row = {"pairs": int(len(pairs)), "near_copies": int((d <= hash_bits).sum()),
           "near_copy_share": float((d <= hash_bits).mean())}
    if inliers is not None:
        row.update(verified=int(len(inliers)), inliers_median=float(np.median(inliers)),
                   above=int((inliers > threshold).sum()), above_share=float((inliers > threshold).mean()))
    return row


def montage(images, pairs: np.ndarray, inliers: np.ndarray, path: Path, top: int = 8) -> None:
    """The ``top`` pairs with the most inliers, one row each (the two photos side by side, 160 px high), as PNG."""
    import cv2

    from whale.data.images import load_image

    rows = []
    for i in np.argsort(-inliers, kind="stable")[:top]:
        a, b = (cv2.resize(x, (int(160 * x.shape[1] / x.shape[0]), 160)) for x in
                (load_image(images.paths[j]) for j in pairs[i]))
        row = np.concatenate([a, np.full((160, 8, 3), 255, np.uint8), b], axis=1)
        label = f"{images.ids[pairs[i, 0]]} | {images.ids[pairs[i, 1]]}: {int(inliers[i])} inliers"
        cv2.putText(row, label, (4, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 0, 0), 1, cv2.LINE_AA)
        rows.append(row)
    if not rows:
        return
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 4), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.concatenate(rows)[:, :, ::-1])


def measure(args, run: Path, out: Path | None) -> dict:
    """One run's table rows (module docstring); ``out``: where its montage goes (None: no montage)."""
    from whale.duplicates import hash_files
    from whale.keypoints import FeatureStore, load_keypoint_config
    from whale.keypoints.pairs import pair_matches
    from whale.keypoints.verify import GeometricVerifier

    block, mined, key = mined_of(run, args.block)
    k = block_k(run, block)
    images = training_photos(run, key)
    ids = np.asarray(images.ids, str)
    if (ids[mined[:, 0]] == ids[mined[:, 1]]).any():
        raise SystemExit(f"{run}: block {block}'s negatives hold same-id pairs: not a miner's negatives")
    rng = np.random.default_rng(args.seed)
    pairs = {"mined": mined, "random": draw_pairs(ids, len(mined), False, rng),
             "same": draw_pairs(ids, len(mined), True, rng)}
    print(f"{run}: block {block} (K {k}), {len(mined)} mined negatives of {len(ids)} photos",
          flush=True)
    hashes = hash_files(images.paths, progress=not args.quiet)
    cfg = load_keypoint_config(args.keypoint_config)
    verifier = GeometricVerifier(cfg.verify)
    sample = {k: p[rng.choice(len(p), min(args.sample, len(p)), replace=False)] for k, p in pairs.items()}
    used = np.unique(np.concatenate(list(sample.values())).ravel())
    store = FeatureStore(cfg, args.cache)
    feats = dict(zip(used, store.features([images.paths[i] for i in used], progress=not args.quiet)))
    inliers = {k: np.array([len(pair_matches(feats[a], feats[b], verifier)[0]) for a, b in p], np.int64)
               for k, p in sample.items()}
    threshold = inlier_threshold(inliers["random"], args.random_share)
    rows = {k: kind_row(pairs[k], hashes, inliers[k], threshold, args.hash_bits) for k in KINDS}
    if out is not None:
        montage(images, sample["mined"], inliers["mined"], out / "mined_pairs.png")
    return {"run": str(run), "block": block, "k": k, "photos": int(len(ids)),
            "threshold": threshold, "rows": rows}


def table(results: list[dict]) -> str:
    lines = ["| run | block (K) | pairs | near copies | verified | inliers, median | above the threshold |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for res in results:
        for kind in KINDS:
            r = res["rows"][kind]
            lines.append(f"| {res['run']} {kind} | {res['block']} ({res['k']}) | {r['pairs']} | {r['near_copies']} "
                         f"({r['near_copy_share']:.1%}) | {r['verified']} | {r['inliers_median']:.0f} | "
                         f"{r['above']} ({r['above_share']:.1%}; > {res['threshold']}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", required=True, help="a run trained under the miner (repeatable)")
    p.add_argument("--block", type=int, default=None, help="the mining block's first epoch (default: the newest kept)")
    p.add_argument("--sample", type=int, default=300, help="pairs of each kind verified geometrically (default 300)")
    p.add_argument("--seed", type=int, default=0, help="the random pairs' and the sample's seed")
    p.add_argument("--hash-bits", type=int, default=6, help="near copies: hashes at most this many bits apart")
    p.add_argument("--random-share", type=float, default=0.01,
                   help="share of random different-id pairs allowed above the inlier threshold (default 0.01)")
    p.add_argument("--keypoint-config", default=str(ROOT / "configs" / "keypoints_checked.yaml"))
    p.add_argument("--cache", default=None, help="the keypoint feature store (default: the toolkit's)")
    p.add_argument("--out", default=None, help="folder for results.json and the montage of each run")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out) if args.out else None
    results = [measure(args, Path(run), out / f"run{i}" if out else None) for i, run in enumerate(args.run)]
    print(table(results))
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=2))
    metrics = {f"run{i}_{k}_{m}": res["rows"][k][m] for i, res in enumerate(results) for k in KINDS
               for m in ("near_copy_share", "above_share")}
    print(common.final_json("mined_pairs", metrics, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
