"""The joint check fitted again on a kept joint run's pair tables with a trained run's new scores. Not a test.

    python benchmarks/flukes/joint_refit.py --runs 'runs/hbjc/seed{S}/joint' --seeds 0,1,2 \
        --with-run 'runs/gv/fold{S}' [--with-run 'runs/gv/fold{S}:runs/gv/all{S}'] [--out runs/gv/refit.json]

A network scored another way (``trunk.gallery_views``, another checkpoint, another training) changes the joint
identification's run columns (the pair's score, its rank, the individual's best score and rank, the gap to the
query's best: :func:`whale.identify.check.pair_table`) and its shortlist (the run's best photos). Verifying the new
shortlist takes the joint's hours; here the **same shortlisted pairs** (the kept ``pairs_val.npz`` and
``pairs_test.npz``) get the run columns of each ``--with-run RUN[:ALL]`` (``RUN``'s validation scores, ``ALL``'s or
``RUN``'s test scores), every feature kind's columns as verified, and the check is fitted as the recipe fits it
(fold 0's validation thinned as the test is drawn, each individual's columns: :mod:`whale.identify.thin`,
``check.columns: individuals``), beside the run's own scores (the row ``as kept``). A photo that only the new scores
would shortlist is not in these tables, so the figures are what the new scores give the pairs already there.

Per seed and row: the thinned validation's figures (cross-fitted by groups of queries, the ``new_whale`` threshold
tuned there: :func:`benchmarks.flukes.shared.identification_figures`), then the test's: the check fitted on all the
thinned rows predicting the test table, MAP@5 at the validation's threshold (as tuned, and with the ``new_whale``
queries weighted to the recipe's share 0.276), the known whales' MAP@5 by ids alone and their top-5. The last stdout
line is ``{"benchmark": "joint_refit", ...}``. :mod:`benchmarks.flukes.centre_columns` reads its tables the same way.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()

from benchmarks.flukes.shared import average_precision5, identification_figures, known_hits, read_solution  # noqa: E402
from whale import NEW_WHALE  # noqa: E402
from whale.data import fold_data, load_competition  # noqa: E402
from whale.identify.check import (RUN_COLUMNS, JointCheck, PairTable, check_rows, identification_scores,  # noqa: E402
                                  load_table, pair_table)
from whale.identify.config import JointConfig  # noqa: E402
from whale.identify.sources import run_scores  # noqa: E402
from whale.identify.thin import hidden_photos, mirror_share, thinned  # noqa: E402
from whale.inference.scorefile import load_score_file  # noqa: E402
from whale.ranking.newwhale import map_for_thresholds, tune, tune_threshold  # noqa: E402
from whale.ranking.topids import TOP_K, TopIds, top_id_scores  # noqa: E402

SHARE = 0.276
"""The ``new_whale`` share the recipe's ``--tune-new-share`` weights the validation to."""
RUN_SUFFIXES = tuple(f".{c}" for c in RUN_COLUMNS)
"""A trained run's columns in a pair table, by their name's end."""


@dataclass
class Kept:
    """A joint run's kept tables and what they are of: fold 0's validation (its queries' ``truth``, the photos each
    thinned query keeps hidden) and the test (``test_truth`` from the split's ``test_solution.csv``)."""

    run: Path
    meta: dict
    data: object
    val: PairTable
    test: PairTable
    kind_scores: dict[str, np.ndarray]
    gallery_ids: np.ndarray
    truth: np.ndarray
    query: list[str]
    gallery: list[str]
    test_query: list[str]
    test_gallery: list[str]
    test_ids: np.ndarray
    test_truth: np.ndarray
    hidden: dict[int, np.ndarray]
    one_photo: np.ndarray


