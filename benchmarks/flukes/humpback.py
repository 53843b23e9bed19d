"""Real humpback flukes: every method through the user's own commands, on Kaggle-like splits. Not a test.

    python benchmarks/flukes/humpback.py --out runs/humpback [--seeds 0,1,2] [--methods keypoints,learned,fusion]
    python benchmarks/flukes/humpback.py --out runs/humpback --screen '' 'features.upright=true'   # settings, on validation

Data: ``../shared/data/humpback/{train.csv,train/}`` beside the checkout (real 2019 competition photos,
half of its identified individuals; read in place, copied under ``--out``; the benchmark prints a
message and exits 0 when absent). Nothing of it is committed.

The split (:func:`benchmarks.flukes.shared.split_flukes`, one per ``--seeds`` value), as Kaggle's 2019 test set
was made (the split, its checks, the metrics and the commands below live in :mod:`benchmarks.flukes.shared`):

* known queries: one photo drawn per individual with two or more photos (the rest stay in ``train``);
* ``new_whale`` queries: half of the one-photo individuals (their id appears nowhere in ``train``);
* the other one-photo individuals stay in ``train`` labelled ``new_whale`` (as Kaggle's unidentified
  photos): the fold rules turn them into the open-set part of validation, so ``new_whale``'s threshold
  is tuned on validation queries whose individuals the gallery lacks, never on the test queries (about
  10% of fold 0's validation queries: the data has no more one-photo individuals to give; the test
  set's share is about 26%, Kaggle's 27.6%). The gallery's one-photo individuals are those with two
  photos, one of which became a query.

:func:`~benchmarks.flukes.shared.check_disjoint` refuses a split whose ``new_whale`` queries share an id with
``train`` or whose query photos share their bytes with a ``train`` photo (the data holds a few byte-identical
photos: such a query is moved to ``train``).

Methods, each a user's command line (printed with its wall time), scored from its submission:

* ``keypoints``: ``whale score --matcher keypoints --data D --out K --fold 0`` then
  ``whale ensemble K --tune --out S.csv`` and ``whale submission check S.csv``; again with
  ``--tune-new-share 0.276`` (validation's few open-set queries weighted to the competition's share);
* ``learned``: ``whale train --config C --fold 0 --data D --out L`` for each ``--learned-config`` C (default
  ``configs/flukes_cpu.yaml``; it scores its fold and the test set when done), then the same ensemble and check;
  ``--gpu-runs DIR``: a GPU session's runs scored here (:mod:`benchmarks.flukes.humpback_runs`);
* ``fusion``: ``whale ensemble K L --tune [--tune-weights --weight-grid log] --out S.csv`` for each learned run
  and each rule of ``--fusion`` (``--keypoint-runs DIR``: ``K`` is ``DIR/seedN/keypoints`` of an earlier
  ``--methods keypoints`` run, ``--learned-runs DIR``: ``L`` is ``DIR/seedN/learned-<config>`` of an earlier
  ``--methods learned`` run, each checked to be of the same split);
* references measured in the same run: raw pixels (32 px gray cosine nearest neighbour, the threshold
  tuned on the same validation fold, :func:`benchmarks.common.evaluate_competition`), ``imagenet`` (the same with
  the ImageNet features of ``configs/flukes_lite0_cpu.yaml``'s branch, nothing trained:
  :class:`benchmarks.common.FrozenBranchMethod`) and the submission of ``new_whale`` alone for every photo.

Reported per method: MAP@5 of the submission over all queries and split into known / ``new_whale``
queries; for the known queries also the ranking of ids alone (the per-id maximum of the test scores,
``new_whale`` never predicted: MAP@5 "known, ids only", top-1, top-5); the ``new_whale`` share at rank 1;
the wall time of each command. With several seeds: mean +- sd.
The last stdout line is ``{"benchmark": "humpback", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from benchmarks.flukes.humpback_runs import fusion_rows, learned_runs, learned_variant  # noqa: E402
from benchmarks.flukes.shared import (KAGGLE_NEW_SHARE, assert_disjoint, build_split, earlier_run_of,  # noqa: E402
                                      ensemble_and_check, evaluate_setting, machine_reference, method_row,
                                      mirror_split, ranking_metrics, screen_table, single_photo_queries, slug,
                                      submission_metrics, validation_metrics, whale_command)
from whale import NEW_WHALE  # noqa: E402

METHODS = ("keypoints", "learned", "fusion", "pixels", "imagenet", "all_new_whale")
LEARNED_CONFIG = "configs/flukes_cpu.yaml"
IMAGENET_CONFIG = "configs/flukes_lite0_cpu.yaml"
"""The ``imagenet`` row's branch and input: this config's, its trunk's maps and the rest of its backbone as they come."""


