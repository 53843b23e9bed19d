"""Where the joint identification loses its known whales: each source's shortlist, the merged one, the check's five.
Not a test; reads kept joint runs and chooses nothing.

    python benchmarks/flukes/joint_recall.py --runs 'runs/hbj/seed{S}/joint' --seeds 0,1,2

Each ``--runs`` folder is a ``whale score --matcher joint`` run. For each split (fold 0's validation queries; the
test photos with ``--data``'s ``test_solution.csv``, for reporting only), over the **known** queries, the share whose
individual has a photo:

- in each feature kind's vote shortlist (its best ``shortlist.votes`` photos with a vote, read from the pair
  table's ``<kind>.vote_rank`` and ``<kind>.log_votes`` columns);
- in each trained run's shortlist (its best ``shortlist.runs`` photos), and, from the run's own score files, among
  its best ``--depths`` photos: what a deeper shortlist of that run would bring at most;
- in the merged shortlist (the pair table: the most any check of these pairs could find);
- among the joint identification's five individuals (ids only, ``new_whale`` left out) and first.

The gap between the merged shortlist and the five is the check's (it had the pair and ranked it below five others);
what is missing from the merged shortlist no check can find. That gap is split by whether some feature kind verified
a photo of the query's individual (:func:`missed_evidence`), and a second table gives, for those queries, the median
of each kind's most inliers on a photo of their individual against those on the query's best-verified other
individual's photo: how strong the evidence was that the check ranked low. The last stdout line is
``{"benchmark": "joint_recall", "rows": {...}}``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.flukes.shared import read_solution  # noqa: E402
from whale import NEW_WHALE  # noqa: E402
from whale.identify.check import load_table  # noqa: E402
from whale.identify.sources import run_scores  # noqa: E402
from whale.inference.scorefile import load_score_file, score_path  # noqa: E402
from whale.ranking import per_id_scores  # noqa: E402

DEPTHS = (5, 10, 20, 50, 100, 200)


def same_whale(pairs: np.ndarray, gallery_ids, truth) -> np.ndarray:
    """``[m] bool``: whether the pair table's pair ``(query, gallery photo)`` of ``pairs`` ``[m, 2]`` is of the query's
    individual (``truth`` ``[n_q]``)."""
    return np.asarray(gallery_ids, str)[pairs[:, 1]] == np.asarray(truth, str)[pairs[:, 0]]


def shortlisted(pairs: np.ndarray, same: np.ndarray, n_queries: int) -> np.ndarray:
    """``[n_q] bool``: whether the pair table holds a photo of query ``q``'s individual (its merged shortlist);
    ``same``: :func:`same_whale` of ``pairs``."""
    out = np.zeros(n_queries, bool)
    out[pairs[same, 0]] = True
    return out


def source_recall(pairs: np.ndarray, rows: np.ndarray, columns: list[str], gallery_ids, truth, n_votes: int,
                  n_runs: int) -> dict[str, np.ndarray]:
    """Per source of the shortlist (each kind's votes, each run's scores) and for the merged shortlist
    (``"merged shortlist"``):
    ``[n_q] bool``, whether query ``q``'s individual (``truth`` ``[n_q]``) has a photo among that source's
    candidates in the pair table ``pairs`` ``[m, 2]`` / ``rows`` ``[m, f]`` (columns ``columns``)."""
    same = same_whale(pairs, gallery_ids, truth)
    col = {c: i for i, c in enumerate(columns)}

    def hit(mask: np.ndarray) -> np.ndarray:
        out = np.zeros(len(truth), bool)
        out[pairs[mask & same, 0]] = True
        return out

    # the columns hold log(1 + x): a rank below n is log1p(rank) < log1p(n); a vote is log1p(votes) > 0
    out = {}
    for kind in sorted({c.split(".")[0] for c in columns if c.endswith(".inliers")}):
        out[f"{kind} votes (best {n_votes})"] = hit((rows[:, col[f"{kind}.vote_rank"]] < np.log1p(n_votes) - 1e-6)
                                                    & (rows[:, col[f"{kind}.log_votes"]] > 0))
    for run in sorted({c.rsplit(".", 1)[0] for c in columns if c.endswith(".gap")}):
        out[f"{run} (best {n_runs})"] = hit((rows[:, col[f"{run}.rank"]] < np.log1p(n_runs) - 1e-6)
                                            & (rows[:, col[f"{run}.score"]] > 0))
    out["merged shortlist"] = hit(np.ones(len(pairs), bool))
    return out


def missed_evidence(pairs: np.ndarray, rows: np.ndarray, columns: list[str], gallery_ids, truth,
                    in_five: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
    """The queries whose individual was shortlisted but is not among the joint's five (``in_five`` ``[n_q] bool``),
    by the evidence the check had (a photo verified: some kind's ``inliers`` above 0 on it): ``({row: [n_q] bool},
    {kind: (median most inliers on a photo of their individual, median most inliers on another individual's
    photo)})``, the medians over those queries (NaN when none)."""
    same = same_whale(pairs, gallery_ids, truth)
    col = {c: i for i, c in enumerate(columns)}
    n = len(truth)
    missed = shortlisted(pairs, same, n) & ~np.asarray(in_five, bool)
    verified = np.zeros(n, bool)
    medians = {}
    for kind in sorted({c.split(".")[0] for c in columns if c.endswith(".inliers")}):
        inliers = rows[:, col[f"{kind}.inliers"]]
        best = np.zeros((2, n), np.float32)  # [own individual's, others'] most inliers per query
        np.maximum.at(best[0], pairs[same, 0], inliers[same])
        np.maximum.at(best[1], pairs[~same, 0], inliers[~same])
        verified |= best[0] > 0
        medians[kind] = tuple(float(np.median(b[missed])) if missed.any() else float("nan") for b in best)
    return ({"shortlisted, not among the five: a photo of it verified by some kind": missed & verified,
             "shortlisted, not among the five: none verified": missed & ~verified}, medians)


def depth_recall(scores: np.ndarray, gallery_ids, truth, depths=DEPTHS) -> dict[int, np.ndarray]:
    """``{d: [n_q] bool}``: whether query ``q``'s individual has a photo among the ``d`` highest of ``scores``
    ``[n_q, n_g]`` (ties by position)."""
    ids, truth = np.asarray(gallery_ids, str), np.asarray(truth, str)
    order = np.argsort(-np.asarray(scores, np.float32), axis=1, kind="stable")
    same = ids[order] == truth[:, None]
    first = np.where(same.any(axis=1), same.argmax(axis=1), len(ids))  # the best-ranked photo of the individual
    return {d: first < d for d in depths}


def top_ids_recall(scores: np.ndarray, gallery_ids, truth, k: int) -> np.ndarray:
    """``[n_q] bool``: query ``q``'s individual among the ``k`` best individuals by the per-id maximum."""
    names, per_id = per_id_scores(np.asarray(scores, np.float32), gallery_ids)
    top = np.argsort(-per_id, axis=1, kind="stable")[:, :k]
    return (names[top] == np.asarray(truth, str)[:, None]).any(axis=1)


