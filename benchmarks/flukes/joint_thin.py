"""The joint check on a validation that has whales with one gallery photo, as the test has. Not a test.

    python benchmarks/flukes/joint_thin.py --runs 'runs/hbj/seed{S}/joint' --seeds 0,1,2

Fold 0's validation queries are photos of individuals with three or more photos, so each keeps two or more in the
gallery; a test query's individual may keep one. The joint check is fitted on validation alone
(:mod:`whale.identify.check`), so it never sees a known whale with one gallery photo, and on the test it loses
those to the late fusion (docs/humpback.md, "Both feature kinds").

Here the validation is **thinned** as the test was drawn: each known validation query, with probability ``share``,
keeps one random gallery photo of its individual (the others hidden from that query: their pairs dropped, and every
rank and maximum of the pair table computed again without them, from the run's ``kinds/<kind>/val.npz`` and the
trained runs' own ``val.npz``; a kind's vote rank lowered by the hidden photos shortlisted above it). ``share`` is
what a split drawn as :func:`benchmarks.flukes.shared.mirror_split` draws from the fold's gallery: of the
individuals with two or more photos, the share with exactly two (one left once a query is drawn); ``--share``
overrides it. The test is never read.

Checks compared on the thinned validation (cross-fitted by groups of whole queries, the run's settings):

- ``fitted on validation``: the shipped check (fitted on the original rows), predicting the thinned rows;
- ``fitted on thinned``: fitted on the thinned rows;
- ``fitted on both``: fitted on the original and the thinned rows together;
- ``fitted on thinned, the photo count too``: the thinned rows with ``log_photos`` (the individual's gallery photos
  the query sees), which only a thinned validation can teach;
- ``fitted on thinned, each individual's columns``: ``check.columns: individuals``
  (:func:`whale.identify.check.check_rows`: the photo count and each individual's verified photos and margins);
- with ``--draws N`` (N > 1), ``fitted on N thinned draws, each individual's columns``: the same columns fitted on
  N thinnings of the validation drawn with seeds ``seed + 1000 d`` together (a query's rows of every draw in one
  cross-fitting group), predicting the first draw's rows, which every other row is measured on;

each with MAP@5 (the ``new_whale`` threshold tuned in-sample), the known whales' MAP@5 by ids alone, that of the
thinned queries alone (one gallery photo), top-5, and the share of all queries that are known whales whose id is
nowhere among the five. The last stdout line is ``{"benchmark": "joint_thin", "rows": {...}}``.

``--write DIR`` also writes ``DIR/seedS/``: each feature kind's and trained run's folder with its ``val.npz`` thinned
(a hidden photo scored at its query's lowest score; ``test.npz`` as it was), and ``joint_validation`` and
``joint_thinned``: the joint run with the check fitted on the original or the thinned validation (``val.npz`` the
thinned validation's cross-fitted scores, ``test.npz`` that check's test scores), so
``benchmarks/flukes/humpback_fuse.py`` measures the late fusion and both checks on the same thinned validation.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.flukes.joint_screen import seed_table  # noqa: E402
from benchmarks.flukes.shared import identification_figures  # noqa: E402
from whale import NEW_WHALE  # noqa: E402
from whale.identify.check import (JointCheck, check_rows, fitted_columns, identification_scores,  # noqa: E402
                                  load_table)
from whale.identify.config import JointConfig  # noqa: E402
from whale.identify.sources import run_scores  # noqa: E402
from whale.identify.thin import hidden_names, hidden_photos, mirror_share, thinned, write_view  # noqa: E402
from whale.inference.scorefile import load_score_file, score_path  # noqa: E402


def copy_run(src: Path, dst: Path, val_scores, test_scores) -> Path:
    """``src``'s small files and score files into ``dst``, their scores replaced by ``val_scores`` and
    ``test_scores`` (a thinned view of a run is :func:`whale.identify.thin.write_view`'s)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.glob("*"):
        if f.is_file() and f.suffix in (".json", ".yaml") and f.stat().st_size < 1 << 20:
            shutil.copy2(f, dst / f.name)
    for split, new in (("val", val_scores), ("test", test_scores)):
        path = score_path(src, split)
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["scores"] = np.asarray(new, arrays["scores"].dtype)
        with open(target, "wb") as fh:
            np.savez(fh, **arrays)
    return dst


def screen(run: Path, share: float | None, write: Path | None = None, draws: int = 1) -> dict[str, dict]:
    meta = json.loads((run / "run.json").read_text())
    seed, fold = int(meta.get("seed", 0)), int(meta["fold"])
    table = load_table(run / "pairs_val.npz")
    kind_files = {p.parent.name: load_score_file(p, need_query_ids=True)
                  for p in sorted((run / "kinds").glob("*/val.npz"))}
    first = next(iter(kind_files.values()))
    gallery_ids, truth = np.asarray(first.gallery_ids, str), np.asarray(first.query_ids, str)
    query, gallery = [str(n) for n in first.query], [str(n) for n in first.gallery]
    kind_scores = {k: np.asarray(f.scores, np.float32) for k, f in kind_files.items()}
    runs = [run_scores(r, "val", query, gallery, fold) for r in meta.get("with_runs", [])]
    share = mirror_share(gallery_ids) if share is None else share
    hidden = hidden_photos(gallery_ids, truth, share, seed)
    one_photo = np.zeros(len(truth), bool)
    one_photo[list(hidden)] = True
    t_pairs, t_rows, t_fallback = thinned(table, hidden, kind_scores, runs, gallery_ids)
    print(f"{run}: share {share:.3f}: {len(hidden)} of {int((truth != NEW_WHALE).sum())} known validation queries "
          f"keep one gallery photo; {len(table.pairs) - len(t_pairs):,} pairs dropped", flush=True)
    used = fitted_columns(table.columns)
    cfg = JointConfig(kinds=())
    check = JointCheck(cfg.rounds, cfg.leaf_nodes, cfg.learning_rate, cfg.folds, seed)
    same = gallery_ids[table.pairs[:, 1]] == truth[table.pairs[:, 0]]
    t_same = gallery_ids[t_pairs[:, 1]] == truth[t_pairs[:, 0]]
    individuals = check_rows(t_pairs, t_rows, table.columns, gallery_ids, "individuals")
    # each fit: (its rows, labels, queries; the thinned rows it predicts, in the same columns)
    fits = {"fitted on validation": (table.rows[:, used], same, table.pairs[:, 0], t_rows[:, used]),
            "fitted on thinned": (t_rows[:, used], t_same, t_pairs[:, 0], t_rows[:, used]),
            "fitted on both": (np.concatenate([table.rows[:, used], t_rows[:, used]]), np.concatenate([same, t_same]),
                               np.concatenate([table.pairs[:, 0], t_pairs[:, 0]]), t_rows[:, used]),
            "fitted on thinned, the photo count too": (t_rows, t_same, t_pairs[:, 0], t_rows),
            "fitted on thinned, each individual's columns": (individuals, t_same, t_pairs[:, 0], individuals)}
    if draws > 1:
        more = [thinned(table, hidden_photos(gallery_ids, truth, share, seed + 1000 * d), kind_scores, runs,
                        gallery_ids)[:2] for d in range(1, draws)]  # each draw's (pairs, rows)
        fits[f"fitted on {draws} thinned draws, each individual's columns"] = (
            np.concatenate([individuals] + [check_rows(dp, dr, table.columns, gallery_ids, "individuals")
                                            for dp, dr in more]),
            np.concatenate([t_same] + [gallery_ids[dp[:, 1]] == truth[dp[:, 0]] for dp, _ in more]),
            np.concatenate([t_pairs[:, 0]] + [dp[:, 0] for dp, _ in more]), individuals)
    out = {}
    for name, (rows, labels, q, predicted) in fits.items():
        p = check.cross_predict(rows, labels, q, predicted, t_pairs[:, 0])
        scores = identification_scores(t_pairs, p, gallery_ids, t_fallback, "max")
        out[name] = identification_figures(scores, gallery_ids, truth, one_photo)
        if write is not None and name in ("fitted on validation", "fitted on thinned"):
            test = load_table(run / "pairs_test.npz")
            final = JointCheck(cfg.rounds, cfg.leaf_nodes, cfg.learning_rate, cfg.folds, seed)
            final.fit(rows, labels, q, cross_fit=False)
            test_ids = np.asarray(load_score_file(run / "test.npz").gallery_ids, str)
            test_scores = identification_scores(test.pairs, final.predict(test.rows[:, used]), test_ids,
                                                test.fallback, "max")
            copy_run(run, write / f"joint_{name.split()[-1]}", scores, test_scores)
        if name == "fitted on validation":  # the same check on the original validation, for reference
            p0 = check.cross_predict(rows, labels, q, table.rows[:, used], table.pairs[:, 0])
            full = identification_scores(table.pairs, p0, gallery_ids, table.fallback, "max")
            out["fitted on validation, original validation"] = identification_figures(
                full, gallery_ids, truth, np.zeros(len(truth), bool))
        print(f"{run}: {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in out[name].items()), flush=True)
    if write is not None:
        names = hidden_names(hidden, query, gallery)
        for src in [run / "kinds" / k for k in kind_scores] + [Path(r) for r in meta.get("with_runs", [])]:
            write_view(src, write / src.name, names, score_path(src, "val"), score_path(src, "test"))
    for k, s in kind_scores.items():  # each kind's own check alone on the thinned validation
        s = s.copy()
        for qq, h in hidden.items():
            s[qq, h] = 0
        out[f"{k} alone"] = identification_figures(s, gallery_ids, truth, one_photo)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="joint run folders with {S} for the split seed")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    p.add_argument("--share", type=float, default=None, help="the share of known queries thinned (default: the "
                   "mirror split's, from the fold's gallery)")
    p.add_argument("--draws", type=int, default=1, help="also fit each individual's columns on this many thinned "
                   "draws together (default 1: no such row)")
    p.add_argument("--write", default=None, help="write the thinned runs and both checks' score files under "
                   "WRITE/seedS (module docstring)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = {s: screen(Path(args.runs.replace("{S}", str(s))), args.share,
                          Path(args.write) / f"seed{s}" if args.write else None, args.draws) for s in seeds}
    rows = seed_table(per_seed, "check (validation, thinned)")
    print(json.dumps({"benchmark": "joint_thin", "seeds": seeds, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
