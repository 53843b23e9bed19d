"""Probes of the keypoint matcher on the mirror validation split: what else could lift known MAP@5. Not a test.

    python benchmarks/flukes/humpback_probes.py --out runs/humpback_screen3 --cache runs/humpback_final/keypoint-store \
        [--probes rerank,confusers,misses]

Every probe runs on :func:`benchmarks.flukes.shared.mirror_split` of split seed 0 (drawn from ``train`` as the
test was; the test queries are never looked at), with ``configs/keypoints.yaml`` as shipped, against the
shipped matcher's scores measured in the same run:

* ``rerank``: the 20 best photos of each query matched again pairwise (every query descriptor's two nearest
  descriptors of that photo, Lowe's ratio test at 0.85, the shipped geometric fit), the photo's score
  ``pairwise inliers + w x t`` (``t``: the shipped evidence, :func:`whale.keypoints.scoring.evidence_to_score`'s
  ``t``) for several ``w``: does matching the shortlist densely, beyond the LNBNN correspondences, rank better?
* ``confusers`` (Knopp et al. 2010, "Avoiding confusing features in place recognition"): the gallery matched
  against itself; keypoints verified as inliers of a match to a photo of another individual with at least
  ``T`` inliers are confusers (captions, watermarks, water). ``drop``: removed from the gallery; ``sink``:
  kept in the index as one extra photo whose votes are thrown away, so a query's caption votes for the sink
  rather than for another whale's photo;
* ``misses``: ``OUT/probes/misses.png``, six known queries whose first photo is another whale's, with the
  keypoints (green) and the verified matches (red) of that wrong pair: what a person would look at first.

Prints one table (known MAP@5, the queries whose whale has one gallery photo, top-1/5, MAP@5 with
``new_whale`` at the threshold tuned on the same queries) and writes ``OUT/probes/probes.json``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks import common, harness  # noqa: E402
from benchmarks.flukes.shared import build_split, mirror_split, screen_table, validation_metrics  # noqa: E402
from whale import NEW_WHALE  # noqa: E402
from whale.core.progress import progress_bar  # noqa: E402

PROBES = ("rerank", "confusers", "misses")
RERANK_SHORTLIST = 20
RERANK_RATIO = 0.85
RERANK_WEIGHTS = (0.0, 10.0, 20.0, 40.0, 80.0)
CONFUSER_INLIERS = (6, 12)


def evidence(scores: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """The ``t`` of ``score = t / (t + scale)`` (:func:`whale.keypoints.scoring.evidence_to_score`)."""
    return scale * scores / np.maximum(1.0 - scores, 1e-6)


def pairwise_inliers(fq, fg, shortlist: np.ndarray, cfg) -> np.ndarray:
    """``[n_q, n_g] float32``: inliers of each query's ``shortlist`` photos matched pairwise (module docstring)."""
    import cv2

    from whale.keypoints.extract import as_float
    from whale.keypoints.verify import fit_geometry, opencv_threads

    matcher = cv2.BFMatcher(cv2.NORM_L2)
    out = np.zeros((len(fq), len(fg)), np.float32)
    gallery = [as_float(f.desc) for f in fg]
    with opencv_threads(1):  # one thread per pair match; the caller's OpenCV thread count is restored after
        for i, q in enumerate(progress_bar(fq, desc="pairwise matches")):
            if len(q) < 2:
                continue
            qd = as_float(q.desc)
            for c in shortlist[i]:
                if len(gallery[c]) < 2:
                    continue
                pairs = [m for m in matcher.knnMatch(qd, gallery[c], k=2)
                         if len(m) == 2 and m[0].distance < RERANK_RATIO * m[1].distance]
                if len(pairs) < cfg.verify.min_matches:
                    continue
                src = q.xy[[m[0].queryIdx for m in pairs]]
                dst = fg[c].xy[[m[0].trainIdx for m in pairs]]
                mask = fit_geometry(src, dst, cfg.verify)
                if mask is not None:
                    out[i, c] = mask.sum()
    return out


def probe_rerank(base, fg, fq, g_ids, q_ids, cfg) -> list[dict]:
    shortlist = np.argsort(-base, axis=1)[:, :RERANK_SHORTLIST]
    t0 = time.perf_counter()
    pin = pairwise_inliers(fq, fg, shortlist, cfg)
    seconds = time.perf_counter() - t0
    t = evidence(base, cfg.verify.scale)
    rows = []
    for w in RERANK_WEIGHTS:
        s = pin + w * t
        rows.append({"setting": f"rerank: pairwise inliers + {w:g} t", "seconds": seconds,
                     **validation_metrics(s / (s + 10.0), g_ids, q_ids)})
    return rows


def confuser_inliers(fg, g_ids, cfg) -> list[dict]:
    """Per gallery photo ``{keypoint: most inliers of a verified match to another individual's photo}``: the
    gallery matched against itself, every keypoint, each photo left out of its own neighbours."""
    from whale.keypoints import KeypointMatcher

    hits = [dict() for _ in fg]

    def record(i, c, query_keys, photo_keys):
        if g_ids[c] == g_ids[i]:
            return
        for owner, keys in ((i, query_keys), (c, photo_keys)):
            for key in keys.tolist():
                hits[owner][key] = max(hits[owner].get(key, 0), len(query_keys))

    matcher = KeypointMatcher(cfg.without_selection(), fg, g_ids)
    matcher.match(fg, leave_out=np.arange(len(fg)), on_verified=record)
    return hits


