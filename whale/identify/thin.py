"""The joint check fitted on a validation thinned as the test is drawn (``check.validation: thinned``).

Fold ``K``'s validation queries are photos of individuals with three or more photos (:mod:`whale.data.folds`), so
each keeps two or more in the gallery, where a test query's individual may keep one. A check fitted on those
queries never sees a known whale with a single gallery photo. **Thinning** draws the validation as the test is drawn:
each known validation query, with probability ``share``, keeps one random gallery photo of its individual; the others
are hidden from that query (their pairs dropped, every rank and maximum of its rows computed again without them,
each feature kind's vote rank lowered by the hidden photos shortlisted above it, its individual's photo count by
them). ``share`` is what a test split drawn from the fold's gallery gives (:func:`mirror_share`). Measured in
``benchmarks/flukes/joint_thin.py`` (docs/humpback.md, "A validation with one-photo whales"); this module is that
benchmark's and :func:`whale.identify.score.score_joint`'s.

:func:`write_view` writes a score folder's **thinned view**: its validation file with the same photos hidden
(scored at their row's lowest) and its test file as it is, so ``whale ensemble`` calibrates and tunes the runs fused
with a thinned joint run on the same validation as that run.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from whale import NEW_WHALE
from whale.identify.check import KindEvidence, PairTable, pair_table


def mirror_share(gallery_ids: np.ndarray, open_label: str = NEW_WHALE) -> float:
    """Of the gallery's individuals with two or more photos, the share with exactly two: a query drawn from one of
    those leaves it one photo."""
    ids = np.asarray(gallery_ids, str)
    _, counts = np.unique(ids[ids != open_label], return_counts=True)
    return float((counts == 2).sum() / max((counts >= 2).sum(), 1))


def hidden_photos(gallery_ids: np.ndarray, truth: np.ndarray, share: float, seed: int,
                  open_label: str = NEW_WHALE) -> dict[int, np.ndarray]:
    """``{query: gallery photos hidden from it}``: each known query whose individual has two or more gallery photos,
    with probability ``share``, keeps one random photo of its individual (the draw fixed by ``seed``)."""
    gallery_ids, truth = np.asarray(gallery_ids, str), np.asarray(truth, str)
    rng = np.random.default_rng(2000 + seed)
    out = {}
    for q, t in enumerate(truth):
        own = np.flatnonzero(gallery_ids == t)
        if t == open_label or len(own) < 2 or rng.random() >= share:
            continue
        out[q] = np.delete(own, rng.integers(len(own)))
    return out


def thinned(table: PairTable, hidden: dict[int, np.ndarray], kind_scores: dict[str, np.ndarray],
            runs: list[np.ndarray], gallery_ids: np.ndarray,
            open_label: str = NEW_WHALE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pairs, rows, fallback)`` of ``table`` with each query's ``hidden`` photos taken out (module docstring).

    ``kind_scores``: each feature kind's own ``[n_q, n_g]`` scores of the split (its ``kinds/<kind>/val.npz``);
    ``runs``: each trained run's scores of the same queries and photos, in the table's column order."""
    pairs, rows, columns = table.pairs, table.rows, table.columns
    mask = np.zeros(table.fallback.shape, bool)
    for q, h in hidden.items():
        mask[q, h] = True
    keep = ~mask[pairs[:, 0], pairs[:, 1]]
    if not hidden:
        return pairs, rows, table.fallback
    qs = np.array(sorted(hidden), np.int64)
    redo = keep & np.isin(pairs[:, 0], qs)
    sub = pairs[redo].copy()
    sub_pairs = np.stack([np.searchsorted(qs, sub[:, 0]), sub[:, 1]], axis=1)
    kinds = sorted({c.split(".")[0] for c in columns if c.endswith(".inliers")})
    evidence = []
    for k in kinds:
        s = kind_scores[k][qs].astype(np.float32)
        s[mask[qs]] = -np.inf
        evidence.append(KindEvidence(s, np.zeros(s.shape, np.float32), np.zeros(s.shape, np.float32)))
    masked_runs = []
    for r in runs:
        r = r[qs].astype(np.float32)
        r[mask[qs]] = -np.inf
        masked_runs.append(r)
    new = pair_table(sub_pairs, evidence, masked_runs, gallery_ids, open_label, photos="log_photos" in columns)
    old = rows[redo]
    col = {c: i for i, c in enumerate(columns)}
    for k in kinds:  # per pair, unchanged by hiding others; the vote rank lowered by the hidden photos above it
        for c in ("p", "inliers", "log_votes"):
            new[:, col[f"{k}.{c}"]] = old[:, col[f"{k}.{c}"]]
        votes = np.full(mask.shape, -np.inf, np.float32)
        votes[pairs[:, 0], pairs[:, 1]] = rows[:, col[f"{k}.log_votes"]]
        above = np.zeros(len(sub), np.float32)
        for i, (q, g) in enumerate(sub):
            h = hidden[int(q)]
            vh, vg = votes[q, h], votes[q, g]
            above[i] = np.sum((vh > vg) | ((vh == vg) & (h < g) & np.isfinite(vh)))
        rank = np.expm1(old[:, col[f"{k}.vote_rank"]])
        new[:, col[f"{k}.vote_rank"]] = np.log1p(np.maximum(rank - above, 0))
    if "log_photos" in col:  # the query's own individual counted without the photos hidden from it
        ids = np.asarray(gallery_ids, str)
        lost = np.array([len(hidden[int(q)]) * (ids[g] == ids[hidden[int(q)][0]]) for q, g in sub], np.float64)
        count = np.rint(np.exp(old[:, col["log_photos"]].astype(np.float64)))
        new[:, col["log_photos"]] = np.log(np.maximum(count - lost, 1))
    out_rows = rows.copy()
    out_rows[redo] = new
    fallback = table.fallback.copy()
    fallback[mask] = 0
    return pairs[keep], out_rows[keep], fallback