# ------------------------------------------------------------------------------ measuring


def run_seed(args, seed: int, log=print) -> list[dict]:
    """Every method of ``args.methods`` on split ``seed``; one result row per method."""
    from whale.inference.scorefile import load_score_file

    work = Path(args.out) / f"seed{seed}"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    comp, truth, _ = build_split(args.source, work / "data", seed, log)
    counts = assert_disjoint(comp, truth)
    log(f"seed {seed}: split in {time.perf_counter() - t0:.0f} s: {counts}")
    rows, runs = [], {}
    reuse_keypoints = bool(args.keypoint_runs) and "keypoints" not in args.methods  # fusion with an earlier run's matcher
    if "keypoints" in args.methods or ("fusion" in args.methods and not reuse_keypoints):
        kp = work / "keypoints"
        t = whale_command(["score", "--matcher", "keypoints", "--data", str(comp), "--out", str(kp), "--fold", "0",
                           "--config", args.keypoint_config, "--cache", str(args.cache), "--quiet"],
                          work / "keypoints.score.log", log)
        runs["keypoints"] = kp
        if "keypoints" in args.methods:
            te, _ = ensemble_and_check([kp], work / "keypoints.csv", comp, work, log=log)
            test_kp = load_score_file(kp / "test.npz")
            rows.append(method_row("keypoints", work / "keypoints.csv", test_kp, truth,
                                   {"score": t, "ensemble": te,
                                    **json.loads((kp / "run.json").read_text())["seconds"]}))
            te, _ = ensemble_and_check([kp], work / "keypoints_share.csv", comp, work,
                                       ["--tune-new-share", str(KAGGLE_NEW_SHARE)], log=log)
            rows.append(method_row(f"keypoints, --tune-new-share {KAGGLE_NEW_SHARE}", work / "keypoints_share.csv",
                                   test_kp, truth, {"ensemble": te}))
    learned = learned_runs(args, seed, comp, work, log)  # name -> run folder: each learned config, each GPU run
    for name, (run, seconds) in learned.items():
        if "learned" in args.methods or (seconds is not None and name.startswith("gpu ")):
            te, _ = ensemble_and_check([run], work / f"{slug(name)}.csv", comp, work, log=log)
            rows.append(method_row(name, work / f"{slug(name)}.csv", load_score_file(score_path_of(run)), truth,
                                   {**(seconds or {}), "ensemble": te}))
    if "fusion" in args.methods:
        if reuse_keypoints:  # looked up once the learned runs are done: the earlier run may still be writing it
            runs["keypoints"] = earlier_run_of(args.keypoint_runs, seed, comp)
            log(f"  keypoints: the score files of {runs['keypoints']} (the same split, checked)")
        for name, (run, _) in learned.items():
            rows += fusion_rows(args, name, [runs["keypoints"], run], comp, truth, work, log)
    if "pixels" in args.methods:
        rows.append(reference_row("pixels", common.PixelMethod(32, 1), comp, truth, log))
    if "imagenet" in args.methods:
        method = common.FrozenBranchMethod(IMAGENET_CONFIG, Path(args.out) / "trunk-cache")
        rows.append(reference_row("imagenet", method, comp, truth, log))
    if "all_new_whale" in args.methods:
        pred = {n: [NEW_WHALE] for n in truth}
        rows.append({"method": "all_new_whale", **submission_metrics(pred, truth), "seconds": {}})
    for r in rows:
        r["seed"] = seed
    (work / "results.json").write_text(json.dumps(kept_rows(work / "results.json", rows), indent=2))
    return rows


def kept_rows(path: Path, rows: list[dict]) -> list[dict]:
    """``rows`` after the rows of ``path`` (an earlier run's ``results.json`` of this seed, if any) whose method
    none of ``rows`` measured again: a run of other methods or variants into the same ``--out`` adds its rows to
    what ``--report`` reads, and one of the same method replaces that method's row."""
    if not path.is_file():
        return rows
    try:
        earlier = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not a results file of this benchmark ({e}); move it away to start it anew")
    again = {r["method"] for r in rows}
    return [r for r in earlier if r.get("method") not in again] + rows


