"""The keypoint matcher as the gallery grows to the whole 2019 competition's size: time, peak memory, MAP@5. Not a test.

    python benchmarks/flukes/humpback_growth.py --out runs/growth [--seed 0] [--renditions 1,2,4]
    python benchmarks/flukes/humpback_growth.py --out runs/growth8 --renditions 4 --memory-limit-gb 8  # fits in 8 GB?
    python benchmarks/flukes/humpback_growth.py --out runs/growth --report     # the table of what was measured
    python benchmarks/flukes/humpback_growth.py --out runs/growth_recipe --recipe recipes/flukes.yaml --memory-limit-gb 8

The shared flukes hold 7,980 photos; the competition held 33,321 (25,361 training, 7,960 test). The gallery is
grown with flipped copies as distractor individuals, as the 2019 winners grew their training set (a mirrored
fluke is another whale): split ``--seed``'s folder (:func:`benchmarks.flukes.shared.build_split`) with each of
its 7,980 photos, training and test, added to ``train`` in ``R - 1`` more renditions (``R`` in ``--renditions``):
mirrored, upside down, turned half round (:data:`RENDITIONS`). Upright SIFT descriptors (the shipped
``features.upright``) differ in each rendition, so each is another individual to the matcher: a photo's
renditions are labelled ``<id>~mirror`` and so on (the renditions of one whale's photos one distractor individual
with as many photos; those of a ``new_whale`` photo ``new_whale``). The test queries stay the real ones, and each
one's own mirror is in the gallery: the hardest distractor a query can meet. ``R`` = 1, 2, 4 give 7,980, 15,960
and 31,920 photos.

Each size runs the user's commands from cold (an empty feature store of its own, unless ``--cache``):
``whale score --matcher keypoints --fold 0`` then ``whale ensemble --tune``. Reported per size: photos, seconds of
each step (``run.json``), the peak memory of the score command and its extraction workers sampled every 0.5 s
(all resident pages, and those that are no file's: the memory-mapped descriptors' pages count in the first only,
the kernel drops and rereads them under pressure; ``run.json``'s ``peak_mb`` has the scoring process's high-water
mark after each step), MAP@5 of the real queries (all; known whales ids only; one-photo whales; the last two
again with the gallery's renditions of the test photos themselves left out), the ``new_whale`` share at rank 1
beside the true one, and the machine reference (100 photos' shipped RootSIFT keypoints in one process, whatever
the config) measured in the same run.
With ``--recipe``, each size runs that whole recipe instead (``whale recipe``: both matchers, the network, the
joint identification, the submissions; the memory cgroup around all of it), reported per size: each step's seconds
and peak memory (``recipe-times.json``), the whole recipe's, and each ``whale ensemble`` step's submission: MAP@5
over all queries and the known whales' ids only, ranked by the test scores it was made from.
A size whose ``result.json`` exists is not measured again: a killed run goes on with the next size (a killed
recipe, from its first unfinished step).
The last stdout line is ``{"benchmark": "humpback_growth", ...}``.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()

import pandas as pd  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from benchmarks.flukes import shared  # noqa: E402
from whale import NEW_WHALE  # noqa: E402

RENDITIONS = (("mirror", 1), ("upside_down", 0), ("turned", -1))
"""Each added rendition's name and its ``cv2.flip`` code (1: left-right, 0: top-bottom, -1: both)."""


