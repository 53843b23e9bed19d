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

from benchmarks.flukes.shared import average_precision5, identification_figures, known_hits, read_solution  # noqa: E402
from whale import NEW_WHALE  # noqa: E402
from whale.data import ImageSet, fold_data, load_competition  # noqa: E402
from whale.identify.check import JointCheck, check_rows, identification_scores, load_table  # noqa: E402
from whale.identify.config import JointConfig  # noqa: E402
from whale.identify.sources import run_scores  # noqa: E402
from whale.identify.thin import hidden_photos, mirror_share, thinned  # noqa: E402
from whale.inference.scorefile import load_score_file  # noqa: E402
from whale.ranking.newwhale import map_for_thresholds, tune, tune_threshold  # noqa: E402
from whale.ranking.topids import TOP_K, TopIds, top_id_scores  # noqa: E402

SHARE = 0.276
"""The ``new_whale`` share the recipe's ``--tune-new-share`` weights the validation to."""
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


def test_figures(scores: np.ndarray, gallery_ids, truth, thresholds: dict[str, float]) -> dict[str, float]:
    """The test's MAP@5 at each validation threshold of ``thresholds``, and its known whales' figures by ids alone."""
    gallery_ids, truth = np.asarray(gallery_ids, str), np.asarray(truth, str)
    names, idx, vals = top_id_scores(scores, gallery_ids, TOP_K, open_label=NEW_WHALE)
    top = TopIds(names[idx], vals, truth, NEW_WHALE)
    out = {f"map5 {k}": float(map_for_thresholds(top, [t])[0]) for k, t in thresholds.items()}
    _, hit = known_hits(scores, gallery_ids, truth)
    return {**out, "known_ids_only": float(average_precision5(hit).mean()), "top5": float(hit.any(axis=1).mean())}


def one_seed(run: Path, trunk_cache) -> dict[str, dict]:
    meta = json.loads((run / "run.json").read_text())
    seed, fold = int(meta.get("seed", 0)), int(meta["fold"])
    net_val, net_test = Path(meta["with_runs"][0]), Path((meta.get("test_runs") or meta["with_runs"])[0])
    comp = load_competition(meta["data"])
    data = fold_data(comp, fold, seed)
    table = load_table(run / "pairs_val.npz")
    kinds = {p.parent.name: load_score_file(p, need_query_ids=True) for p in sorted((run / "kinds").glob("*/val.npz"))}
    first = next(iter(kinds.values()))
    gallery_ids, truth = np.asarray(first.gallery_ids, str), np.asarray(first.query_ids, str)
    query, gallery = [str(n) for n in first.query], [str(n) for n in first.gallery]
    if query != [str(n) for n in data.val.names]:
        raise ValueError(f"{run}: its validation queries are not fold {fold}'s of {meta['data']}")
    runs = [run_scores(r, "val", query, gallery, fold) for r in meta["with_runs"]]
    hidden = hidden_photos(gallery_ids, truth, mirror_share(gallery_ids), seed)
    one_photo = np.zeros(len(truth), bool)
    one_photo[list(hidden)] = True
    pairs, rows, fallback = thinned(table, hidden, {k: np.asarray(f.scores, np.float32) for k, f in kinds.items()},
                                    runs, gallery_ids)
    rows = check_rows(pairs, rows, table.columns, gallery_ids, "individuals")
    same = gallery_ids[pairs[:, 1]] == truth[pairs[:, 0]]
    cos, classes = class_scores(net_val, data.val, trunk_cache)
    extra = centre_columns(pairs, gallery_ids, cos, classes, {q: truth[q] for q in hidden})

    test = load_table(run / "pairs_test.npz")
    test_file = load_score_file(run / "test.npz")
    test_ids = np.asarray(test_file.gallery_ids, str)
    solution = read_solution(Path(meta["data"]) / "test_solution.csv")
    test_truth = np.array([solution[str(n)] for n in test_file.query])
    images = ImageSet.test(comp)
    order = {str(n): i for i, n in enumerate(images.names)}
    if [str(n) for n in test_file.query] != [str(n) for n in images.names]:
        images = images.subset(np.array([order[str(n)] for n in test_file.query]))
    test_rows = check_rows(test.pairs, test.rows, test.columns, test_ids, "individuals")
    t_cos, t_classes = class_scores(net_test, images, trunk_cache)
    test_extra = centre_columns(test.pairs, test_ids, t_cos, t_classes)

    cfg = JointConfig(kinds=())
    out = {}
    for name, width in {"each individual's columns (the recipe)": 0, **VARIANTS}.items():
        fit, predict = (np.c_[rows, extra[:, :width]], np.c_[test_rows, test_extra[:, :width]])
        check = JointCheck(cfg.rounds, cfg.leaf_nodes, cfg.learning_rate, cfg.folds, seed)
        val_scores = identification_scores(pairs, check.cross_predict(fit, same, pairs[:, 0], fit, pairs[:, 0]),
                                           gallery_ids, fallback, "max")
        val = identification_figures(val_scores, gallery_ids, truth, one_photo)
        shared_t, _, _ = tune_threshold(val_scores, gallery_ids, truth)
        names, idx, vals = top_id_scores(val_scores, gallery_ids, TOP_K, open_label=NEW_WHALE)
        share_t = tune(TopIds(names[idx], vals, truth, NEW_WHALE), open_share=SHARE)[0]
        check.fit(fit, same, pairs[:, 0], cross_fit=False)
        t_scores = identification_scores(test.pairs, check.predict(predict), test_ids, test.fallback, "max")
        out[name] = {"validation": val, "test": test_figures(t_scores, test_ids, test_truth,
                                                              {"tuned": shared_t, "share": share_t})}
        print(f"{run}: {name}: validation " + ", ".join(f"{k} {v:.4f}" for k, v in val.items())
              + "; test " + ", ".join(f"{k} {v:.4f}" for k, v in out[name]["test"].items()), flush=True)
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
    names = list(per_seed[seeds[0]])
    print("| check | validation MAP@5 | validation known, ids only | test MAP@5 (tuned) | test MAP@5 (share) "
          "| test known, ids only | test top-5 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in names:
        def cell(split, key):
            v = np.array([per_seed[s][n][split][key] for s in seeds])
            return f"{v.mean():.4f} +- {v.std(ddof=1) if len(v) > 1 else 0:.4f}"
        print(f"| {n} | {cell('validation', 'map5_tuned')} | {cell('validation', 'known_ids_only')} | "
              f"{cell('test', 'map5 tuned')} | {cell('test', 'map5 share')} | {cell('test', 'known_ids_only')} | "
              f"{cell('test', 'top5')} |")
    result = {"benchmark": "centre_columns", "seeds": seeds, "per_seed": per_seed}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