def split_truth(run: Path, split: str, data: Path | None):
    """The joint run's ``split`` score file and its queries' true ids (``None`` for a test without a solution)."""
    sf = load_score_file(score_path(run, split), need_query_ids=split == "val")
    if split == "val":
        return sf, np.asarray(sf.query_ids, str)
    solution = None if data is None else data / "test_solution.csv"
    if solution is None or not solution.is_file():
        return sf, None
    truth = read_solution(solution)
    missing = [q for q in sf.query if str(q) not in truth]
    if missing:
        raise SystemExit(f"{solution}: {len(missing)} of {run}'s test queries have no answer (e.g. {missing[0]}): "
                         "not this run's split")
    return sf, np.array([truth[str(q)] for q in sf.query], str)


def recall(run: Path, data: Path | None = None, depths=DEPTHS) -> dict[str, dict[str, float]]:
    """``{split: {row: share of the known queries}}`` for the joint run ``run`` (module docstring); ``data``: the
    split's competition folder (its ``test_solution.csv``), default the run's own (``run.json``)."""
    meta = json.loads((run / "run.json").read_text())
    short = yaml.safe_load((run / "joint.yaml").read_text()).get("shortlist") or {}  # the run's settings, written out
    n_votes, n_runs = int(short.get("votes", 40)), int(short.get("runs", 20))
    data = Path(data) if data else Path(meta["data"])
    out = {}
    for split in ("val", "test"):
        sf, truth = split_truth(run, split, data)
        if truth is None or not (run / f"pairs_{split}.npz").is_file():
            continue
        known = truth != NEW_WHALE
        table = load_table(run / f"pairs_{split}.npz")
        rows = {k: v[known] for k, v in source_recall(table.pairs, table.rows, table.columns, sf.gallery_ids, truth,
                                                      n_votes, n_runs).items()}
        with_runs = meta.get("with_runs", [])
        readers = meta.get("test_runs", with_runs) if split == "test" else with_runs  # RUN:ALL: ALL's test scores
        for name, with_run in zip(meta.get("run_names", []), readers):
            scores = run_scores(Path(with_run), split, sf.query, sf.gallery, int(meta["fold"]))
            for d, hit in depth_recall(scores[known], sf.gallery_ids, truth[known], depths).items():
                rows[f"{name} (best {d}, its own scores)"] = hit
        rows["joint: among the five ids"] = top_ids_recall(sf.scores[known], sf.gallery_ids, truth[known], 5)
        in_five = np.zeros(len(truth), bool)
        in_five[known] = rows["joint: among the five ids"]
        missed, medians = missed_evidence(table.pairs, table.rows, table.columns, sf.gallery_ids, truth, in_five)
        rows.update({k: v[known] for k, v in missed.items()})
        rows["joint: first"] = top_ids_recall(sf.scores[known], sf.gallery_ids, truth[known], 1)
        out[split] = {k: float(v.mean()) for k, v in rows.items()}
        out[split]["inliers of the missed"] = medians
        out[split]["known queries"] = int(known.sum())
        out[split]["share of all queries known"] = float(known.mean())
    return out


