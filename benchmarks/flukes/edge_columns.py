"""The trailing edge's learned outline as evidence of the joint check: would it lift it? Not a test; reads kept joint
runs and chooses nothing in the toolkit.

    python benchmarks/flukes/edge_columns.py --runs 'runs/views16j/seed{S}' --seeds 0,1,2 --curves runs/edges \\
        [--out runs/edges/columns.json]

Each photo's outline is :mod:`benchmarks.flukes.edge_curves`' (cached in ``--curves``/``seed<S>.npz``), embedded by
:mod:`whale.outline.net`'s net, trained twice per split seed as the recipe trains its network: on
fold 0's gallery for the validation (less every photo the thinned validation hides: the net never sees a thinned
query's hidden photos, as a test query's one-photo whale has none) and on every known photo for the test. The
training's length (in batches) is chosen on the first of those photos alone (:func:`whale.outline.net.choose_steps`).

Each shortlisted pair of the kept tables (``pairs_val.npz``, ``pairs_test.npz``) then gets the outline's columns: the
two curves' cosine (missing where a photo has no curve), log(1 + the gallery photo's rank among the query's cosines,
hidden photos left out) and the query's best cosine minus the pair's; the check is fitted with and without them as
the recipe fits it (:func:`benchmarks.flukes.joint_refit.evaluate`: fold 0's validation thinned, each individual's
columns). A photo the outline alone would shortlist is not in these tables: what an outline shortlist could add is
printed beside, the known test queries whose individual the joint never shortlisted and that the outline's best 20
photos hold (``test_solution.csv`` read for reporting only). The last stdout line is
``{"benchmark": "edge_columns", ...}``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()

from benchmarks.flukes.edge_curves import curves, recall_at  # noqa: E402
from whale.outline.net import choose_steps, embeddings, train_embedding  # noqa: E402
from benchmarks.flukes.joint_recall import same_whale, shortlisted  # noqa: E402
from benchmarks.flukes.joint_refit import evaluate, load_kept, report  # noqa: E402
from whale.identify.sources import run_scores  # noqa: E402

VARIANTS = {"outline cosine": 1, "outline cosine + rank + gap": 3}
"""Each row's name and how many of :func:`edge_columns`' columns it adds."""


def similarities(eq: np.ndarray, eg: np.ndarray, q_ok: np.ndarray, g_ok: np.ndarray,
                 hidden: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """``[n_q, n_g] float32`` cosines, NaN where a photo has no curve, -inf where ``hidden`` hides the photo."""
    s = (eq @ eg.T).astype(np.float32)
    s[~q_ok] = np.nan
    s[:, ~g_ok] = np.nan
    for q, h in (hidden or {}).items():
        s[q, h] = -np.inf
    return s


def edge_columns(pairs: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``[n_pairs, 3] float32``: cosine, log(1 + rank among the query's visible photos), the query's best less it."""
    cos = s[pairs[:, 0], pairs[:, 1]]
    cos = np.where(np.isfinite(cos), cos, np.nan)
    finite = np.where(np.isnan(s), -np.inf, s)
    rank = np.log1p((finite[pairs[:, 0]] > np.nan_to_num(cos, nan=np.inf)[:, None]).sum(1)).astype(np.float32)
    rank[np.isnan(cos)] = np.nan
    return np.c_[cos, rank, finite.max(1)[pairs[:, 0]] - cos].astype(np.float32)


def one_seed(run: Path, cache: Path) -> tuple[dict, dict]:
    kept = load_kept(run)
    names, c, ok = curves(Path(kept.meta["data"]), cache)
    at = {str(n): i for i, n in enumerate(names)}

    def rows_of(photos, split):
        return np.array([at[f"{split}/{n}"] for n in photos])

    vq, vg = rows_of(kept.query, "train"), rows_of(kept.gallery, "train")
    tq, tg = rows_of(kept.test_query, "test"), rows_of(kept.test_gallery, "train")
    hidden = np.zeros(len(vg), bool)
    hidden[np.concatenate(list(kept.hidden.values()))] = True
    learn = ok[vg] & ~hidden
    if set(vg[learn]) & set(vq) or set(tg) & set(tq):
        raise ValueError(f"{run}: a query's curve among the photos the net would learn from")
    steps, held = choose_steps(c[vg[learn]], kept.gallery_ids[learn])
    print(f"{run}: the outline net's batches {steps} (held-out half's top-20 {held})", flush=True)
    net = train_embedding(c[vg[learn]], kept.gallery_ids[learn], steps)
    e = embeddings(net, c)
    sims = {"val": similarities(e[vq], e[vg], ok[vq], ok[vg], kept.hidden)}
    learn = ok[tg]
    net = train_embedding(c[tg[learn]], kept.test_ids[learn], steps)
    e = embeddings(net, c)
    sims["test"] = similarities(e[tq], e[tg], ok[tq], ok[tg])

    known = np.isin(kept.test_truth, kept.test_ids) & ok[tq]
    never = known & ~shortlisted(kept.test.pairs, same_whale(kept.test.pairs, kept.test_ids, kept.test_truth),
                                 len(kept.test_truth))
    first = recall_at(np.nan_to_num(sims["test"], nan=-np.inf), kept.test_ids, kept.test_truth)
    reach = {"batches": steps, "held-out half top-20": held, "known test queries": int(known.sum()),
             "never shortlisted": int(never.sum()),
             **{f"outline top-{k}, known": round(float((first[known] < k).mean()), 4) for k in (1, 5, 20)},
             **{f"outline top-{k}, never shortlisted": round(float((first[never] < k).mean()), 4) for k in (5, 20)}}
    print(f"{run}: {reach}", flush=True)

    def columns(width):
        return lambda pairs, split: edge_columns(pairs, sims[split])[:, :width]

    scores = run_scores(kept.meta["with_runs"][0], "val", kept.query, kept.gallery, int(kept.meta["fold"]))
    out = {"the recipe's columns": evaluate(kept, scores, kept.val, kept.test, name="the recipe's columns")}
    for name, width in VARIANTS.items():
        out[name] = evaluate(kept, scores, kept.val, kept.test, columns(width), name=name)
    return out, reach


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True, help="joint run folders, {S} for the split seed")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--curves", type=Path, default=Path("runs/edges"), help="where edge_curves.py caches the curves")
    p.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    per_seed, reach = {}, {}
    for s in [int(x) for x in args.seeds.split(",")]:
        per_seed[s], reach[s] = one_seed(Path(args.runs.format(S=s)), args.curves / f"seed{s}.npz")
    print(json.dumps({"outline shortlist": reach}))
    return report("edge_columns", per_seed, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