def hidden_names(hidden: dict[int, np.ndarray], query, gallery) -> dict[str, list[str]]:
    """``hidden`` by photo names: ``{query name: [gallery names hidden from it]}``."""
    return {str(query[q]): [str(gallery[g]) for g in h] for q, h in sorted(hidden.items())}


def write_views(views: dict[str, Path], out: Path, hidden: dict[str, list[str]], share: float, seed: int) -> None:
    """Each score folder of ``views`` as its thinned view ``out/NAME`` (:func:`write_view`; its test file linked where
    it has one) and ``out/hidden.json``: the share, the draw's seed and each query's ``hidden`` photos by name."""
    from whale.core.files import write_json_atomic
    from whale.inference.scorefile import score_path

    for name, src in views.items():
        test = score_path(src, "test")
        write_view(src, out / name, hidden, score_path(src, "val"), test if test.is_file() else None)
    write_json_atomic(out / "hidden.json", {"share": share, "seed": seed, "hidden": hidden})


def write_view(src: Path, dst: Path, hidden: dict[str, list[str]], val_path: Path, test_path: Path | None) -> Path:
    """``dst``: the score folder ``src``'s thinned view (module docstring): its ``run.json`` and small YAML files,
    ``val.npz`` (read from ``val_path``) with each query's ``hidden`` photos scored at its row's lowest, ``test.npz``
    a link to ``test_path`` (a copy where the file system has no links)."""
    from whale.core.files import atomic_write

    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(src).glob("*"):
        if f.is_file() and f.suffix in (".json", ".yaml") and f.stat().st_size < 1 << 20:
            shutil.copy2(f, dst / f.name)
    with np.load(val_path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    scores = arrays["scores"].copy()
    col = {str(n): i for i, n in enumerate(arrays["gallery"])}
    for i, q in enumerate(arrays["query"]):
        h = [col[g] for g in hidden.get(str(q), ()) if g in col]
        if h:
            scores[i, h] = scores[i].min()
    arrays["scores"] = scores

    def write(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(dst / "val.npz", write)
    if test_path is not None:
        target = dst / "test.npz"
        target.unlink(missing_ok=True)
        try:
            os.link(test_path, target)
        except OSError:
            shutil.copy2(test_path, target)
    return dst
