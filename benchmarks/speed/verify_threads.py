"""The keypoint matcher's queries verified in threads against one thread, on real flukes. Not a test.

    python benchmarks/speed/verify_threads.py [--gallery 1000] [--queries 200] [--threads 1,2] [--repeats 2]
        [--config configs/keypoints_checked.yaml] [--cache STORE]

:meth:`whale.keypoints.matcher.KeypointMatcher.match` searches a block of 64 query photos' descriptors at once (FAISS,
on its own threads), then votes and verifies each query of the block: OpenCV's robust fits, which let go of
Python's lock, and the pair statistics around them. Those queries now go to ``KeypointMatcher.threads`` threads
(every core by default); before, one. This builds one matcher on the first ``--gallery`` identified photos of
``../shared/data/humpback`` (by name; every keypoint kept and no learned check, so the timed work is the search and
the verification alone), matches the next ``--queries`` photos against it both ways with the verified pairs
described (what the checked configs do), with each ``--threads`` count in turn, ``--repeats`` times, and prints
the seconds of each (the whole match, its search and its verification), the ratio to one thread, whether every
output is the same as one thread's (scores, inliers, votes, described pairs), the machine reference measured in
the same run, and as its last line one JSON object. The features are read from ``--cache`` (extracted there
first when missing).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def same(a, b) -> bool:
    """Whether two :class:`~whale.keypoints.matcher.MatchResult` hold the same arrays."""
    return all(np.array_equal(x, y) for x, y in ((a.scores, b.scores), (a.inliers, b.inliers), (a.votes, b.votes),
                                                 (a.pairs.index, b.pairs.index), (a.pairs.rows, b.pairs.rows)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gallery", type=int, default=1000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts; the first is the baseline")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--config", default=str(ROOT / "configs" / "keypoints_checked.yaml"))
    p.add_argument("--cache", default=None, help="the feature store (default: the toolkit's, $WHALE_CACHE)")
    p.add_argument("--source", default=str(ROOT.parent / "shared" / "data" / "humpback"))
    args = p.parse_args(argv)
    from benchmarks.flukes.shared import machine_reference, read_source
    from whale import NEW_WHALE
    from whale.keypoints.config import load_keypoint_config
    from whale.keypoints.matcher import KeypointMatcher
    from whale.keypoints.store import FeatureStore

    source = Path(args.source)
    if not (source / "train.csv").is_file():
        print(f"{source / 'train.csv'}: no photos here (the shared flukes sit beside the checkout); nothing measured")
        return 0
    counts = [int(t) for t in args.threads.split(",")]
    reference = machine_reference(source)
    df = read_source(source)
    df = df[df["Id"] != NEW_WHALE].sort_values("Image").head(args.gallery + args.queries)
    cfg = load_keypoint_config(args.config, {"select.keep": 1.0, "check.model": "none"})
    feats = FeatureStore(cfg, args.cache).features(list(df["path"]))
    gallery, queries = feats[:args.gallery], feats[args.gallery:]
    matcher = KeypointMatcher(cfg, gallery, list(df["Id"][:args.gallery]))
    seconds = {t: [] for t in counts}
    parts = {t: [] for t in counts}
    first: dict = {}
    for rep in range(args.repeats):
        for t in counts:
            matcher.threads = t
            t0 = time.perf_counter()
            result = matcher.match(queries, progress=False, describe=True)
            seconds[t].append(time.perf_counter() - t0)
            parts[t].append({k: result.seconds.get(k, 0.0) for k in ("search", "verify")})
            first.setdefault(t, result)
            print(f"repeat {rep + 1}, {t} thread(s): {seconds[t][-1]:.1f} s (search {parts[t][-1]['search']:.1f} s, "
                  f"voting and verification {parts[t][-1]['verify']:.1f} s)", flush=True)
    base = counts[0]
    rows = {}
    for t in counts:
        best = min(seconds[t])
        rows[t] = {"seconds": round(best, 2), "ratio_to_baseline": round(min(seconds[base]) / best, 3),
                   "search_s": round(min(x["search"] for x in parts[t]), 2),
                   "verify_s": round(min(x["verify"] for x in parts[t]), 2), "same_as_baseline": same(first[base], first[t])}
        print(f"{t} thread(s): best {best:.1f} s, {rows[t]['ratio_to_baseline']:.2f}x the speed of {base}; "
              f"the same output as {base} thread(s): {rows[t]['same_as_baseline']}")
    print(json.dumps({"benchmark": "verify_threads", "config": Path(args.config).name, "gallery": len(gallery),
                      "queries": len(queries), "pairs_described": int(len(first[base].pairs.index)),
                      "machine_reference_s": round(reference, 2), "threads": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