def load_kept(run: Path) -> Kept:
    """The joint run ``run``'s tables (``whale score --matcher joint``'s folder) and its split's truth."""
    meta = json.loads((run / "run.json").read_text())
    seed, fold = int(meta.get("seed", 0)), int(meta["fold"])
    data = fold_data(load_competition(meta["data"]), fold, seed)
    kinds = {p.parent.name: load_score_file(p, need_query_ids=True) for p in sorted((run / "kinds").glob("*/val.npz"))}
    first = next(iter(kinds.values()))
    gallery_ids, truth = np.asarray(first.gallery_ids, str), np.asarray(first.query_ids, str)
    query, gallery = [str(n) for n in first.query], [str(n) for n in first.gallery]
    if query != [str(n) for n in data.val.names]:
        raise ValueError(f"{run}: its validation queries are not fold {fold}'s of {meta['data']}")
    test_file = load_score_file(run / "test.npz")
    solution = read_solution(Path(meta["data"]) / "test_solution.csv")
    hidden = hidden_photos(gallery_ids, truth, mirror_share(gallery_ids), seed)
    one_photo = np.zeros(len(truth), bool)
    one_photo[list(hidden)] = True
    return Kept(run, meta, data, load_table(run / "pairs_val.npz"), load_table(run / "pairs_test.npz"),
                {k: np.asarray(f.scores, np.float32) for k, f in kinds.items()}, gallery_ids, truth, query, gallery,
                [str(n) for n in test_file.query], [str(n) for n in test_file.gallery],
                np.asarray(test_file.gallery_ids, str), np.array([solution[str(n)] for n in test_file.query]),
                hidden, one_photo)


def with_run(table: PairTable, scores: np.ndarray, gallery_ids) -> PairTable:
    """``table`` with its (one) trained run's columns computed again from ``scores`` ``[n_q, n_g]``."""
    at = [i for i, c in enumerate(table.columns) if c.endswith(RUN_SUFFIXES) and ":" in c.split(".")[0]]
    if len(at) != len(RUN_SUFFIXES):
        raise ValueError(f"{len(at)} trained run columns in the table, {len(RUN_SUFFIXES)} expected (one run)")
    rows = table.rows.copy()
    rows[:, at] = pair_table(table.pairs, [], [scores], gallery_ids, photos=False)
    return PairTable(table.pairs, rows, table.fallback, table.columns, table.key)


def test_figures(scores: np.ndarray, gallery_ids, truth, thresholds: dict[str, float]) -> dict[str, float]:
    """The test's MAP@5 at each validation threshold of ``thresholds``, and its known whales' figures by ids alone."""
    gallery_ids, truth = np.asarray(gallery_ids, str), np.asarray(truth, str)
    names, idx, vals = top_id_scores(scores, gallery_ids, TOP_K, open_label=NEW_WHALE)
    out = {f"map5 {k}": float(map_for_thresholds(TopIds(names[idx], vals, truth, NEW_WHALE), [t])[0])
           for k, t in thresholds.items()}
    _, hit = known_hits(scores, gallery_ids, truth)
    return {**out, "known_ids_only": float(average_precision5(hit).mean()), "top5": float(hit.any(axis=1).mean())}


