"""The objectives side by side on the same pipeline: synthetic whales, Omniglot, lions. Not a test.

    python benchmarks/seeds/objectives.py --out runs/bench_objectives [--sets synthetic,omniglot,lions]
        [--objectives head,contrastive,triplet,global,tgloss,sglobal,arcface] [--seeds 0,1,2] [--epochs-scale F]
        [--quick]
        [--sampler mined|random] [--set KEY=VALUE ...]

Every objective (``objective:`` of :mod:`whale.objectives`, its own defaults, nothing tuned on a test set)
trains with the same branch, image size, augmentation, schedule and number of optimiser steps as the
paper's head on each set: the identity objectives (P x K batches of ``P K = batch_size`` images) take
one step per ``batch_size`` images where a pair objective takes one per ``batch_size / 2`` images, so
their stages get twice the epochs. Each run keeps the checkpoint of its best validation MAP@5 (fold 0
of its training set), the only model selection. The raw-pixel nearest neighbour is scored in the same
run. Sets:

* ``synthetic``: the demo's competition (``whale.data.synth``, ``--ids`` identities, data seed = seed),
  ``configs/demo.yaml``; test MAP@5 (``new_whale`` threshold tuned on validation), top-1/5/10.
* ``omniglot``: trained on both small sets, small1 plus half of the characters of each of small2's own
  alphabets (Greek and Latin, in both zips, stay training alphabets); evaluated on the other half,
  characters never trained on (ids and image bytes checked disjoint): 20-way one-shot accuracy within
  alphabets, MAP@5 on a mini-competition of those characters. ``configs/omniglot.yaml``.
* ``lions``: seed 002's protocol (:func:`whale.metrics.retrieval_protocol`): the lions with >= 3 photos
  split 5 ways by identity, one fifth (``seed % 5``) never trained on; top-1/5/10 with the gallery = the
  training photos + 2 photos of each test lion, 10 redraws; TPR at FAR 0.01 and ROC AUC over all pairs of
  the held-out lions' photos (section III-E). ``configs/lions.yaml``. (Seed 002 exactly, on real flukes with
  5 complementary folds: ``benchmarks/seeds/seed002.py``.)

``--sampler``: ``mined`` (default) trains each config's schedule, its adversarial miner seeding the
pairs or the P x K batches; ``random`` trains the same stages with K = 1000 (random negatives, for the
identity objectives the seed's random P x K sampler), rows labelled ``OBJECTIVE (random)``: the two
side by side measure which sampler an objective should use.

``--set KEY=VALUE`` (repeatable, as ``run_fold.py``'s) changes every trained run's config, e.g.
``--set flip_ids=true`` or an objective's parameter, ``--set objective.pairs=triplet``; its rows are labelled
``OBJECTIVE [KEY=VALUE, ...]`` and train in their own folders, so settings are compared side by side in one
results file (chosen on ``val_map5`` only).

Results are appended to ``OUT/results.json`` as each run ends (a killed benchmark resumes where it
stopped: finished rows are kept, run folders resume); the last lines print one table of mean +- sd over
the seeds per set and objective, and one JSON object.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402
from whale.config.overrides import overrides  # noqa: E402

SETS = ("synthetic", "omniglot", "lions")
METRICS = {"synthetic": ("map5", "top1", "top5", "top10", "val_map5"),
           "omniglot": ("one_shot", "map5", "top1", "val_map5"),
           "lions": ("top1", "top5", "top10", "tpr_at_far", "auc", "val_map5")}
CONFIGS = {"synthetic": "demo.yaml", "omniglot": "omniglot.yaml", "lions": "lions.yaml"}


# ---------------------------------------------------------------------------------------------- sets
class SyntheticSet:
    """The demo's synthetic competition; test MAP@5 and top-k on it."""

    def __init__(self, out: Path, seed: int, n_ids: int, size: int):
        from whale.data.synth import generate

        self.train_dir = out / "data"
        if not (self.train_dir / "train.csv").is_file():
            generate(self.train_dir, n_ids=n_ids, seed=seed, size=size, progress=False)
        self.seed = seed

    def evaluate(self, method) -> dict:
        return common.evaluate_competition(method, self.train_dir, seed=self.seed)