def grow(split: Path, out: Path, renditions: int, log=print) -> Path:
    """``out``: the competition folder ``split`` with each of its photos (train and test) in ``renditions - 1``
    more renditions added to ``train`` as distractor individuals (module docstring). ``train.csv`` is written
    last: a folder holding it is complete and is reused."""
    import cv2

    if not 1 <= renditions <= len(RENDITIONS) + 1:
        raise ValueError(f"renditions: expected 1..{len(RENDITIONS) + 1}, received {renditions}")
    if (out / "train.csv").is_file():
        return out
    for sub in ("train", "test"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for name in ("sample_submission.csv", "test_solution.csv"):
        shutil.copy(split / name, out / name)
    train = pd.read_csv(split / "train.csv")
    solution = pd.read_csv(split / "test_solution.csv")
    for sub, names in (("train", train["Image"]), ("test", solution["Image"])):
        for name in names:
            target = out / sub / name
            if not target.exists():
                os.link(split / sub / name, target)
    rows = [train]
    sources = [("train", n, i) for n, i in zip(train["Image"], train["Id"])] + \
              [("test", n, i) for n, i in zip(solution["Image"], solution["Id"])]
    for kind, code in RENDITIONS[:renditions - 1]:
        log(f"  {kind}: {len(sources)} photos")
        added = []
        for sub, name, individual in sources:
            new = f"{kind}_{Path(name).stem}.jpg"
            if not (out / "train" / new).exists():
                image = cv2.imread(str(split / sub / name), cv2.IMREAD_UNCHANGED)
                cv2.imwrite(str(out / "train" / new), cv2.flip(image, code), [cv2.IMWRITE_JPEG_QUALITY, 95])
            added.append((new, NEW_WHALE if individual == NEW_WHALE else f"{individual}~{kind}"))
        rows.append(pd.DataFrame(added, columns=["Image", "Id"]))
    pd.concat(rows).to_csv(out / "train.csv.tmp", index=False)
    os.replace(out / "train.csv.tmp", out / "train.csv")
    return out


def size_folder(args, split: Path, renditions: int, log=print):
    """``(its result measured before or None, the size's folder, the grown competition folder, its train.csv, the
    feature store)`` of one size (a size whose ``result.json`` exists is not measured again)."""
    work = Path(args.out) / f"x{renditions}"
    done = work / "result.json"
    if done.is_file():
        log(f"x{renditions}: measured before ({done})")
        return json.loads(done.read_text()), work, None, None, None
    work.mkdir(parents=True, exist_ok=True)
    comp = grow(split, work / "data", renditions, log)
    store = Path(args.cache) if args.cache else work / "store"
    return None, work, comp, pd.read_csv(comp / "train.csv"), store


def measure(args, split: Path, truth: dict, renditions: int, log=print) -> dict:
    """One size: the grown folder scored from cold, ensembled and evaluated (module docstring)."""
    from whale.inference.scorefile import load_score_file

    before, work, comp, train, store = size_folder(args, split, renditions, log)
    if before is not None:
        return before
    kp = work / "keypoints"
    cmd = [sys.executable, "-m", "whale", "score", "--matcher", "keypoints", "--data", str(comp), "--out", str(kp),
           "--fold", "0", "--config", args.keypoint_config, "--cache", str(store), "--quiet"]
    seconds, peak, group_peak = run_within_limit(args, cmd, work / "score.log", log)
    te, _ = shared.ensemble_and_check([kp], work / "keypoints.csv", comp, work, log=log)
    record = json.loads((kp / "run.json").read_text())
    test_scores = load_score_file(kp / "test.npz")
    row = shared.method_row(f"x{renditions}", work / "keypoints.csv", test_scores, truth,
                            {"score": seconds, "ensemble": te, **record["seconds"]})
    row.update(renditions=renditions, photos=len(train) + len(truth), train_photos=len(train),
               individuals=int(train.loc[train["Id"] != NEW_WHALE, "Id"].nunique()), peak_tree_mb=peak["resident"],
               peak_anonymous_mb=peak["anonymous"], memory_limit_gb=args.memory_limit_gb, cgroup_peak_mb=group_peak,
               peak_mb=record.get("peak_mb", {}), reference_s=args.reference)
    row.update(without_own_renditions(test_scores, truth))
    (work / "result.json").write_text(json.dumps(row, indent=2))
    return row


def run_within_limit(args, cmd: list[str], log_path: Path, log=print) -> tuple[float, dict, float | None]:
    """Run ``python -m whale ...`` ``cmd`` measured (inside ``--memory-limit-gb``'s cgroup when given): its seconds,
    the peak memory of it and its workers (:func:`benchmarks.common.run_measured`) and the cgroup's peak (MB).

    Raises:
        RuntimeError: it failed (its exit status, the memory the cgroup saw and the log named).
    """
    log(f"$ whale {' '.join(cmd[3:])}" + (f"   (inside a {args.memory_limit_gb:g} GB memory cgroup)"
                                          if args.memory_limit_gb else ""))
    limit = common.MemoryLimit(args.memory_limit_gb) if args.memory_limit_gb else None
    try:
        rc, seconds, peak = common.run_measured(cmd, log_path, cwd=common.repo_root(),
                                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                                preexec_fn=limit.preexec if limit else None)
        group_peak = limit.peak_mb() if limit else None
    finally:
        if limit:
            limit.close()
    if rc:
        raise RuntimeError(f"whale {cmd[3]} failed (exit {rc}" + (f", {group_peak:,.0f} MB used of the "
                           f"{args.memory_limit_gb:g} GB limit" if limit else "") + f"); see {log_path}")
    log(f"  {seconds:.0f} s, peak {peak['resident']:,.0f} MB resident, {peak['anonymous']:,.0f} MB not mapped files' "
        "(with its workers)")
    return seconds, peak, group_peak


def measure_recipe(args, split: Path, truth: dict, renditions: int, log=print) -> dict:
    """One size by ``--recipe``: the grown folder through ``whale recipe`` from cold (a killed run goes on from its
    first unfinished step with the same command), each step's seconds and peak memory (``recipe-times.json``) and
    each submission of the recipe's ``ensemble`` steps evaluated (:func:`recipe_submissions`)."""
    from whale.recipe.cook import TIMES_FILE
    from whale.recipe.steps import placeholder_values

    before, work, comp, train, store = size_folder(args, split, renditions, log)
    if before is not None:
        return before
    out = work / "recipe"
    cmd = [sys.executable, "-m", "whale", "recipe", "--recipe", args.recipe, "--data", str(comp), "--out", str(out),
           "--store", str(store), "--quiet"]
    seconds, peak, group_peak = run_within_limit(args, cmd, work / "recipe.log", log)
    steps = json.loads((out / TIMES_FILE).read_text())["steps"]
    values = placeholder_values(comp, out, 0, store)
    submissions = {name: submission_row(name, csv, runs, truth, {})
                   for name, csv, runs in recipe_submissions(args.recipe, values)}
    row = {"recipe": str(args.recipe), "renditions": renditions, "photos": len(train) + len(truth),
           "train_photos": len(train), "individuals": int(train.loc[train["Id"] != NEW_WHALE, "Id"].nunique()),
           "seconds": seconds, "peak_tree_mb": peak["resident"], "peak_anonymous_mb": peak["anonymous"],
           "memory_limit_gb": args.memory_limit_gb, "cgroup_peak_mb": group_peak, "reference_s": args.reference,
           "steps": [{k: s.get(k) for k in ("name", "status", "seconds", "peak_mb")} for s in steps],
           "submissions": submissions}
    (work / "result.json").write_text(json.dumps(row, indent=2))
    return row


def recipe_submissions(recipe, values: dict[str, str]) -> list[tuple[str, Path, list[Path]]]:
    """Each ``whale ensemble`` step of the recipe file ``recipe`` with its placeholders' ``values``: ``(step name,
    the CSV it writes, the runs it reads)``, read with ``whale``'s own parser."""
    from whale import cli
    from whale.recipe.steps import load_recipe

    found = []
    for step in load_recipe(recipe).steps:
        if step.subcommand == "ensemble":
            a = cli.build_parser(only=["ensemble"]).parse_args(step.command(values))
            found.append((step.name, Path(a.out), [Path(r) for r in a.runs]))
    return found


def submission_row(name: str, csv: Path, runs: list[Path], truth: dict, seconds: dict) -> dict:
    """:func:`benchmarks.flukes.shared.method_row` of a recipe's submission ``csv``, the known whales ranked by the
    test scores it was made from: its runs fused as its ensemble fused them (the ``.calibration.json`` beside it), or
    its one run's; several runs without a kept fusion give the submission's figures alone."""
    from whale.ensemble.combine import average_score_files
    from whale.ensemble.fusion import read_fusion
    from whale.inference.scorefile import load_score_file, score_path

    tests = [score_path(r, "test") for r in runs]
    calibration = csv.with_suffix(".calibration.json")
    if calibration.is_file():
        scores = average_score_files(tests, **read_fusion(calibration).maps())
    else:
        scores = load_score_file(tests[0]) if len(tests) == 1 else None
    return shared.method_row(name, csv, scores, truth, seconds)


def without_own_renditions(scores, truth: dict[str, str]) -> dict[str, float]:
    """The known queries' ranking (ids only, :func:`benchmarks.flukes.shared.ranking_metrics`) in a size's test
    ``scores`` (its loaded score file) with the gallery's renditions of the test photos themselves left out: what
    the other distractors cost, apart from each query meeting its own mirror (a fluke is nearly symmetric)."""
    import numpy as np
    stems = {Path(n).stem for n in truth}
    gallery = [str(g) for g in scores.gallery]
    own = np.array([not g.startswith("tr") and Path(g).stem.split("_")[-1] in stems for g in gallery])
    ids = np.asarray(scores.gallery_ids, dtype=str)[~own]
    got = shared.ranking_metrics(scores.scores[:, ~own], np.asarray(scores.query), ids, truth)
    return {"own_left_out_known_no_new": got["map5_known_no_new"], "own_left_out_one_photo": got["map5_one_photo"]}


def step_seconds(row: dict) -> dict[str, float]:
    """The score command's steps as the table groups them, from ``run.json``'s seconds."""
    s = row["seconds"]

    def total(*keys):
        return sum(s.get(k, 0.0) for k in keys)

    return {"features": total("features"), "selection": total("val_select", "test_select"),
            "validation": total("val_index", "val_search", "val_verify"),
            "test": total("test_index", "test_search", "test_verify"), "whole": s["score"]}


def table(rows: list[dict]) -> str:
    """Markdown: one line per size."""
    head = ["renditions", "photos", "train ids", "extraction s", "selection s", "validation s", "test s",
            "whole `whale score` s", "peak MB resident", "of it not files'", "memory cgroup", "MAP@5 all",
            "known, ids only",
            "one-photo", "the same two, the queries' own renditions left out", "`new_whale` first (true)",
            "reference s"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for r in sorted(rows, key=lambda r: r["renditions"]):
        t = step_seconds(r)
        group = f"{r['memory_limit_gb']:g} GB (its peak {r['cgroup_peak_mb']:,.0f} MB)" if r.get("memory_limit_gb") else "none"
        lines.append(f"| {r['renditions']} | {r['photos']:,} | {r['individuals']:,} | {t['features']:.0f} | "
                     f"{t['selection']:.0f} | {t['validation']:.0f} | {t['test']:.0f} | {t['whole']:.0f} | "
                     f"{r['peak_tree_mb']:,.0f} | {r['peak_anonymous_mb']:,.0f} | {group} | {r['map5']:.3f} | {r['map5_known_no_new']:.3f} | "
                     f"{r['map5_one_photo']:.3f} | {r['own_left_out_known_no_new']:.3f}, "
                     f"{r['own_left_out_one_photo']:.3f} | {r['new_whale_first']:.3f} ({r['new_whale_true']:.3f}) | "
                     f"{r['reference_s']:.1f} |")
    return "\n".join(lines)


def recipe_table(rows: list[dict]) -> str:
    """Markdown: one line per size measured by ``--recipe``: each step's seconds and peak MB, the whole recipe's, and
    each submission's MAP@5 (all; known whales ids only)."""
    steps = list(dict.fromkeys(s["name"] for r in rows for s in r["steps"]))
    subs = list(dict.fromkeys(n for r in rows for n in r["submissions"]))
    head = ["photos", *(f"`{n}` s (peak MB)" for n in steps), "whole s", "peak MB resident", "memory cgroup",
            *(f"`{n}` MAP@5 all; known, ids only" for n in subs), "reference s"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for r in sorted(rows, key=lambda r: r["renditions"]):
        by_step = {s["name"]: s for s in r["steps"]}
        cells = [f"{r['photos']:,}"]
        for n in steps:
            s = by_step.get(n)
            cells.append(f"{s['seconds']:.0f} ({s['peak_mb'] or 0:,.0f})" if s and s.get("seconds") is not None
                         else "")
        group = f"{r['memory_limit_gb']:g} GB (its peak {r['cgroup_peak_mb']:,.0f} MB)" if r.get("memory_limit_gb") else "none"
        cells += [f"{r['seconds']:.0f}", f"{r['peak_tree_mb']:,.0f}", group]
        for n in subs:
            m = r["submissions"].get(n)
            cells.append("" if m is None else f"{m['map5']:.3f}; " + (f"{m['map5_known_no_new']:.3f}"
                                                                       if "map5_known_no_new" in m else "-"))
        cells.append(f"{r['reference_s']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = harness.parser(__doc__, "working folder (the split, each size's folder, run and results)")
    p.add_argument("--seed", type=int, default=0, help="the split seed (benchmarks/flukes/humpback.py's)")
    p.add_argument("--renditions", default="1,2,4", help="comma-separated sizes: renditions of each photo (1..4)")
    p.add_argument("--keypoint-config", default="configs/keypoints.yaml")
    p.add_argument("--cache", default=None, help="one feature store for every size (default: each size's own, "
                                                 "empty at first: from cold)")
    p.add_argument("--memory-limit-gb", type=float, default=None,
                   help="run each whale score inside a memory cgroup of this many GB (Linux, root): the proof that "
                        "it fits, page cache included, which the kernel reclaims before it kills")
    p.add_argument("--recipe", default=None, metavar="YAML",
                   help="each size through this whole recipe (`whale recipe`, e.g. recipes/flukes.yaml) from cold "
                        "instead of the one matcher: each step's seconds and peak memory, each submission's MAP@5")
    p.add_argument("--report", action="store_true", help="print the table of every size measured in OUT")
    args = p.parse_args(argv)
    if args.report:
        rows = [json.loads(f.read_text()) for f in sorted(Path(args.out).glob("x*/result.json"))]
        if any("steps" in r for r in rows):
            print(recipe_table([r for r in rows if "steps" in r]))
            rows = [r for r in rows if "steps" not in r]
            if not rows:
                return 0
        for r, f in zip(rows, sorted(Path(args.out).glob("x*/result.json"))):
            if "own_left_out_known_no_new" not in r:  # measured before the column existed: from its score file
                from whale.inference.scorefile import load_score_file

                truth = dict(pd.read_csv(f.parent / "data" / "test_solution.csv")[["Image", "Id"]].to_numpy())
                r.update(without_own_renditions(load_score_file(f.parent / "keypoints" / "test.npz"), truth))
        print(table(rows))
        return 0
    source = harness.shared_source("humpback")
    if source is None:
        return 0
    t0 = time.perf_counter()
    args.reference = shared.machine_reference(source, lambda m: print(m, flush=True))
    split, truth, _ = shared.build_split(source, Path(args.out) / "split", args.seed)
    shared.assert_disjoint(split, truth)
    if args.recipe:
        rows = [measure_recipe(args, split, truth, int(r)) for r in args.renditions.split(",")]
        print(recipe_table(rows))
        metrics = {f"x{r['renditions']}_{k}": r[k] for r in rows for k in ("photos", "seconds", "peak_tree_mb")}
        metrics.update({f"x{r['renditions']}_{n}_map5": m["map5"] for r in rows for n, m in r["submissions"].items()})
        print(common.final_json("humpback_growth", metrics, time.perf_counter() - t0))
        return 0
    rows = [measure(args, split, truth, int(r)) for r in args.renditions.split(",")]
    print(table(rows))
    metrics = {f"x{r['renditions']}_{k}": r[k] for r in rows
               for k in ("photos", "map5", "map5_known_no_new", "peak_tree_mb", "peak_anonymous_mb")}
    print(common.final_json("humpback_growth", metrics, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