def evaluate(kept: Kept, val_scores: np.ndarray, val: PairTable, test: PairTable, extra=None,
             name: str = "") -> dict[str, dict]:
    """The recipe's check on ``val`` thinned (the run's validation scores ``val_scores`` for the thinned queries'
    columns) and its figures; ``extra(pairs, split)``, where given, the ``[m, e]`` columns appended to the rows of
    ``pairs`` (the thinned validation's, then the test's)."""
    pairs, rows, fallback = thinned(val, kept.hidden, kept.kind_scores, [val_scores], kept.gallery_ids)
    rows = check_rows(pairs, rows, val.columns, kept.gallery_ids, "individuals")
    test_rows = check_rows(test.pairs, test.rows, test.columns, kept.test_ids, "individuals")
    if extra is not None:
        rows = np.c_[rows, extra(pairs, "val")].astype(np.float32)
        test_rows = np.c_[test_rows, extra(test.pairs, "test")].astype(np.float32)
    same = kept.gallery_ids[pairs[:, 1]] == kept.truth[pairs[:, 0]]
    cfg = JointConfig(kinds=())
    check = JointCheck(cfg.rounds, cfg.leaf_nodes, cfg.learning_rate, cfg.folds, int(kept.meta.get("seed", 0)))
    scores = identification_scores(pairs, check.cross_predict(rows, same, pairs[:, 0], rows, pairs[:, 0]),
                                   kept.gallery_ids, fallback, "max")
    figures = identification_figures(scores, kept.gallery_ids, kept.truth, kept.one_photo)
    tuned, _, _ = tune_threshold(scores, kept.gallery_ids, kept.truth)
    names, idx, vals = top_id_scores(scores, kept.gallery_ids, TOP_K, open_label=NEW_WHALE)
    share = tune(TopIds(names[idx], vals, kept.truth, NEW_WHALE), open_share=SHARE)[0]
    check.fit(rows, same, pairs[:, 0], cross_fit=False)
    t_scores = identification_scores(test.pairs, check.predict(test_rows), kept.test_ids, test.fallback, "max")
    out = {"validation": figures,
           "test": test_figures(t_scores, kept.test_ids, kept.test_truth, {"tuned": tuned, "share": share})}
    print(f"{kept.run}: {name}: validation " + ", ".join(f"{k} {v:.4f}" for k, v in figures.items())
          + "; test " + ", ".join(f"{k} {v:.4f}" for k, v in out["test"].items()), flush=True)
    return out


def table(per_seed: dict[int, dict[str, dict]]) -> str:
    """Markdown: each row's mean +- sd over the seeds, validation and test."""
    seeds = list(per_seed)
    lines = ["| check | validation MAP@5 | validation known, ids only | test MAP@5 (tuned) | test MAP@5 (share) "
             "| test known, ids only | test top-5 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for n in per_seed[seeds[0]]:
        def cell(split, key):
            v = np.array([per_seed[s][n][split][key] for s in seeds])
            return f"{v.mean():.4f} +- {v.std(ddof=1) if len(v) > 1 else 0:.4f}"
        lines.append(f"| {n} | {cell('validation', 'map5_tuned')} | {cell('validation', 'known_ids_only')} | "
                     f"{cell('test', 'map5 tuned')} | {cell('test', 'map5 share')} | "
                     f"{cell('test', 'known_ids_only')} | {cell('test', 'top5')} |")
    return "\n".join(lines)


def one_seed(run: Path, with_runs: list[str]) -> dict[str, dict]:
    kept = load_kept(run)
    fold = int(kept.meta["fold"])
    own = run_scores(kept.meta["with_runs"][0], "val", kept.query, kept.gallery, fold)
    out = {"as kept": evaluate(kept, own, kept.val, kept.test, name="as kept")}
    for spec in with_runs:
        val_run, _, test_run = spec.partition(":")
        val_scores = run_scores(val_run, "val", kept.query, kept.gallery, fold)
        test_scores = run_scores(test_run or val_run, "test", kept.test_query, kept.test_gallery, fold)
        out[spec] = evaluate(kept, val_scores, with_run(kept.val, val_scores, kept.gallery_ids),
                             with_run(kept.test, test_scores, kept.test_ids), name=spec)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True, help="joint run folders, {S} for the split seed")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--with-run", action="append", default=[], metavar="RUN[:ALL]",
                   help="a trained run's new scores ({S} for the split seed); repeat for several")
    p.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = {s: one_seed(Path(args.runs.format(S=s)), [w.format(S=s) for w in args.with_run]) for s in seeds}
    return report("joint_refit", {s: {k.replace(str(s), "{S}"): v for k, v in rows.items()}
                                  for s, rows in per_seed.items()}, args.out)


def report(benchmark: str, per_seed: dict[int, dict[str, dict]], out: Path | None) -> int:
    """Print :func:`table` and the last line ``{"benchmark": ..., "seeds", "per_seed"}`` (also written to ``out``)."""
    print(table(per_seed))
    result = {"benchmark": benchmark, "seeds": list(per_seed), "per_seed": per_seed}
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
