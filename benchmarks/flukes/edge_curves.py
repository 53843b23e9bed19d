"""Does the fluke's trailing edge find the known whales the joint never shortlists? A lead, measured; not a matcher.
Not a test; reads kept joint runs and chooses nothing in the toolkit.

    python benchmarks/flukes/edge_curves.py --runs 'runs/views16j/seed{S}' --data 'runs/cut/seed{S}/data' \\
        --seeds 0 --out runs/edges

Photo-ID catalogues of humpbacks match the trailing edge's outline when a fluke has little pigment to match (dark
flukes, the queries no keypoint kind verifies). Each photo's outline here, with no training, is
:func:`whale.outline.curve.edge_curve`'s (GrabCut's mask, the top profile, the tips levelled, :data:`POINTS` points
in spans). A curve's descriptor is its slope after Gaussian smoothing (``sigma`` points; or the curve itself less
its mean, ``shape``, or its detail above the smoothing, ``detail``), unit length; two curves' similarity the best
dot product over shifts of up to ``shift`` points. A photo without a curve is left out.

Printed, per split seed:

- **train, one photo left out** (the variant's choice): every training photo of an individual with two or more
  curves against all the other training photos, the share whose individual has a photo among the best k;
- **test**, the variant best at k = 20 on train only: the known test queries, all of them and split by whether the
  joint run's merged shortlist (its ``pairs_test.npz``) holds a photo of their individual; what a shortlist by the
  edge could add is its recall on the ones never shortlisted; under each row, what a random order of the gallery
  would give the same queries. ``data``'s ``test_solution.csv`` is read for reporting only.

Curves are cached in ``OUT/seed<S>.npz`` (about 0.1 s a photo on one core). The last stdout line is
``{"benchmark": "edge_curves", "seeds": {...}}``.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.flukes.joint_recall import same_whale, shortlisted  # noqa: E402
from benchmarks.flukes.shared import read_solution  # noqa: E402
from whale.identify.check import load_table  # noqa: E402
from whale.inference.scorefile import load_score_file, score_path  # noqa: E402
from whale.outline.curve import POINTS, edge_curve  # noqa: E402

KS = (1, 5, 20, 50, 100)
VARIANTS = (("shape", 0, 0), ("detail", 6, 0), ("slope", 2, 0), ("slope", 4, 0), ("slope", 8, 0),
            ("slope", 4, 12), ("slope", 8, 12))
"""(descriptor, sigma in points, largest shift in points)."""


def curves(data: Path, cache: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(names, curves [n, POINTS], ok [n])`` of ``data``'s ``train/`` and ``test/`` photos (``"train/<name>"``),
    read from ``cache`` when it holds the same names."""
    import cv2
    from tqdm import tqdm

    names = [f"{split}/{p.name}" for split in ("train", "test") for p in sorted((data / split).iterdir())]
    if cache.is_file():
        with np.load(cache) as z:
            if list(z["names"]) == names:
                return z["names"], z["curves"], z["ok"]
    out, ok = np.zeros((len(names), POINTS), np.float32), np.zeros(len(names), bool)
    for i, name in enumerate(tqdm(names, desc=f"trailing edges of {data}", mininterval=10)):
        bgr = cv2.imread(str(data / name))
        if bgr is None:
            raise SystemExit(f"{data / name}: not a readable image")
        curve = edge_curve(bgr)
        if curve is not None:
            out[i], ok[i] = curve, True
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, names=np.array(names), curves=out, ok=ok)
    return np.array(names), out, ok


def descriptors(c: np.ndarray, kind: str, sigma: float) -> np.ndarray:
    from scipy.ndimage import gaussian_filter1d

    c = c.astype(np.float64)
    if kind == "shape":
        x = c - c.mean(axis=1, keepdims=True)
    elif kind == "detail":
        x = c - gaussian_filter1d(c, sigma, axis=1)
    else:
        x = np.gradient(gaussian_filter1d(c, sigma, axis=1), axis=1)
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)


def similarity(q: np.ndarray, g: np.ndarray, shift: int) -> np.ndarray:
    """``[n_q, n_g]``: the best dot product of the descriptors over shifts of ``-shift..shift`` points (step 2)."""
    s = q @ g.T
    for d in range(2, shift + 1, 2):
        for sign in (-1, 1):
            np.maximum(s, q @ np.roll(g, sign * d, axis=1).T, out=s)
    return s