def probe_confusers(fg, fq, g_ids, q_ids, cfg) -> list[dict]:
    from whale.keypoints import KeypointMatcher
    from whale.keypoints.extract import Features

    t0 = time.perf_counter()
    hits = confuser_inliers(fg, g_ids, cfg)
    seconds = time.perf_counter() - t0
    rows = []
    for least in CONFUSER_INLIERS:
        keeps = []
        for f, h in zip(fg, hits):
            keep = np.ones(len(f), bool)
            keep[[key for key, inl in h.items() if inl >= least]] = False
            keeps.append(keep)
        share = 1 - sum(k.sum() for k in keeps) / sum(len(k) for k in keeps)
        kept = [f.take(k) for f, k in zip(fg, keeps)]
        cut = [f.take(~k) for f, k in zip(fg, keeps)]
        sink = Features(*(np.concatenate([getattr(f, a) for f in cut]) for a in ("xy", "diameter_angle", "desc")),
                        (1, 1))
        for mode, gallery, ids in (("drop", kept, g_ids), ("sink", kept + [sink], np.append(g_ids, "__sink__"))):
            result = KeypointMatcher.build(cfg, gallery, ids).match(fq, progress=False)
            rows.append({"setting": f"confusers >= {least} inliers, {mode} ({share:.1%} of descriptors)",
                         "seconds": seconds, **validation_metrics(result.scores[:, :len(fg)], g_ids, q_ids)})
    return rows


def draw_misses(base, fg, fq, g_paths, g_ids, q_paths, q_ids, cfg, out: Path, n: int = 6) -> Path | None:
    import cv2

    from whale.keypoints import pair_matches

    rows = []
    for i in np.random.default_rng(3).permutation(np.flatnonzero(q_ids != NEW_WHALE)):
        top = int(np.argmax(base[i]))
        if g_ids[top] == q_ids[i]:
            continue
        a, b = cv2.imread(str(q_paths[i])), cv2.imread(str(g_paths[top]))
        if a is None or b is None or a.shape != b.shape:
            continue
        for image, f in ((a, fq[i]), (b, fg[top])):
            for x, y in f.xy.astype(int):
                cv2.circle(image, (int(x), int(y)), 1, (0, 255, 0), -1)
        pair = np.hstack([a, b])
        for p, q in zip(*pair_matches(fq[i], fg[top], cfg)):
            cv2.line(pair, (int(p[0]), int(p[1])), (int(q[0]) + a.shape[1], int(q[1])), (0, 0, 255), 1)
        rows.append(pair)
        if len(rows) == n:
            break
    if not rows:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out), np.vstack(rows))
    return out


def main(argv=None) -> int:
    p = harness.parser(__doc__, "the humpback benchmark's folder (its split seed 0 is reused)")
    p.add_argument("--cache", default=None, help="the keypoint feature store (default OUT/keypoint-store)")
    p.add_argument("--keypoint-config", default="configs/keypoints.yaml")
    p.add_argument("--probes", default=",".join(PROBES), help=f"comma-separated, of {', '.join(PROBES)}")
    args = p.parse_args(argv)
    source = harness.shared_source("humpback")
    if source is None:
        return 0
    probes = [x for x in args.probes.split(",") if x]
    if set(probes) - set(PROBES):
        p.error(f"unknown probes {sorted(set(probes) - set(PROBES))}; expected some of {', '.join(PROBES)}")
    from whale.keypoints import FeatureStore, KeypointMatcher, load_keypoint_config

    t_start = time.perf_counter()
    comp = Path(args.out) / "seed0" / "data"
    if not (comp / "test_solution.csv").is_file():
        build_split(source, comp, 0)
    g_paths, g_ids, q_paths, q_ids = mirror_split(comp, 0)
    cfg = load_keypoint_config(args.keypoint_config)
    store = FeatureStore(cfg, args.cache or Path(args.out) / "keypoint-store")
    fg, fq = store.features(g_paths), store.features(q_paths)
    base = KeypointMatcher.build(cfg, fg, g_ids).match(fq).scores
    rows = [{"setting": "configs/keypoints.yaml as shipped", **validation_metrics(base, g_ids, q_ids)}]
    if "rerank" in probes:
        rows += probe_rerank(base, fg, fq, g_ids, q_ids, cfg)
    if "confusers" in probes:
        rows += probe_confusers(fg, fq, g_ids, q_ids, cfg)
    out = Path(args.out) / "probes"
    if "misses" in probes:
        drawn = draw_misses(base, fg, fq, g_paths, g_ids, q_paths, q_ids, cfg, out / "misses.png")
        print(f"misses drawn: {drawn}" if drawn else "no known query's first photo is another whale's: nothing drawn")
    out.mkdir(parents=True, exist_ok=True)
    (out / "probes.json").write_text(json.dumps(rows, indent=2))
    print(screen_table(rows))
    best = max(rows, key=lambda r: r["map5_known"])
    print(common.final_json("humpback_probes", {"map5_known_shipped": rows[0]["map5_known"],
                                                "map5_known_best": best["map5_known"]},
                            time.perf_counter() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
