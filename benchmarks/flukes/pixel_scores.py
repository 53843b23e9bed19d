"""Raw-pixel score files beside another score run's: a cheap second run for fusion measurements. Not a test.

    python benchmarks/flukes/pixel_scores.py --data DATA --like RUNS/seed0/keypoints --out RUNS/seed0/pixels [--size 32]

Writes ``OUT/val.npz`` and ``OUT/test.npz`` with exactly the queries and gallery of ``--like``'s files (e.g. the
keypoint matcher's, ``benchmarks/flukes/humpback.py --methods keypoints``), scored by raw-pixel cosine nearest
neighbour (:class:`benchmarks.common.PixelMethod`: ``--size`` px gray, whole photos; no training, so
``trained_on`` is empty), each file with an identity of its own (``run_id`` ``pixels-<size>``), so that
``whale ensemble LIKE OUT --tune`` fuses the two.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    import numpy as np

    from benchmarks.common import PixelMethod
    from whale.data import load_competition
    from whale.inference.scorefile import load_score_file, write_scores

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, type=Path, help="the competition folder the --like run scored")
    p.add_argument("--like", required=True, type=Path, help="score folder whose val.npz and test.npz to mirror")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--size", type=int, default=32)
    args = p.parse_args(argv)
    t0 = time.time()
    comp = load_competition(args.data)
    method = PixelMethod(args.size, 1)
    cache: dict[str, np.ndarray] = {}

    def features(names, test: bool):
        todo = [n for n in names if n not in cache]
        if todo:
            paths = [comp.test_path(n) if test else comp.train_path(n) for n in todo]
            cache.update(zip(todo, method.features(paths)))
        return np.stack([cache[n] for n in names])

    for split in ("val", "test"):
        like = load_score_file(args.like / f"{split}.npz", need_query_ids=split == "val")
        scores = method.scores(features(like.query, split == "test"), features(like.gallery, False))
        identity = {"run_id": f"pixels-{args.size}", "run": "pixels", "config_hash": f"pixels{args.size}",
                    "fold": (like.identity or {}).get("fold"), "seed": None, "checkpoint": None, "epoch": None,
                    "git_revision": None, "backend": "numpy", "split": split, "snapshot": None, "init_from": None}
        write_scores(args.out / f"{split}.npz", scores.astype(np.float32), like.query, like.gallery, like.gallery_ids,
                     like.query_ids, identity=identity, trained_on=[] if split == "val" else None)
        print(f"{split}: {scores.shape[0]} x {scores.shape[1]} -> {args.out / f'{split}.npz'}")
    print(json.dumps({"benchmark": "pixel_scores", "seconds": round(time.time() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