def recall_at(s: np.ndarray, gallery_ids: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``[n_q]``: the rank of the best-ranked photo of each query's individual (a large number when absent)."""
    hit = gallery_ids[np.argsort(-s, axis=1, kind="stable")] == truth[:, None]
    return np.where(hit.any(axis=1), hit.argmax(axis=1), 10**9)


def shares(first: np.ndarray) -> dict[str, float]:
    return {f"top-{k}": round(float((first < k).mean()), 3) if len(first) else float("nan") for k in KS}


def random_shares(gallery_ids: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """What a random order of the gallery would give the queries of ``truth``: the mean chance that one of the
    individual's ``m`` photos among ``n`` is among ``k`` drawn, ``1 - C(n - m, k) / C(n, k)``."""
    from math import lgamma

    n, count = len(gallery_ids), Counter(gallery_ids.tolist())

    def chance(m: int, k: int) -> float:
        return 1.0 - np.exp(lgamma(n - m + 1) - lgamma(n - m - k + 1) - lgamma(n + 1) + lgamma(n - k + 1))

    return {f"top-{k}": round(float(np.mean([chance(count[t], k) for t in truth])), 3) if len(truth) else float("nan")
            for k in KS}


def one_seed(run: Path, data: Path, cache: Path) -> dict:
    names, c, ok = curves(data, cache)
    at = {str(n): i for i, n in enumerate(names)}
    ids = {f"train/{r['Image']}": r["Id"] for r in csv.DictReader(open(data / "train.csv"))}
    train = np.array([i for i, n in enumerate(names) if n.startswith("train/") and ok[i]])
    labels = np.array([ids[str(names[i])] for i in train])
    count = Counter(labels)
    q = np.flatnonzero([count[x] >= 2 for x in labels])
    rows = {"photos": len(names), "without a curve": int((~ok).sum()), "train": {}}
    for kind, sigma, shift in VARIANTS:
        x = descriptors(c[train], kind, sigma)
        s = similarity(x[q], x, shift)
        s[np.arange(len(q)), q] = -np.inf  # the photo itself left out
        rows["train"][f"{kind} sigma {sigma} shift {shift}"] = shares(recall_at(s, labels, labels[q]))
    best = max(VARIANTS, key=lambda v: rows["train"][f"{v[0]} sigma {v[1]} shift {v[2]}"]["top-20"])
    rows["chosen on train"] = f"{best[0]} sigma {best[1]} shift {best[2]}"

    sf = load_score_file(score_path(run, "test"))
    solution = read_solution(data / "test_solution.csv")
    truth = np.array([solution[str(n)] for n in sf.query], str)
    gallery_ids = np.asarray(sf.gallery_ids, str)
    qi = np.array([at[f"test/{n}"] for n in sf.query])
    gi = np.array([at[f"train/{n}"] for n in sf.gallery])
    pairs = load_table(run / "pairs_test.npz").pairs
    in_table = shortlisted(pairs, same_whale(pairs, gallery_ids, truth), len(truth))
    x = descriptors(c, best[0], best[1])
    s = similarity(x[qi], x[gi], best[2])
    s[:, ~ok[gi]] = -np.inf
    first = recall_at(s, gallery_ids, truth)
    known = np.isin(truth, gallery_ids) & ok[qi]
    photos = Counter(gallery_ids.tolist())
    rows["test"] = {}
    for what, m in (("known queries", known), ("known, shortlisted by the joint", known & in_table),
                    ("known, never shortlisted by the joint", known & ~in_table)):
        rows["test"][f"{what} ({int(m.sum())})"] = shares(first[m])
        rows["test"][f"{what}, a random order"] = random_shares(gallery_ids, truth[m])
        rows.setdefault("one-photo whales' share", {})[what] = round(float(np.mean(
            [photos[t] == 1 for t in truth[m]])), 3) if m.any() else float("nan")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True, help="joint run folders, {S} for the split seed")
    ap.add_argument("--data", required=True, help="the split's competition folders, {S} for the split seed")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--out", type=Path, default=Path("runs/edges"), help="where the curves are cached")
    args = ap.parse_args(argv)
    out = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        rows = one_seed(Path(args.runs.format(S=seed)), Path(args.data.format(S=seed)), args.out / f"seed{seed}.npz")
        print(f"split seed {seed}: {rows['photos']} photos, {rows['without a curve']} without a curve")
        for part in ("train", "test"):
            for what, r in rows[part].items():
                print(f"  {part:5s} {what:60s} " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()))
        print(f"  chosen on train: {rows['chosen on train']}")
        print("  whales with one gallery photo: " + ", ".join(f"{v:.3f} of {k}" for k, v in
                                                            rows["one-photo whales' share"].items()))
        out[seed] = rows
    print(json.dumps({"benchmark": "edge_curves", "seeds": out}))


if __name__ == "__main__":
    main()
