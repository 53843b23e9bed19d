"""Omniglot one-shot benchmark: the siamese toolkit on handwritten characters. Not a test.

    python benchmarks/omniglot.py --out runs/bench_omniglot [--quick] [--seed S]

Data: ``../shared/data/omniglot/images_background_small{1,2}.zip`` beside the checkout (read
in place, extracted under ``--out``; skipped with a message and exit 0 when absent). Each
character is an individual, each of its 20 drawers' images a sighting.

1. Training: ``images_background_small1`` (136 characters x 20 drawers) as a Kaggle-format
   folder ``OUT/train_small1`` (train.csv only); fold 0 of the toolkit's fold rules validates
   5 of each character's 20 images. Config ``configs/omniglot.yaml``.
2. Three methods: raw-pixel cosine nearest neighbour; the siamese model trained with random
   negatives only (K = 1000 in every stage, same epochs); the same model with the config's
   adversarial schedule (K decaying to hard negatives). Run folders ``OUT/runs/{random,adversarial}``.
3. Evaluation on ``images_background_small2`` (156 characters never seen in training):
   * 20-way one-shot accuracy (Lake et al.): 100 tasks, each 20 characters of one alphabet,
     one drawer's image of each as the gallery, another drawer's images as the 20 queries;
   * MAP@5 (and top-k) on a mini-competition ``OUT/eval_small2``: 75% of the characters are
     known (4 drawers each in train.csv, 2 other drawers each in test), the rest are
     ``new_whale`` (some characters' images in train.csv, others' in test, ~29% of test);
     the threshold is tuned on fold 0 of that train.csv.

Published: convolutional siamese 92.0% (Koch et al. 2015, trained on the full background set,
964 characters, with 8x affine distortions), 1-NN on pixels 21.7%, people 95.5% (Lake et al.).

The trained model also scores any Kaggle-format folder:
``python -m whale.inference --run OUT/runs/adversarial --data OUT/eval_small2 --out scores.npz``.
The last stdout line is ``{"benchmark": "omniglot", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="work folder (data copies, run folders)")
    p.add_argument("--quick", action="store_true", help="reduced settings for development")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits, tasks and training")
    p.add_argument("--config", default=str(common.repo_root() / "configs" / "omniglot.yaml"))
    p.add_argument("--data", default=None, help="folder of the two zips (default ../shared/data/omniglot)")
    p.add_argument("--budget", type=float, default=common.TOTAL_BUDGET_S,
                   help="wall-clock seconds for the whole benchmark; both trainings share what the "
                        "data preparation and evaluation leave (0 = no limit)")
    args = p.parse_args(argv)
    t0 = time.time()

    zips = find_zips(args.data)
    if zips is None:
        print(f"omniglot: data not found ({args.data or '../shared/data/omniglot'}: expected "
              "images_background_small1.zip and images_background_small2.zip); skipping")
        print(common.final_json("omniglot", {"skipped": True}, time.time() - t0))
        return 0

    cfg, out = common.prepare(args)
    train_rows = index_images(extract(zips[0], out / "raw"))
    eval_rows = index_images(extract(zips[1], out / "raw"))
    if args.quick:  # 12 drawers per character: 3 validate, 9 train
        keep = {f"{d:02d}" for d in range(1, 13)}
        train_rows = [r for r in train_rows if r["drawer"] in keep]
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
    variants = common.train_variants(cfg, train_dir, out / "runs",
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
    pix, rnd, adv = rows
    print(common.miner_verdict(adv["one_shot"], rnd["one_shot"], "20-way one-shot accuracy"))
    print(common.miner_verdict(adv["map5"], rnd["map5"], "MAP@5"))
    print(PUBLISHED)
    seconds = time.time() - t0
    metrics = {"one_shot_adversarial": adv["one_shot"], "one_shot_random": rnd["one_shot"],
               "one_shot_pixel": pix["one_shot"], "map5_adversarial": adv["map5"],
               "map5_random": rnd["map5"], "map5_pixel": pix["map5"],
               "miner_gap_one_shot": adv["one_shot"] - rnd["one_shot"],
               "miner_gap_map5": adv["map5"] - rnd["map5"], "quick": bool(args.quick),
               "run_dir": str(out / "runs" / "adversarial")}
    print(common.final_json("omniglot", metrics, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