def score_path_of(run: Path) -> Path:
    from whale.inference.scorefile import score_path

    return score_path(run, "test")


def reference_row(name: str, method, comp: Path, truth: dict[str, str], log=print) -> dict:
    """A reference method without training (``features``/``scores``: raw pixels, ImageNet features), the threshold
    tuned on validation fold 0, the same metrics."""
    from whale.data import ImageSet, fold_data, load_competition
    from whale.ranking import predict_top5, tune_threshold

    t0 = time.perf_counter()
    c = load_competition(comp)
    data = fold_data(c, 0, 0)
    known = ImageSet.known(c)
    f_all = method.features(known.paths)
    f_gal = f_all[known.positions(data.gallery.names)]
    t, _, _ = tune_threshold(method.scores(method.features(data.val.paths), f_gal), data.gallery.ids, data.val.ids)
    test_names = np.array(c.test_images)
    scores = method.scores(method.features([c.test_path(n) for n in test_names]), f_all)
    preds = dict(zip(test_names, predict_top5(scores, known.ids, t)))
    row = {"method": name, **submission_metrics(preds, truth),
           **ranking_metrics(scores, test_names, known.ids, truth), "seconds": {"all": time.perf_counter() - t0}}
    log(f"  {name}: {row['seconds']['all']:.0f} s")
    return row


COLUMNS = (("map5", "MAP@5 all"), ("map5_known", "known"), ("map5_new", "new_whale"),
           ("map5_known_no_new", "known, ids only"), ("map5_one_photo", "one-photo whales, ids only"),
           ("top1", "top-1"), ("top5", "top-5"), ("new_whale_first", "new_whale first"),
           ("new_whale_true", "new_whale true share"))