def _cell(values: list[float], digits: int = 3) -> str:
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} +- {np.std(values):.{digits}f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="joint run folders with {S} for the split seed")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    p.add_argument("--data", default=None,
                   help="each seed's competition folder with {S} (its test_solution.csv; default the run's own --data)")
    p.add_argument("--depths", default=",".join(map(str, DEPTHS)),
                   help="the trained runs' shortlist depths to measure from their own scores (comma-separated)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    depths = tuple(int(d) for d in args.depths.split(","))
    per_seed = {}
    for s in seeds:
        run = Path(args.runs.replace("{S}", str(s)))
        if not (run / "pairs_val.npz").is_file():
            raise SystemExit(f"{run}: no pairs_val.npz: not a finished whale score --matcher joint run")
        data = Path(args.data.replace("{S}", str(s))) if args.data else None
        per_seed[s] = recall(run, data, depths)
    splits = [sp for sp in ("val", "test") if all(sp in r for r in per_seed.values())]
    names = [n for n in per_seed[seeds[0]]["val"]
             if n not in ("known queries", "share of all queries known", "inliers of the missed")]
    print("\n| known queries whose individual is ... | " + " | ".join(splits) + " |")
    print("| --- |" + " --- |" * len(splits))
    for name in names:
        print(f"| {name} | " + " | ".join(_cell([per_seed[s][sp][name] for s in seeds if name in per_seed[s][sp]])
                                         for sp in splits) + " |")
    kinds = list(per_seed[seeds[0]][splits[0]]["inliers of the missed"]) if splits else []
    print("\nThe shortlisted queries not among the five, median of each kind's most inliers on a photo of their "
          "individual / on another individual's photo:")
    print("| feature kind | " + " | ".join(splits) + " |")
    print("| --- |" + " --- |" * len(splits))
    for kind in kinds:
        print(f"| {kind} | " + " | ".join(" / ".join(_cell([per_seed[s][sp]["inliers of the missed"][kind][i]
                                                              for s in seeds], 1) for i in (0, 1))
                                         for sp in splits) + " |")
    for sp in splits:
        counts = [per_seed[s][sp]["known queries"] for s in seeds]
        print(f"{sp}: {counts} known queries ({_cell([per_seed[s][sp]['share of all queries known'] for s in seeds])}"
              " of all queries)")
    print(json.dumps({"benchmark": "joint_recall", "seeds": seeds, "rows": {str(s): r for s, r in per_seed.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