class OmniglotSet:
    """Both small sets trained on; half of small2's own characters held out (module docstring)."""

    def __init__(self, out: Path, seed: int, quick: bool):
        from benchmarks.seeds import omniglot

        zips = omniglot.find_zips(None)
        if zips is None:
            raise FileNotFoundError("../shared/data/omniglot: images_background_small{1,2}.zip not found")
        small1 = omniglot.index_images(omniglot.extract(zips[0], out.parent / "raw"))
        own = omniglot.leak_free(small1, omniglot.index_images(omniglot.extract(zips[1], out.parent / "raw")),
                                 log=lambda m: None)
        held = held_out_characters(own, seed)
        train_rows = small1 + [r for r in own if r["id"] not in held]
        self.eval_rows = [r for r in own if r["id"] in held]
        # Never trained on: no evaluation id is a training id, no evaluation image has a training image's bytes.
        if {r["id"] for r in self.eval_rows} & {r["id"] for r in train_rows}:
            raise RuntimeError("leak: an evaluation character is a training character")
        if set(common.byte_digests([r["path"] for r in self.eval_rows])) & set(
                common.byte_digests([r["path"] for r in train_rows])):
            raise RuntimeError("leak: an evaluation image has the bytes of a training image")
        if quick:  # 8 drawers per character
            train_rows = [r for r in train_rows if int(r["drawer"]) <= 8]
        self.train_dir = common.build_competition(out / "train", [(r["path"], r["id"]) for r in train_rows])
        self.eval_dir = omniglot.eval_competition(self.eval_rows, out / "eval", seed)
        self.tasks = omniglot.small2_tasks(self.eval_rows, seed)
        self.seed = seed

    def evaluate(self, method) -> dict:
        from benchmarks.seeds import omniglot

        res = common.evaluate_competition(method, self.eval_dir, seed=self.seed)
        res["one_shot"] = omniglot.one_shot(method, self.eval_rows, self.tasks)
        return res