def table(rows: list[dict]) -> str:
    """Markdown: one line per method, mean +- sd over the seeds of each column."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = ["| method | " + " | ".join(h for _, h in COLUMNS) + " | seeds |", "| --- " * (len(COLUMNS) + 2) + "|"]
    for m in methods:
        rs = [r for r in rows if r["method"] == m]
        cells = []
        for k, _ in COLUMNS:
            v = [r[k] for r in rs if k in r and np.isfinite(r[k])]
            cells.append("" if not v else (f"{np.mean(v):.3f}" if len(v) == 1 else
                                           f"{np.mean(v):.3f} +- {np.std(v, ddof=1):.3f}"))
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {len(rs)} |")
    return "\n".join(lines)


def gains_table(rows: list[dict], base: str = "keypoints", others: list[str] | None = None) -> str:
    """Markdown: each row of ``others`` (default: the fusion rows) minus ``base`` on the same split seed, mean +- sd
    over the seeds both have."""
    by_seed = {r["seed"]: r for r in rows if r["method"] == base}
    keys = (("map5", "MAP@5 all"), ("map5_known_no_new", "known, ids only"), ("top5", "top-5"))
    lines = ["| gain over " + base + " | " + " | ".join(h for _, h in keys) + " | seeds |", "| --- " * (len(keys) + 2) + "|"]
    if others is None:
        others = [m for m in dict.fromkeys(r["method"] for r in rows) if m.startswith("fusion")]
    for m in others:
        pairs = [(r, by_seed[r["seed"]]) for r in rows if r["method"] == m and r["seed"] in by_seed]
        cells = []
        for k, _ in keys:
            d = [a[k] - b[k] for a, b in pairs if k in a and k in b]
            cells.append("" if not d else f"{np.mean(d):+.4f}" + (f" +- {np.std(d, ddof=1):.4f}" if len(d) > 1 else ""))
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {len(pairs)} |")
    return "\n".join(lines)


def learning_curves(out: Path) -> Path | None:
    """``out/learning_curves.png``: each learned run's validation MAP@5 by epoch (its ``log.csv``), a colour per
    row and a line style per split seed; None when no run has a log yet."""
    import csv

    logs = sorted(out.glob("seed*/learned-*/log.csv"))
    if not logs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from whale.core.files import atomic_write
    from whale.training.plots import _column as column  # a log.csv column's (epochs, values), blanks skipped

    names = sorted({f.parent.name.removeprefix("learned-") for f in logs})
    styles = ("-", "--", ":", "-.")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for f in logs:
        with open(f, newline="", encoding="utf-8-sig") as fh:
            epochs, maps = column(list(csv.DictReader(fh)), "val_map5")
        if epochs:
            seed = int(f.parent.parent.name.removeprefix("seed"))
            name = f.parent.name.removeprefix("learned-")
            ax.plot(epochs, maps, styles[seed % len(styles)], marker="o", markersize=3,
                    color=f"C{names.index(name) % 10}", label=f"{name}, split {seed}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation MAP@5 (fold 0)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "learning_curves.png"
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=90))
    finally:
        plt.close(fig)
    return path


def screen(args, settings: list[str], log=print) -> list[dict]:
    """Keypoint settings compared on validation only, never on the test set: split ``args.seeds``' first seed,
    either fold 0's validation queries against the fold's training images (``args.screen_on == "fold0"``: the
    queries ``whale ensemble --tune`` sees; every known one has two or more gallery photos) or
    :func:`mirror_split` (``"mirror"``: drawn from ``train`` as the test was, 1-photo galleries included).
    ``settings``: one string of space-separated ``KEY=VALUE`` overrides of ``--keypoint-config`` each."""
    from whale.data import fold_data, load_competition
    from whale.keypoints import load_keypoint_config
    from whale.config.overrides import overrides

    seed = int(args.seeds.split(",")[0])
    comp_dir = Path(args.out) / f"seed{seed}" / "data"
    if not (comp_dir / "test_solution.csv").is_file():
        build_split(args.source, comp_dir, seed, log)
    if args.screen_on == "mirror":
        g_paths, g_ids, q_paths, q_ids = mirror_split(comp_dir, seed)
    else:
        data = fold_data(load_competition(comp_dir), 0, 0)
        g_paths, g_ids, q_paths, q_ids = data.gallery.paths, data.gallery.ids, data.val.paths, data.val.ids
    known = q_ids != NEW_WHALE
    single = single_photo_queries(g_ids, q_ids)
    log(f"screen on split {seed}, {args.screen_on}: {len(q_ids)} validation queries ({(~known).sum()} new, "
        f"{single.sum()} known with one gallery photo), {len(g_ids)} gallery photos")
    fuse = getattr(args, "screen_fuse", False) and len(settings) > 1  # the settings' matchers side by side, one score
    rows, scores = [], []
    for setting in settings:
        cfg = load_keypoint_config(args.keypoint_config, overrides(setting.split()))
        found = {} if fuse else None  # score matrices kept only to be fused
        row = {"setting": setting or "(the config as it is)", "screen_on": args.screen_on,
               **evaluate_setting(cfg, args.cache, g_paths, g_ids, q_paths, q_ids, keep=found)}
        log(json.dumps(row))
        rows.append(row)
        if fuse:
            scores.append(found["scores"])
    if fuse:
        for how, fuse in (("mean", np.mean), ("max", np.max)):
            row = {"setting": f"{how} of the {len(scores)} settings' scores", "screen_on": args.screen_on,
                   **validation_metrics(fuse(np.stack(scores), axis=0), g_ids, q_ids)}
            log(json.dumps(row))
            rows.append(row)
    log(screen_table(rows))
    return rows


def times_table(rows: list[dict], reference: float) -> str:
    """Each method's steps in seconds (mean over seeds) and as multiples of the machine reference."""
    lines = ["| method | step | seconds | x reference |", "| --- | --- | --- | --- |"]
    for m in dict.fromkeys(r["method"] for r in rows):
        steps = {}
        for r in rows:
            if r["method"] == m:
                for k, v in r.get("seconds", {}).items():
                    steps.setdefault(k, []).append(v)
        for k, v in steps.items():
            lines.append(f"| {m} | {k} | {np.mean(v):.0f} | {np.mean(v) / reference:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = harness.parser(__doc__, "working folder (splits, runs, submissions, results)")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    p.add_argument("--methods", default="keypoints,pixels,all_new_whale",
                   help=f"comma-separated, of {', '.join(METHODS)} (fusion runs keypoints and learned)")
    p.add_argument("--keypoint-config", default="configs/keypoints.yaml")
    p.add_argument("--learned-config", default=LEARNED_CONFIG,
                   help="comma-separated configs of the learned rows (one whale train each, row 'learned <name>')")
    p.add_argument("--learned-variant", action="append", default=[], metavar="NAME='KEY=VALUE ...'",
                   help="each learned config also trained with these --set overrides (an ablation), row 'learned "
                        "<config> NAME'; repeatable")
    p.add_argument("--variants-only", action="store_true",
                   help="train only the --learned-variant rows, not each config as written (its runs measured "
                        "before: compare them with --report over the same OUT or the documented figures)")
    p.add_argument("--gpu-runs", default=None, metavar="DIR",
                   help="the flukes_<job>.tgz a GPU session returned (benchmarks/gpu/gpu_suite.py step "
                        "flukes_lite0): each job of a seed scored here on the original photos, row 'gpu <job>', "
                        "and fused")
    p.add_argument("--fusion", default="mean,log",
                   help="comma-separated fusion rules of the fusion rows: mean, logodds (whale ensemble --tune "
                        "--fusion RULE: calibrated probabilities; mean is --tune's default with several models), log, "
                        "linear (--tune-weights --weight-grid: raw scores)")
    p.add_argument("--cache", default=None, help="the keypoint feature store (default OUT/keypoint-store)")
    p.add_argument("--keypoint-runs", default=None, metavar="DIR",
                   help="fusion with the matcher's scores of an earlier --methods keypoints run (DIR/seedN/keypoints, "
                        "checked to be of the same split) instead of scoring again")
    p.add_argument("--learned-runs", default=None, metavar="DIR",
                   help="the networks of an earlier --methods learned run (DIR/seedN/learned-<config>[-<variant>], "
                        "checked to be of the same split) instead of training again: their rows and fusions")
    p.add_argument("--report", action="store_true",
                   help="instead of measuring: the table of every OUT/seedN/results.json written so far (seeds run by "
                        "separate commands into one OUT), with each fusion row's gain over the matcher, paired by seed")
    p.add_argument("--gains-over", default=None, metavar="METHOD",
                   help="with --report: every other row's gain over this row (e.g. 'learned flukes_lite0_head_cpu "
                        "random'), paired by seed")
    p.add_argument("--screen", nargs="+", default=None, metavar="SETTINGS",
                   help="instead of the methods: compare keypoint settings on validation (split of the first "
                        "seed, fold 0), each a quoted string of KEY=VALUE overrides ('' = the config as it is)")
    p.add_argument("--screen-on", choices=("fold0", "mirror"), default="fold0",
                   help="--screen's queries: fold 0's validation (default) or a split of train drawn as the test "
                        "was (mirror: known whales with a single gallery photo included)")
    p.add_argument("--screen-fuse", action="store_true",
                   help="with --screen: also the mean and the max of the settings' score matrices (two matchers "
                        "side by side, e.g. RootSIFT and XFeat)")
    args = p.parse_args(argv)
    args.source = harness.shared_source("humpback")
    if args.source is None:
        return 0
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in METHODS]
    if bad:
        p.error(f"unknown methods {bad}; expected some of {', '.join(METHODS)}")
    args.cache = Path(args.cache) if args.cache else Path(args.out) / "keypoint-store"
    args.learned_configs = [c for c in args.learned_config.split(",") if c]
    try:
        args.learned_variants = [learned_variant(v) for v in args.learned_variant]
    except ValueError as e:
        p.error(str(e))
    args.fusion = [r for r in args.fusion.split(",") if r]
    if args.report:
        rows = [r for f in sorted(Path(args.out).glob("seed*/results.json")) for r in json.loads(f.read_text())]
        print(table(rows))
        if any(r["method"].startswith("fusion") for r in rows):  # no fusion row: no empty table over keypoints
            print(gains_table(rows))
        if args.gains_over:
            print(gains_table(rows, args.gains_over, [m for m in dict.fromkeys(r["method"] for r in rows)
                                                      if m != args.gains_over]))
        curves = learning_curves(Path(args.out))
        if curves:
            print(f"validation curves of the learned runs: {curves}")
        return 0
    if args.screen is not None:
        rows = screen(args, args.screen)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "screen.json").write_text(json.dumps(rows, indent=2))
        return 0
    t0 = time.perf_counter()
    reference = machine_reference(args.source, lambda m: print(m, flush=True))
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        rows += run_seed(args, seed)
        print(table(rows), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps({"reference_s": reference, "rows": rows}, indent=2))
    print(table(rows))
    print(times_table(rows, reference))
    summary = {f"{r['method']}_{k}": [x[k] for x in rows if x["method"] == r["method"] and k in x]
               for r in rows for k, _ in COLUMNS}
    metrics = {k: float(np.mean(v)) for k, v in summary.items() if v and np.all(np.isfinite(v))}
    metrics["reference_s"] = reference
    print(common.final_json("humpback", metrics, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
