"""A small catalogue of real flukes and a batch of mostly unknown whales (issue 57, item 3). Not a test.

    python benchmarks/flukes/catalogue_unknown.py --out runs/catalogue_unknown [--seeds 0,1,2] [--method joint]
        [-- MATCH FLAGS]

Per seed, from ``../shared/data/humpback`` (the benchmark prints a message and exits 0 when it is absent):

* the catalogue: 62 photos, three of each of 20 individuals with four photos or more and two of one more
  (``whale catalogue add``);
* the batch: 20 whales, one of them catalogued (its fourth photo) and 19 not, four of which are photographed
  twice: 24 photos (``whale catalogue match --method keypoints``, or ``--method joint``: every feature kind of
  ``configs/joint.yaml`` or ``-- --joint-config FILE``, plus any flags after ``--``).

Reported per seed and summed: the unknown whales' photos flagged "possibly new" (of 23), the catalogued one
flagged or not and ranked first, the groups formed (photos in groups; groups holding one whale only), the
four twice-photographed whales grouped together, and the best candidates' scores (and probabilities, where the
proposals hold them). The last stdout line is ``{"benchmark": "catalogue_unknown", "metrics": {...}, ...}``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.common import shared_data  # noqa: E402

BATCH = "field"


def build(data: Path, out: Path, seed: int) -> tuple[Path, Path, dict[str, str]]:
    """The catalogue's photos and labels and the batch's photos under ``out``: ``(labels, batch, truth)``,
    ``truth`` the individual of each batch photo (the catalogued one's, or an unknown whale's own id)."""
    import numpy as np
    import pandas as pd

    train = pd.read_csv(data / "train.csv")
    train = train[train["Id"] != "new_whale"]
    counts = train["Id"].value_counts()
    rng = np.random.default_rng(seed)
    many = sorted(counts[counts >= 4].index)
    two = sorted(counts[counts == 2].index)
    one = sorted(counts[counts == 1].index)
    chosen = [many[i] for i in rng.choice(len(many), 21, replace=False)]
    known, extra = chosen[:20], chosen[20]
    pairs = [two[i] for i in rng.choice(len(two), 4, replace=False)]
    singles = [one[i] for i in rng.choice(len(one), 15, replace=False)]
    (out / "identified").mkdir(parents=True, exist_ok=True)
    (out / BATCH).mkdir(parents=True, exist_ok=True)
    rows, truth = [], {}

    def images(ind):
        return sorted(train.loc[train["Id"] == ind, "Image"])

    for ind in known:
        for image in images(ind)[:3]:
            rows.append((image, ind))
    rows += [(image, extra) for image in images(extra)[:2]]
    for image, _ in rows:
        shutil.copy(data / "train" / image, out / "identified" / image)
    batch = [(images(known[0])[3], known[0])] + [(i, ind) for ind in pairs + singles for i in images(ind)]
    for image, ind in batch:
        shutil.copy(data / "train" / image, out / BATCH / image)
        truth[image] = ind
    labels = out / "identified.csv"
    pd.DataFrame(rows, columns=["image", "individual"]).to_csv(labels, index=False)
    return labels, out / BATCH, truth


def whale(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "whale", *argv, "--quiet"], cwd=ROOT, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def measure(proposals: dict, truth: dict[str, str], known: set[str]) -> dict:
    """The figures of one batch's proposals (module docstring)."""
    photos = {Path(p["photo"]).name: p for p in proposals["photos"]}
    unknown = [n for n in photos if truth[n] not in known]
    catalogued = [n for n in photos if truth[n] in known]
    groups: dict[int, list[str]] = {}
    for n, p in photos.items():
        if p["group"] is not None:
            groups.setdefault(p["group"], []).append(n)
    twice = {}
    for n in photos:
        twice.setdefault(truth[n], []).append(n)
    twice = {ind: names for ind, names in twice.items() if len(names) == 2}
    best = sorted(p["candidates"][0]["score"] for p in photos.values() if p["candidates"])
    probs = sorted(p["candidates"][0]["probability"] for p in photos.values()
                   if p["candidates"] and p["candidates"][0].get("probability") is not None)
    return {"unknown_photos": len(unknown), "unknown_flagged": sum(photos[n]["possibly_new"] for n in unknown),
            "catalogued_flagged": sum(photos[n]["possibly_new"] for n in catalogued),
            "catalogued_top1": sum(bool(photos[n]["candidates"]) and
                                   photos[n]["candidates"][0]["individual"] == truth[n] for n in catalogued),
            "groups": len(groups), "photos_in_groups": sum(map(len, groups.values())),
            "pure_groups": sum(len({truth[n] for n in g}) == 1 for g in groups.values()),
            "twice_grouped": sum(photos[a]["group"] is not None and photos[a]["group"] == photos[b]["group"]
                                 for a, b in twice.values()),
            "best_score_min_median_max": [round(best[0], 3), round(best[len(best) // 2], 3), round(best[-1], 3)],
            "best_probability_min_median_max": ([round(probs[0], 3), round(probs[len(probs) // 2], 3),
                                                 round(probs[-1], 3)] if probs else None),
            "threshold": proposals["threshold"]}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="0")
    p.add_argument("--method", default="keypoints", choices=("keypoints", "joint"),
                   help="match --method (joint: every feature kind of --joint-config, default configs/joint.yaml)")
    args = p.parse_args(argv)
    import pandas as pd

    t0 = time.time()
    data = shared_data("humpback")
    if data is None:
        print("needs ../shared/data/humpback beside the checkout; nothing measured")
        return 0
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        out = Path(args.out) / f"seed{seed}"
        shutil.rmtree(out, ignore_errors=True)
        labels, batch, truth = build(data, out / "photos", seed)
        cat = out / "cat"
        whale("catalogue", "add", str(cat), "--photos", str(out / "photos" / "identified"), "--labels", str(labels))
        started = time.time()
        said = whale("catalogue", "match", str(cat), "--method", args.method, "--photos", str(batch), *extra)
        seconds = time.time() - started
        print(f"seed {seed}: {said} ({seconds:.0f} s)")
        proposals = json.loads(Path(said.split()[1].rstrip(":")).read_text())  # "wrote PATH: ..."
        known = set(pd.read_csv(labels)["individual"])
        row = {"seed": seed, "method": args.method, "match_s": round(seconds, 1), **measure(proposals, truth, known)}
        print(json.dumps(row))
        rows.append(row)
    total = {k: sum(r[k] for r in rows) for k in ("unknown_photos", "unknown_flagged", "catalogued_flagged",
                                                  "catalogued_top1", "groups", "photos_in_groups", "pure_groups",
                                                  "twice_grouped")}
    print(json.dumps({"benchmark": "catalogue_unknown", "metrics": {"seeds": len(rows), **total, "per_seed": rows},
                      "seconds": round(time.time() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