def held_out_characters(rows: list[dict], seed: int) -> set[str]:
    """Half of each alphabet's characters (rounded up), drawn by ``seed``: never trained on."""
    rng = np.random.default_rng([seed, 31])
    held = set()
    for alphabet in sorted({r["alphabet"] for r in rows}):
        chars = sorted({r["id"] for r in rows if r["alphabet"] == alphabet})
        held |= {chars[i] for i in rng.permutation(len(chars))[: (len(chars) + 1) // 2]}
    return held


class LionSet:
    """Seed 002's protocol on the lions: identities split 5 ways, one fifth held out."""

    def __init__(self, out: Path, seed: int, quick: bool):
        from benchmarks.seeds import lions

        root = common.shared_data("lions", "Lion_Data_Zero")
        if root is None:
            raise FileNotFoundError("../shared/data/lions/Lion_Data_Zero not found")
        photos = {}
        for part in lions.index_lions(root).values():
            for name, paths in part.items():
                photos.setdefault(name, []).extend(paths)
        names = sorted(n for n, p in photos.items() if len(p) >= 3)
        rng = np.random.default_rng([seed, 32])
        order = [names[i] for i in rng.permutation(len(names))]
        test_names = set(order[seed % 5::5])
        if quick:
            order = order[:40]
        self.train = [(p, n) for n in order if n not in test_names for p in sorted(photos[n])]
        self.test = [(p, n) for n in sorted(test_names) for p in sorted(photos[n])]
        digests = set(common.byte_digests([p for p, _ in self.train]))
        if any(d in digests for d in common.byte_digests([p for p, _ in self.test])):
            raise RuntimeError("leak: a held-out lion photo has the bytes of a training photo")
        self.train_dir = common.build_competition(out / "train", self.train, suffix=".jpg")
        self.seed = seed

    def evaluate(self, method) -> dict:
        from whale.data import fold_data, load_competition
        from whale.metrics import retrieval_protocol
        from whale.ranking import tune_threshold

        comp = load_competition(self.train_dir)
        data = fold_data(comp, 0, self.seed)
        _, val_map5, _ = tune_threshold(method.scores(method.features(data.val.paths),
                                                      method.features(data.gallery.paths)),
                                        data.gallery.ids, data.val.ids)
        ft, fq = method.features([p for p, _ in self.train]), method.features([p for p, _ in self.test])
        res = retrieval_protocol(method.scores(fq, ft), method.scores(fq, fq), [n for _, n in self.train],
                                 [n for _, n in self.test], m=2, redraws=10, seed=self.seed)
        out = {key: value[0] for key, value in res.items() if isinstance(value, tuple)}  # top-k: mean of the draws
        return {**out, "tpr_at_far": res["tpr_at_far"], "auc": res["auc"], "val_map5": float(val_map5),
                "queries": res["queries"]}


def make_set(name: str, out: Path, seed: int, args):
    if name == "synthetic":
        return SyntheticSet(out, seed, args.ids, args.size)
    if name == "omniglot":
        return OmniglotSet(out, seed, args.quick)
    return LionSet(out, seed, args.quick)


# ------------------------------------------------------------------------------------------ training
def objective_config(base_path: Path, objective: str, seed: int, scale: float, overrides: dict | None = None):
    """The set's config with ``objective``, ``seed``, ``overrides`` (``--set``) and the same optimiser steps as
    the head (module docstring)."""
    from whale.config import load_config

    # The name first, as a mapping, so that --set objective.PARAM=VALUE lands in it (e.g. objective.pairs=triplet).
    cfg = load_config(base_path, {"objective": {"name": objective}, **(overrides or {}), "seed": seed})
    steps_per_image = 2.0 if cfg.objective.identities else 1.0
    factor = scale * steps_per_image
    return cfg if factor == 1.0 else common.quick_config(cfg, factor, label=f"x{factor:g}")


def run_one(set_name: str, objective: str, seed: int, args, sets: dict, log) -> dict:
    out = Path(args.out) / set_name / f"seed{seed}"
    if (set_name, seed) not in sets:
        sets[(set_name, seed)] = make_set(set_name, out, seed, args)
    data = sets[(set_name, seed)]
    t0 = time.time()
    if objective == "pixels":
        method = common.PixelMethod(size=32, channels=1)
        row = {"train_s": 0.0, "epochs": "-"}
    else:
        cfg = objective_config(common.repo_root() / "configs" / CONFIGS[set_name], objective, seed, args.epochs_scale,
                               args.overrides)
        method_name = "adversarial" if args.sampler == "mined" else "random"
        folder = re.sub(r"[^A-Za-z0-9_.=-]", "_", "-".join([objective, *sorted(args.set)]))
        (variant,) = common.train_variants(cfg, data.train_dir, out / folder, methods=(method_name,),
                                           log=lambda m: None)
        method = common.SiameseMethod(variant.run_dir, objective)
        row = {"train_s": round(variant.seconds, 1), "epochs": f"{variant.epochs_done}/{variant.epochs_total}"}
    row.update({k: float(v) for k, v in data.evaluate(method).items() if k in METRICS[set_name]})
    row.update(set=set_name, objective=label(objective, args.sampler, args.set), seed=seed,
               seconds=round(time.time() - t0, 1))
    log(f"{set_name} seed {seed} {row['objective']}: " + ", ".join(f"{k} {row[k]:.3f}" for k in METRICS[set_name]
                                                             if k in row) + f" ({row['seconds']:.0f} s)")
    return row


def label(objective: str, sampler: str, settings: list[str] | None = None) -> str:
    """A row's name: the objective, with ``(random)`` when trained on random negatives (``--sampler random``)
    and ``[KEY=VALUE, ...]`` when ``--set`` changed its config; the pixel baseline is one row whatever they are."""
    if objective == "pixels":
        return objective
    name = objective if sampler == "mined" else f"{objective} (random)"
    return f"{name} [{', '.join(sorted(settings))}]" if settings else name


def summary(rows: list[dict]) -> tuple[str, dict]:
    """Markdown tables (one per set) of mean +- sd over seeds, and the same as a dict."""
    lines, out = [], {}
    for set_name in SETS:
        mine = [r for r in rows if r["set"] == set_name]
        if not mine:
            continue
        keys = METRICS[set_name]
        lines += [f"### {set_name}", "", "| objective | seeds | " + " | ".join(keys) + " | train s |",
                  "| --- | --- | " + " | ".join("---" for _ in keys) + " | --- |"]
        for objective in dict.fromkeys(r["objective"] for r in mine):
            these = [r for r in mine if r["objective"] == objective]
            stats = {k: common.mean_sd([r[k] for r in these if k in r]) for k in (*keys, "train_s")}
            out[f"{set_name}/{objective}"] = {**stats, "seeds": sorted(r["seed"] for r in these)}
            cells = [f"{stats[k]['mean']:.3f} +- {stats[k]['sd']:.3f}" if k in stats and these[0].get(k) is not None
                     else "-" for k in keys]
            lines.append(f"| {objective} | {len(these)} | " + " | ".join(cells)
                         + f" | {stats['train_s']['mean']:.0f} |")
        lines.append("")
    return "\n".join(lines), out


def main(argv=None) -> int:
    from whale.config.objectives import objective_names

    OBJECTIVES = objective_names()

    p = harness.parser(__doc__, "work folder (data, run folders, results.json)", seeds="0,1,2",
                       seeds_help="comma-separated seeds (data split and training)", report=True)
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from {', '.join(SETS)}")
    p.add_argument("--objectives", default=",".join(OBJECTIVES), help="comma-separated objective names")
    p.add_argument("--epochs-scale", type=float, default=1.0, help="every stage's length x F for every objective")
    p.add_argument("--ids", type=int, default=200, help="identities of the synthetic competition")
    p.add_argument("--size", type=int, default=256, help="image side of the synthetic competition")
    p.add_argument("--sampler", choices=("mined", "random"), default="mined",
                   help="mined: the configs' schedules (adversarial miner); random: K = 1000 in every stage")
    p.add_argument("--quick", action="store_true", help="small sets and 0.1 of the epochs (minutes, for tests)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value of every trained run (repeatable), e.g. flip_ids=true")
    args = p.parse_args(argv)
    t0 = time.time()
    results = harness.RowFile(Path(args.out) / "results.json", ("set", "objective", "seed"))
    if args.report:
        return harness.finish("objectives", results.rows(), summary, lambda s: {"summary": s, "quick": bool(args.quick)})
    sets_wanted = [s for s in args.sets.split(",") if s]
    objectives = [o for o in args.objectives.split(",") if o]
    bad = [s for s in sets_wanted if s not in SETS] + [o for o in objectives if o not in OBJECTIVES]
    if bad:
        p.error(f"unknown set or objective: {', '.join(bad)} (sets: {', '.join(SETS)}; objectives: "
                f"{', '.join(OBJECTIVES)})")
    try:  # a bad --set fails here, before any training
        args.overrides = overrides(args.set)
        for set_name in sets_wanted:
            for objective in objectives:
                objective_config(common.repo_root() / "configs" / CONFIGS[set_name], objective, 0, 1.0, args.overrides)
    except ValueError as err:
        p.error(str(err))
    if args.quick:
        args.ids, args.size, args.epochs_scale = min(args.ids, 30), min(args.size, 96), args.epochs_scale * 0.1
    common.setup_tensorflow()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    sets: dict = {}
    jobs = [harness.Job((set_name, label(objective, args.sampler, args.set), seed),
                        lambda s=set_name, o=objective, seed=seed: run_one(s, o, seed, args, sets, print), set_name)
            for seed in harness.seed_list(args.seeds) for set_name in sets_wanted for objective in ["pixels", *objectives]]
    rows = harness.run_jobs(results, jobs, args=vars(args))
    return harness.finish("objectives", rows, summary, lambda s: {"summary": s, "quick": bool(args.quick)},
                          time.time() - t0)


if __name__ == "__main__":
    sys.exit(main())
