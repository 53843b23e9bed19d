"""Omniglot one-shot benchmark: the siamese toolkit on handwritten characters. Not a test.

    python benchmarks/seeds/omniglot.py --out runs/bench_omniglot [--quick] [--seed S]
    python benchmarks/seeds/omniglot.py --out runs/omniglot3 --seeds 0,1,2 [--jobs 3] [--gpu]

Data: ``../shared/data/omniglot/images_background_small{1,2}.zip`` beside the checkout (read
in place, extracted under ``--out``; skipped with a message and exit 0 when absent). Each
character is an individual, each of its 20 drawers' images a sighting.

Leak-free protocol (checked in code before anything trains, :func:`leak_free`): the two zips
share two alphabets, Greek and Latin, with byte-identical images under the same ids. They stay
in training and are **dropped from the evaluation**, which keeps small2's own alphabets only
(Japanese (katakana) 47, Sanskrit 42, Tagalog 17 characters: 106 never seen). The benchmark
then asserts that no evaluation id is a training id and that no evaluation image has the bytes
of a training image (SHA-1 of the file), and stops otherwise.

1. Training: ``images_background_small1`` (136 characters x 20 drawers) as a Kaggle-format
   folder ``OUT/train_small1`` (train.csv only); fold 0 of the toolkit's fold rules validates
   5 of each character's 20 images. Config ``configs/omniglot.yaml`` (2 CPU cores) or, with
   ``--gpu``, ``configs/omniglot_gpu.yaml`` (ConvNet v1 at 105 px, Koch et al.'s affine
   distortions, the paper's stage structure). Each run keeps the checkpoint of its best
   validation MAP@5 (small1 fold 0): the only model selection, never on the evaluation set.
2. Three methods: raw-pixel cosine nearest neighbour; the siamese model trained with random
   negatives only (K = 1000 in every stage, same epochs and learning rates); the same model
   with the config's adversarial schedule (K decaying to hard negatives). Run folders
   ``OUT/runs/{random,adversarial}``.
3. Evaluation on small2's own alphabets:
   * 20-way one-shot accuracy (Lake et al.): 100 tasks, each 20 characters of one alphabet
     with at least 20 (katakana or Sanskrit), one drawer's image of each as the gallery,
     another drawer's images as the 20 queries;
   * MAP@5 (and top-k) on a mini-competition ``OUT/eval_small2``: 75% of the characters are
     known (4 drawers each in train.csv, 2 other drawers each in test), the rest are
     ``new_whale`` (some characters' images in train.csv, others' in test, ~29% of test);
     the threshold is tuned on fold 0 of that train.csv (validation), never on test.

``--seeds 0,1,2`` runs the whole benchmark once per seed (data splits, tasks and training all
follow the seed) as separate processes, ``--jobs`` at a time (on one GPU they share it), and
prints each seed's figures with their mean and standard deviation.

Published: convolutional siamese 92.0% (Koch et al. 2015, trained on the full background set,
964 characters, with 8x affine distortions), 1-NN on pixels 21.7%, people 95.5% (Lake et al.).

The trained model also scores any Kaggle-format folder:
``python -m whale.inference --run OUT/runs/adversarial --data OUT/eval_small2 --out scores.npz``.
The last stdout line is ``{"benchmark": "omniglot", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import hashlib
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from whale import NEW_WHALE  # noqa: E402

N_WAY, N_TASKS = 20, 100  # 2,000 queries: a standard error of ~1 point at 80%
KNOWN_SHARE = 0.75          # of small2's characters known in the MAP@5 mini-competition
TRAIN_DRAWERS, TEST_DRAWERS = 4, 2
PUBLISHED = "published: convolutional siamese 92.0% (Koch et al. 2015), 1-NN pixels 21.7%, people 95.5%"


def extract(zip_path: Path, dest: Path) -> Path:
    """Unzip once into ``dest``; returns the folder of alphabets."""
    root = dest / zip_path.stem
    if not root.is_dir():
        with zipfile.ZipFile(zip_path) as z:
            z.extractall(dest)
    return root


def index_images(root: Path) -> list[dict]:
    """One dict per image: ``path``, ``id`` (alphabet_characterNN), ``drawer`` (01..20), ``alphabet``."""
    rows = []
    for p in sorted(root.glob("*/*/*.png")):
        alphabet, character = p.parent.parent.name, p.parent.name
        rows.append({"path": p, "id": f"{alphabet}_{character}", "alphabet": alphabet,
                     "drawer": p.stem.rsplit("_", 1)[-1]})
    if not rows:
        raise ValueError(f"{root}: no images found (expected ALPHABET/characterNN/NNNN_DD.png)")
    return rows


def leak_free(train_rows: list[dict], eval_rows: list[dict], log=print) -> list[dict]:
    """``eval_rows`` without the alphabets that training also has, checked disjoint from training.

    Drops every evaluation alphabet that occurs in ``train_rows`` (Greek and Latin for
    small1/small2), then asserts that the remaining evaluation ids are not training ids and that
    no remaining evaluation image has the same bytes (SHA-1) as a training image.

    Raises:
        RuntimeError: an id or an image is in both sets after the drop.
    """
    shared = sorted({r["alphabet"] for r in train_rows} & {r["alphabet"] for r in eval_rows})
    kept = [r for r in eval_rows if r["alphabet"] not in shared]
    log(f"evaluation: dropped the alphabets training also has ({', '.join(shared) or 'none'}): "
        f"{len(eval_rows) - len(kept)} images; kept {len(kept)} images of "
        f"{len({r['id'] for r in kept})} characters ({', '.join(sorted({r['alphabet'] for r in kept}))})")
    both_ids = {r["id"] for r in train_rows} & {r["id"] for r in kept}
    if both_ids:
        raise RuntimeError(f"leak: {len(both_ids)} evaluation ids are training ids, e.g. {sorted(both_ids)[:3]}")

    def digest(row):
        return hashlib.sha1(Path(row["path"]).read_bytes()).hexdigest()

    train_bytes = {digest(r) for r in train_rows}
    same = [r["path"] for r in kept if digest(r) in train_bytes]
    if same:
        raise RuntimeError(f"leak: {len(same)} evaluation images have the bytes of a training image, "
                           f"e.g. {same[0]}")
    log(f"checked: 0 of {len({r['id'] for r in kept})} evaluation ids in training, 0 of {len(kept)} "
        f"evaluation images byte-identical to any of {len(train_rows)} training images")
    return kept


def small2_tasks(rows: list[dict], seed: int) -> list:
    """The 20-way one-shot tasks over ``rows`` (images of unseen characters), within alphabets."""
    return common.one_shot_tasks([r["id"] for r in rows], [r["drawer"] for r in rows], N_WAY, N_TASKS,
                                 seed=seed, families=[r["alphabet"] for r in rows])


def one_shot(method, rows: list[dict], tasks) -> float:
    """One-shot accuracy of ``method`` (``features``/``scores``) on ``tasks`` over ``rows``."""
    used = np.unique(np.concatenate([np.concatenate(t) for t in tasks]))
    feats = method.features([rows[i]["path"] for i in used])
    at = {int(i): k for k, i in enumerate(used)}

    def score(q, g):
        return method.scores(feats[[at[int(i)] for i in q]], feats[[at[int(i)] for i in g]])

    return common.one_shot_accuracy(score, tasks)


def find_zips(data: str | None) -> list[Path] | None:
    """The two zips (small1, small2) from ``data`` or ``../shared/data/omniglot``; None if absent."""
    src = Path(data) if data else common.shared_data("omniglot")
    zips = [src / f"images_background_small{i}.zip" for i in (1, 2)] if src else []
    return zips if zips and all(z.is_file() for z in zips) else None


def eval_competition(rows: list[dict], out: Path, seed: int) -> Path:
    """The small2 mini-competition for MAP@5 (see the module docstring)."""
    rng = np.random.default_rng([seed, 2])
    by_id: dict[str, list[dict]] = {}
    for r in rows:
        by_id.setdefault(r["id"], []).append(r)
    ids = sorted(by_id)
    order = rng.permutation(len(ids))
    n_known = int(round(KNOWN_SHARE * len(ids)))
    known = [ids[i] for i in order[:n_known]]
    unknown = [ids[i] for i in order[n_known:]]
    train, test = [], []
    for c in known:
        imgs = [by_id[c][i] for i in rng.permutation(len(by_id[c]))]
        train += [(r["path"], c) for r in imgs[:TRAIN_DRAWERS]]
        test += [(r["path"], c) for r in imgs[TRAIN_DRAWERS:TRAIN_DRAWERS + TEST_DRAWERS]]
    # new_whale rows of train.csv: enough for fold 0's ~25% share (one known image per
    # character in validation -> n_known / 3), 2 drawers per character.
    n_nw_train_ids = -(-n_known // 6)
    for c in unknown[:n_nw_train_ids]:
        imgs = [by_id[c][i] for i in rng.permutation(len(by_id[c]))]
        train += [(r["path"], NEW_WHALE) for r in imgs[:2]]
    # new_whale in test: ~29% of the test images, spread over the remaining characters.
    rest = unknown[n_nw_train_ids:]
    n_nw_test = int(round(0.29 / 0.71 * len(test)))
    per = -(-n_nw_test // max(1, len(rest)))
    for c in rest:
        imgs = [by_id[c][i] for i in rng.permutation(len(by_id[c]))]
        test += [(r["path"], NEW_WHALE) for r in imgs[:per]]
    test = [test[i] for i in rng.permutation(len(test))]
    return common.build_competition(out, train, test)


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (data copies, run folders)")
    p.add_argument("--quick", action="store_true", help="reduced settings for development")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits, tasks and training")
    harness.add_seed_arguments(p)
    p.add_argument("--gpu", action="store_true",
                   help="the GPU schedule (configs/omniglot_gpu.yaml) and no time budget")
    p.add_argument("--config", default=None,
                   help="default configs/omniglot.yaml, or configs/omniglot_gpu.yaml with --gpu")
    p.add_argument("--data", default=None, help="folder of the two zips (default ../shared/data/omniglot)")
    p.add_argument("--characters", type=int, default=0,
                   help="train on the first N characters of small1 only (0 = all 136; smoke runs)")
    p.add_argument("--budget", type=float, default=None,
                   help="wall-clock seconds for the whole benchmark; both trainings share what the "
                        "data preparation and evaluation leave (0 = no limit; default 1170, none with --gpu)")
    args = p.parse_args(argv)
    t0 = time.time()
    if args.config is None:
        args.config = str(common.repo_root() / "configs" / ("omniglot_gpu.yaml" if args.gpu else "omniglot.yaml"))
    if args.budget is None:
        args.budget = 0.0 if args.gpu else common.TOTAL_BUDGET_S
    if args.seeds:
        return harness.several_seeds(
            Path(__file__), args, argv if argv is not None else sys.argv[1:], SEED_KEYS, "omniglot",
            f"Omniglot, {N_WAY}-way one-shot on {N_TASKS} tasks per seed (small2's own alphabets, unseen); "
            f"MAP@5 on the small2 mini-competition; config {args.config}", t0, footer=PUBLISHED)

    zips = find_zips(args.data)
    if zips is None:
        print(f"omniglot: data not found ({args.data or '../shared/data/omniglot'}: expected "
              "images_background_small1.zip and images_background_small2.zip); skipping")
        print(common.final_json("omniglot", {"skipped": True}, time.time() - t0))
        return 0

    cfg, out = common.prepare(args)
    train_rows = index_images(extract(zips[0], out / "raw"))
    eval_rows = leak_free(train_rows, index_images(extract(zips[1], out / "raw")))
    if args.quick:  # 12 drawers per character: 3 validate, 9 train
        keep = {f"{d:02d}" for d in range(1, 13)}
        train_rows = [r for r in train_rows if r["drawer"] in keep]
    if args.characters:
        keep = sorted({r["id"] for r in train_rows})[: args.characters]
        train_rows = [r for r in train_rows if r["id"] in keep]
    train_dir = common.build_competition(out / "train_small1", [(r["path"], r["id"]) for r in train_rows])
    eval_dir = eval_competition(eval_rows, out / "eval_small2", args.seed)
    print(f"training set: {len(train_rows)} images of {len({r['id'] for r in train_rows})} characters "
          f"({train_dir}); evaluation: {len(eval_rows)} images of {len({r['id'] for r in eval_rows})} "
          f"new characters ({eval_dir})")

    tasks = small2_tasks(eval_rows, args.seed)

    def evaluate(method) -> dict:
        t1 = time.time()
        res = {"method": method.name, "one_shot": one_shot(method, eval_rows, tasks)}
        res.update(common.evaluate_competition(method, eval_dir, seed=args.seed))
        print(f"{method.name}: 20-way one-shot {res['one_shot']:.3f}, MAP@5 {res['map5']:.3f} "
              f"({time.time() - t1:.0f} s)")
        return res

    rows = [evaluate(common.PixelMethod(size=32, channels=1))]
    methods = tuple(m for m in args.methods.split(",") if m)
    variants = common.train_variants(cfg, train_dir, out / "runs", methods=methods,
                                     budget_s=common.training_budget(args.budget, t0))
    for v in variants:
        r = evaluate(common.SiameseMethod(v.run_dir, f"siamese, {v.label} negatives"))
        r.update(small1_val_map5=v.best_val_map5, train_s=round(v.seconds),
                 epochs=f"{v.epochs_done}/{v.epochs_total}")
        rows.append(r)

    print()
    print(f"Omniglot, {N_WAY}-way one-shot on {N_TASKS} tasks (small2, unseen characters); "
          f"MAP@5 on the small2 mini-competition{' (--quick)' if args.quick else ''}")
    print(common.results_table(rows, [
        ("method", "method"), ("one_shot", "20-way 1-shot acc"), ("map5", "MAP@5 (test)"),
        ("top1", "top-1"), ("top5", "top-5"), ("small1_val_map5", "val MAP@5 (small1 fold 0)"),
        ("epochs", "epochs"), ("train_s", "train s")]))
    metrics = {"one_shot_pixel": rows[0]["one_shot"], "map5_pixel": rows[0]["map5"],
               "quick": bool(args.quick), "config": str(args.config)}
    for label, r in zip(methods, rows[1:]):
        metrics.update({f"one_shot_{label}": r["one_shot"], f"map5_{label}": r["map5"],
                        f"train_s_{label}": r["train_s"], f"val_map5_{label}": r["small1_val_map5"],
                        f"epochs_{label}": r["epochs"]})
    metrics = common.with_miner_gaps(metrics)
    if "miner_gap_map5" in metrics:
        print(common.miner_verdict(metrics["one_shot_adversarial"], metrics["one_shot_random"],
                                   "20-way one-shot accuracy"))
        print(common.miner_verdict(metrics["map5_adversarial"], metrics["map5_random"], "MAP@5"))
    print(PUBLISHED)
    print(common.final_json("omniglot", metrics, time.time() - t0))
    return 0


SEED_KEYS = [("one_shot_adversarial", "1-shot adversarial"), ("one_shot_random", "1-shot random"),
             ("one_shot_pixel", "1-shot pixels"), ("map5_adversarial", "MAP@5 adversarial"),
             ("map5_random", "MAP@5 random"), ("map5_pixel", "MAP@5 pixels"),
             ("miner_gap_one_shot", "miner gap 1-shot"), ("miner_gap_map5", "miner gap MAP@5"),
             ("train_s_adversarial", "train s adv."), ("train_s_random", "train s random")]


if __name__ == "__main__":
    sys.exit(main())
