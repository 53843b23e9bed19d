"""Query-time settings of the keypoint matcher on one split's validation fold, the fitted selector read back. Not a test.

    python benchmarks/flukes/matcher_variants.py --out runs/hb56 --seed 0 --cache runs/hb3/keypoint-store \
        '' 'check.model=gbm' 'search.k=12 verify.shortlist=40 check.model=gbm check.both_ways=true'

Needs a finished ``benchmarks/flukes/humpback.py --out OUT --seeds SEED --methods keypoints`` run with the same
``--cache`` (its split ``OUT/seedSEED/data`` and the keypoint selector it fitted on fold 0's gallery under
``--config``, kept in the store: :mod:`whale.keypoints.selectcache`). Each setting (space-separated ``KEY=VALUE``
overrides of ``--config``) matches fold 0's validation queries against the fold's gallery with that one selector,
so the settings differ only where they act after selection (search, verification, the check); a setting that
would fit another selector (``search.k`` among them) is measured with the config's own. Validation only: the
split's test queries are never read.

Prints one JSON line per setting and a table (:func:`benchmarks.flukes.shared.validation_metrics`, the screen's
figures): known MAP@5 with ids only, the same with each whale kept to one seeded gallery photo (validation's known
whales all have two or more: ``one photo kept`` stands in for the test's whales seen once), MAP@5 with
``new_whale`` at the threshold tuned on the same queries (the toolkit's tuner), the share of queries it puts
``new_whale`` first for beside their true share, where the known queries' whales are lost (:func:`funnel`: the
shares whose whale has a gallery photo with a vote, on the shortlist, verified), and the seconds of each setting.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.flukes.shared import validation_metrics  # noqa: E402
from whale import NEW_WHALE  # noqa: E402


def funnel(votes: np.ndarray, inliers: np.ndarray, g_ids: np.ndarray, q_ids: np.ndarray, shortlist: int) -> dict:
    """Where the known queries' whales are lost, one direction of the match (``votes``, ``inliers``
    ``[queries, gallery photos]``: :class:`whale.keypoints.matcher.MatchResult`'s): the shares of the known
    queries with a gallery photo of their whale that got a vote (``voted``), that is among the ``shortlist``
    photos with most votes, ties included (``shortlisted``), that a geometric fit verified (``verified``)."""
    known = q_ids != NEW_WHALE
    votes, inliers = votes[known], inliers[known]
    own = g_ids[None, :] == q_ids[known][:, None]
    n = min(shortlist, votes.shape[1])
    cut = -np.partition(-votes, n - 1, axis=1)[:, n - 1] if n else np.full(len(votes), np.inf)
    voted = own & (votes > 0)
    return {"voted": float(voted.any(1).mean()), "shortlisted": float((voted & (votes >= cut[:, None])).any(1).mean()),
            "verified": float((own & (inliers > 0)).any(1).mean())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("settings", nargs="+", help="one string of KEY=VALUE overrides each ('' = the config as it is)")
    p.add_argument("--out", required=True, help="a benchmarks/flukes/humpback.py --out folder")
    p.add_argument("--seed", type=int, default=0, help="its split seed")
    p.add_argument("--cache", required=True, help="the feature store its keypoint run used (--cache)")
    p.add_argument("--config", default="configs/keypoints.yaml", help="the settings the selector was fitted under")
    args = p.parse_args(argv)

    from whale.config.overrides import overrides
    from whale.data import fold_data, load_competition
    from whale.keypoints.config import load_keypoint_config
    from whale.keypoints.matcher import KeypointMatcher
    from whale.keypoints.selectcache import SelectorCache
    from whale.keypoints.store import FeatureStore

    data_dir = Path(args.out) / f"seed{args.seed}" / "data"
    if not (data_dir / "train.csv").is_file():
        print(f"{data_dir}: no split; run benchmarks/flukes/humpback.py --out {args.out} --seeds {args.seed} first",
              file=sys.stderr)
        return 2
    base = load_keypoint_config(args.config)
    comp = load_competition(data_dir)
    data = fold_data(comp, 0, 0)
    store = FeatureStore(base, args.cache)
    gallery = store.features(data.gallery.paths, progress=False, boxes=data.gallery.boxes)
    g_keys = store.keys
    queries = store.features(data.val.paths, progress=False, boxes=data.val.boxes)
    q_keys = store.keys
    selector = SelectorCache(store.folder, base, g_keys, data.gallery.ids, comp.open_label).load(gallery)
    if selector is None and base.select.keep < 1:
        print(f"{store.folder / 'selectors'}: no selector of split {args.seed}'s fold 0 under {args.config}; run "
              f"benchmarks/flukes/humpback.py --out {args.out} --seeds {args.seed} --methods keypoints --cache "
              f"{args.cache} first", file=sys.stderr)
        return 2
    g_ids, q_ids = np.asarray(data.gallery.ids, dtype=str), np.asarray(data.val.ids, dtype=str)
    rng = np.random.default_rng(0)
    one = np.zeros(len(g_ids), bool)  # one seeded gallery photo per whale
    for name in np.unique(g_ids):
        one[rng.choice(np.flatnonzero(g_ids == name))] = True
    rows = []
    for setting in args.settings:
        cfg = load_keypoint_config(args.config, overrides(setting.split()))
        t0 = time.perf_counter()
        if selector is not None:
            selector.cfg = cfg.select  # the share kept applies to the scores it read back
        matcher = KeypointMatcher(cfg, gallery, g_ids, selector=selector, keys=g_keys).fit_check(g_ids, comp.open_label)
        result = matcher.match(queries, progress=False, keys=q_keys)
        scores = result.scores
        every, kept_one = validation_metrics(scores, g_ids, q_ids), validation_metrics(scores[:, one], g_ids[one], q_ids)
        row = {"setting": setting or "(the config as it is)", "known_ids_only": round(every["map5_known"], 4),
               "one_photo_kept": round(kept_one["map5_known"], 4), "tuned_map5": round(every["map5_tuned"], 4),
               "new_whale_first": round(every["new_whale_first"], 3),
               "new_whale_true": round(float((q_ids == NEW_WHALE).mean()), 3),
               **{k: round(v, 3) for k, v in funnel(result.votes, result.inliers, g_ids, q_ids,
                                                    cfg.verify.shortlist).items()},
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("| setting | known, ids only | one photo kept, ids only | MAP@5, threshold tuned | new_whale first "
          "(true) | whale voted / shortlisted / verified | seconds |\n| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['setting']} | {r['known_ids_only']:.3f} | {r['one_photo_kept']:.3f} | {r['tuned_map5']:.3f} | "
              f"{r['new_whale_first']:.3f} ({r['new_whale_true']:.3f}) | {r['voted']:.3f} / {r['shortlisted']:.3f} / "
              f"{r['verified']:.3f} | {r['seconds']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
