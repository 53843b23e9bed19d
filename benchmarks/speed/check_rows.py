"""The learned check's pair rows: a validation match with today's spreads and with the former ones. Not a test.

    python benchmarks/speed/check_rows.py --data runs/hbx/seed0/data --cache runs/kpstore [--queries 40] [--repeats 1]

Every candidate a checked matcher verifies is described by a row (:func:`whale.keypoints.pairstats.pair_row`) whose
four spreads are 10th-90th percentile spans of the inliers and of each photo's keypoints. They were four
``np.percentile`` pairs a row; :func:`~whale.core.percentile.percentile_span` gives the same values, bit for bit,
from one sort a span, and a photo's own span is sorted once, at its first verified pair
(:attr:`~whale.keypoints.extract.Features.xy_span`), not again for every row it is in. This times the whole match
that ``whale score`` runs on a fold's validation queries (votes, verification, the rows, ``check.both_ways``'s
gallery matched back against the queries, the check's probabilities) on the first ``--queries`` validation photos of
fold 0 of ``--data`` (a split folder, e.g. the one ``benchmarks/flukes/humpback.py --out runs/hbx`` writes), under
``--config`` (default the checked XFeat matcher), the former spreads (kept here) and today's alternated
``--repeats`` times in one process after one untimed pass with a few queries (reading the mapped descriptors). The
fold's selector and check are read back from the store ``--cache`` when a run of that split kept them there, else
fitted first (tens of minutes at 6,000 photos).
Prints the machine reference, each way's seconds, the ratio, whether the two ways' scores and pair rows are equal,
and as its last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402


def former_spread(points: np.ndarray, photo) -> np.ndarray:
    """The former ``pairstats._spread``: ``np.percentile`` four times, all ``photo``'s keypoints each row."""
    every = photo.xy
    if len(points) < 2 or len(every) < 2:
        return np.zeros(2)
    span = np.percentile(every, 90, axis=0) - np.percentile(every, 10, axis=0)
    return (np.percentile(points, 90, axis=0) - np.percentile(points, 10, axis=0)) / np.maximum(span, 1.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a split folder (train.csv, train/) of benchmarks/flukes/humpback.py")
    p.add_argument("--cache", required=True, help="the keypoint store of that split's run (its selector kept there)")
    p.add_argument("--config", default=str(ROOT / "configs" / "keypoints_xfeat_checked.yaml"))
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--source", default=str(ROOT.parent / "shared" / "data" / "humpback"))
    args = p.parse_args(argv)
    if not (Path(args.data) / "train.csv").is_file():
        print(f"{args.data}: no split folder here (benchmarks/flukes/humpback.py --out DIR writes DIR/seedN/data); "
              "nothing measured")
        return 0
    from benchmarks.flukes.shared import machine_reference
    from whale.data import fold_data, load_competition
    from whale.keypoints import pairstats
    from whale.keypoints.config import load_keypoint_config
    from whale.keypoints.selectcache import SelectorCache
    from whale.keypoints.store import FeatureStore

    reference = machine_reference(Path(args.source)) if (Path(args.source) / "train").is_dir() else None
    cfg = load_keypoint_config(args.config)
    comp = load_competition(args.data)
    data = fold_data(comp, 0, 0)
    store = FeatureStore(cfg, args.cache)
    gallery = store.features(data.gallery.paths, progress=False)
    gallery_keys = list(store.keys)
    queries = store.features(data.val.paths[:args.queries], progress=False)
    query_keys = list(store.keys)
    t0 = time.perf_counter()
    cache = SelectorCache(store.folder, cfg, gallery_keys, data.gallery.ids, comp.open_label)
    matcher, read_back = cache.matcher(gallery, data.gallery.ids, comp.open_label, progress=True)
    print(f"matcher of {len(gallery)} gallery photos: {'read back' if read_back else 'fitted'} in "
          f"{time.perf_counter() - t0:.0f} s; {len(queries)} validation queries")
    ways = {"former": former_spread, "now": pairstats._spread}
    seconds = {name: [] for name in ways}
    results = {}
    for rep in range(args.repeats + 1):  # the first pass of each way untimed, with a few queries
        for name, spread in ways.items():
            pairstats._spread = spread
            some = queries if rep else queries[:2]
            t0 = time.perf_counter()
            results[name] = matcher.match(some, progress=False, keys=query_keys[:len(some)], describe=True)
            if rep:
                seconds[name].append(time.perf_counter() - t0)
    pairstats._spread = ways["now"]
    a, b = results["former"], results["now"]
    same = bool(np.array_equal(a.scores, b.scores) and np.array_equal(a.pairs.index, b.pairs.index)
                and np.array_equal(a.pairs.rows, b.pairs.rows))
    best = {name: float(min(v)) for name, v in seconds.items()}
    for name, v in best.items():
        print(f"{name:>7}: {v:.1f} s ({len(queries)} queries, {len(a.pairs.index):,} pair rows, both ways; fastest "
              f"of {args.repeats})")
    ratio = best["former"] / best["now"]
    print(f"now {ratio:.2f}x as fast; scores and pair rows {'equal' if same else 'DIFFERENT'} both ways"
          + (f"; machine reference {reference:.1f} s" if reference else ""))
    print(json.dumps({"benchmark": "check_rows", "queries": len(queries), "pair_rows": int(len(a.pairs.index)),
                      "config": Path(args.config).name, "seconds": best, "ratio": ratio, "equal": same,
                      "reference_s": reference}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
