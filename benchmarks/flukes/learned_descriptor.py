"""A learned local descriptor against RootSIFT in the same keypoint matcher, on real flukes. Not a test.

    python benchmarks/flukes/learned_descriptor.py --out runs/descriptor [--seed 0] [--ids 0.25] [--losses tgloss,global]

Real-whale issue, item 5: the matcher's SIFT keypoints described by a small ConvNet trained self-supervised
(:mod:`whale.keypoints.descriptor`: a photo and its random homography warp, seed 000's equivalence; seed 001's
TGLoss or global loss) instead of RootSIFT, everything else of ``configs/keypoints.yaml`` unchanged.

Data: split ``--seed`` of ``benchmarks/flukes/humpback.py`` (built under ``--out`` when absent). Validation only,
never the test set: :func:`benchmarks.flukes.shared.mirror_split` of its ``train`` (one known query per individual
with two or more photos, 1-photo galleries included, ``train``'s ``new_whale`` photos as open-set queries).
The descriptor trains on that split's gallery photos, unlabelled (a catalogue a researcher holds); no query
photo is among them (checked by bytes). The comparison runs on the queries and gallery of a seeded share
``--ids`` of the individuals (and as many of the open-set queries), to keep a CPU's extraction of learned
descriptors short. Rows: RootSIFT; each trained descriptor; the same network untrained (what training adds).
The last stdout line is ``{"benchmark": "learned_descriptor", "metrics": {...}, "seconds": ...}``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from benchmarks.flukes.shared import build_split, evaluate_setting, mirror_split, screen_table  # noqa: E402
from whale import NEW_WHALE  # noqa: E402


def subset(g_paths, g_ids, q_paths, q_ids, share: float, seed: int):
    """The gallery and queries of a seeded ``share`` of the individuals, and that share of open-set queries."""
    rng = np.random.default_rng(seed)
    ids = np.unique(g_ids)
    keep = set(rng.choice(ids, max(1, round(share * len(ids))), replace=False))
    g = [i for i, w in enumerate(g_ids) if w in keep]
    new = np.flatnonzero(q_ids == NEW_WHALE)
    new = set(rng.choice(new, round(share * len(new)), replace=False)) if len(new) else set()
    q = [i for i, w in enumerate(q_ids) if w in keep or i in new]
    return ([g_paths[i] for i in g], g_ids[g], [q_paths[i] for i in q], q_ids[q])


def main(argv=None) -> int:
    p = harness.parser(__doc__, "work folder (the split, the keypoint store, the trained descriptors)")
    p.add_argument("--seed", type=int, default=0, help="split seed (benchmarks/flukes/humpback.py)")
    p.add_argument("--ids", type=float, default=0.25, help="share of individuals compared on")
    p.add_argument("--losses", default="tgloss", help="comma-separated, of tgloss, global")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--pairs", type=int, default=40_000)
    p.add_argument("--keypoint-config", default="configs/keypoints.yaml")
    p.add_argument("--cache", default=None, help="feature store (default OUT/keypoint-store)")
    args = p.parse_args(argv)
    source = harness.shared_source("humpback")
    if source is None:
        return 0
    from whale.core.files import file_hash
    from whale.keypoints import load_keypoint_config
    from whale.keypoints.learn import train

    t_start = time.perf_counter()
    out = Path(args.out)
    cache = Path(args.cache) if args.cache else out / "keypoint-store"
    comp_dir = out / f"seed{args.seed}" / "data"
    if not (comp_dir / "test_solution.csv").is_file():
        build_split(source, comp_dir, args.seed)
    g_paths, g_ids, q_paths, q_ids = mirror_split(comp_dir, args.seed)
    query_bytes = {file_hash(q) for q in q_paths}
    twins = [g for g in g_paths if file_hash(g) in query_bytes]
    if twins:
        raise SystemExit(f"{len(twins)} training photos share their bytes with a query, e.g. {twins[0]}")
    sg_paths, sg_ids, sq_paths, sq_ids = subset(g_paths, g_ids, q_paths, q_ids, args.ids, args.seed)
    print(f"descriptor trained on {len(g_paths)} gallery photos (no query among them, by bytes); compared on "
          f"{len(sq_ids)} queries ({(sq_ids == NEW_WHALE).sum()} new) against {len(sg_ids)} gallery photos", flush=True)
    base = load_keypoint_config(args.keypoint_config)
    settings = [("RootSIFT", None)]
    for loss in [x.strip() for x in args.losses.split(",") if x.strip()]:
        folder = out / f"descriptor_{loss}"
        spec = train(g_paths, folder, base.features, loss=loss, epochs=args.epochs, n_pairs=args.pairs)
        print(json.dumps({"trained": loss, **spec}), flush=True)
        settings.append((f"learned, {loss}, {args.epochs} epochs", folder))
    untrained = out / "descriptor_untrained"
    train(g_paths[:50], untrained, base.features, epochs=0, n_pairs=1000, progress=False)
    settings.append(("the same network untrained", untrained))
    rows = []
    for name, folder in settings:
        over = {} if folder is None else {"features.descriptor": str(folder)}
        cfg = load_keypoint_config(args.keypoint_config, over)
        row = {"setting": name, **evaluate_setting(cfg, cache, sg_paths, sg_ids, sq_paths, sq_ids)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(screen_table(rows))
    (out / "descriptor.json").write_text(json.dumps(rows, indent=2))
    metrics = {f"{r['setting']}_map5_known": r["map5_known"] for r in rows}
    print(common.final_json("learned_descriptor", metrics, time.perf_counter() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
