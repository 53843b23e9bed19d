"""ArcFace's class centres as evidence of the joint check: would they lift it? Not a test; reads kept joint runs.

    python benchmarks/flukes/centre_columns.py --runs 'runs/hbjc/seed{S}/joint' --seeds 0,1,2 \
        --trunk-cache runs/hbh/trunk-cache [--out runs/centre/hbjc.json]

The network of the recipe (sub-center ArcFace, ``configs/flukes_lite0_cpu_long.yaml``) learns one or more centres for
every training individual with two or more photos, and the toolkit scores it by photo against photo alone (the
cosine of two embeddings; :mod:`whale.objectives.arcface`). Here each shortlisted pair of a joint run's tables also
gets its individual's centre evidence from the run's network (its ``best`` checkpoint, the queries embedded from
their trunk maps in ``--trunk-cache``): the query's cosine to the individual's nearest centre (missing for an
individual without one), log(1 + that individual's rank among the centres) and the query's best centre cosine minus
the pair's. The check (:class:`whale.identify.check.JointCheck`, the run's settings) is fitted with and without those
columns on fold 0's validation **thinned** as the recipe fits it (``check.validation: thinned``, ``check.columns:
individuals``; :mod:`whale.identify.thin`). A thinned query's own individual keeps one gallery photo there, as a
test query's one-photo whale does, but the network trained on its hidden photos and learned its centre: that centre
is left out (missing, as a one-photo individual's is on the test) and out of the query's ranks.

Printed per seed and check: the thinned validation's figures (cross-fitted by groups of queries, the ``new_whale``
threshold tuned on them: :func:`benchmarks.flukes.shared.identification_figures`), then the test's: the check fitted
on all the thinned rows predicting the test table, the threshold tuned on the validation (as is, and with the
``new_whale`` queries weighted to the share 0.276 as the recipe's ``--tune-new-share``) applied to the test, and the
known whales' figures by ids alone. The test's network is the run's ``test_runs`` (``--with-run RUN:ALL``) or its
``with_runs``. The last stdout line is ``{"benchmark": "centre_columns", ...}``.
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

from benchmarks.flukes.joint_refit import evaluate, load_kept, report  # noqa: E402
from whale.data import ImageSet, fold_data, load_competition  # noqa: E402
from whale.identify.sources import run_scores  # noqa: E402

VARIANTS = {"centre": 1, "centre + rank": 2, "centre + rank + gap": 3}
"""Each row's name and how many of :func:`centre_columns`' columns it adds."""


def class_scores(net: Path, images: ImageSet, trunk_cache) -> tuple[np.ndarray, np.ndarray]:
    """``(cosines [n_photos, n_classes] float32, classes [n_classes] str)``: each photo of ``images`` embedded by the
    trained run ``net`` (its ``best`` checkpoint) against every class's nearest centre, the classes in the order of
    the identities it trained on (:func:`whale.training.identitybatches.class_counts`)."""
    from whale.inference.runs import RunScorer, load_run_model

    model, cfg = load_run_model(net, "best")
    meta = json.loads((net / "run.json").read_text())
    trained = fold_data(load_competition(meta["data"]), int(meta["fold"]), cfg.seed, val_new_whale=cfg.val_new_whale)
    scorer = RunScorer.for_config(model, cfg, verbose=False, trunk_cache=trunk_cache)
    emb = scorer.scorer.embed(scorer.features(images.paths, images.boxes)[0, 0])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    centres = np.asarray(model.get_layer("arcface").centers, np.float32)
    centres /= np.linalg.norm(centres, axis=-1, keepdims=True)
    classes = np.unique(np.asarray(trained.pairs.ids, str))
    if len(classes) != len(centres):
        raise ValueError(f"{net}: {len(centres)} classes in the model, {len(classes)} identities trained on")
    return np.einsum("qd,nkd->qnk", emb, centres).max(-1), classes


def centre_columns(pairs: np.ndarray, gallery_ids, cosines: np.ndarray, classes: np.ndarray,
                   left_out: dict[int, str] | None = None) -> np.ndarray:
    """``[n_pairs, 3] float32``: the pair's individual's centre cosine (NaN without a centre), log(1 + its rank among
    the centres the query sees) and the query's best centre cosine minus it. ``left_out``: ``{query: individual}``
    whose centre that query does not see (a thinned query's own)."""
    code = {c: i for i, c in enumerate(classes)}
    seen = cosines.astype(np.float32, copy=True)
    for q, individual in (left_out or {}).items():
        if individual in code:
            seen[q, code[individual]] = -np.inf
    k = np.array([code.get(i, -1) for i in np.asarray(gallery_ids, str)])[pairs[:, 1]]
    cos = np.where(k >= 0, seen[pairs[:, 0], np.maximum(k, 0)], np.nan)
    cos[~np.isfinite(cos)] = np.nan
    above = (seen[pairs[:, 0]] > np.nan_to_num(cos, nan=np.inf)[:, None]).sum(1)
    rank = np.where(np.isnan(cos), np.nan, np.log1p(above))
    return np.c_[cos, rank, seen.max(1)[pairs[:, 0]] - cos].astype(np.float32)


def one_seed(run: Path, trunk_cache) -> dict[str, dict]:
    kept = load_kept(run)
    fold, meta = int(kept.meta["fold"]), kept.meta
    net_val, net_test = Path(meta["with_runs"][0]), Path((meta.get("test_runs") or meta["with_runs"])[0])
    comp = load_competition(meta["data"])
    images = ImageSet.test(comp)
    order = {str(n): i for i, n in enumerate(images.names)}
    images = images.subset(np.array([order[n] for n in kept.test_query]))
    cosines = {"val": class_scores(net_val, kept.data.val, trunk_cache),
               "test": class_scores(net_test, images, trunk_cache)}
    own = {q: kept.truth[q] for q in kept.hidden}

    def columns(width):
        def extra(pairs, split):
            ids = kept.gallery_ids if split == "val" else kept.test_ids
            return centre_columns(pairs, ids, *cosines[split], own if split == "val" else None)[:, :width]
        return extra

    scores = run_scores(meta["with_runs"][0], "val", kept.query, kept.gallery, fold)
    out = {"each individual's columns (the recipe)": evaluate(kept, scores, kept.val, kept.test,
                                                              name="the recipe's columns")}
    for name, width in VARIANTS.items():
        out[name] = evaluate(kept, scores, kept.val, kept.test, columns(width), name=name)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True, help="joint run folders, {S} for the split seed")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--trunk-cache", required=True, help="where the network's trunk maps are kept")
    p.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = {s: one_seed(Path(args.runs.format(S=s)), args.trunk_cache) for s in seeds}
    return report("centre_columns", per_seed, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
