"""Score folders' validation thinned as the test is drawn, without a joint run. Not a test.

    python benchmarks/flukes/thin_views.py --out 'runs/hbthin3/seed{S}' --seeds 0,1,2 \
        --run sift='runs/hbk/seed{S}/keypoints' --run xc='runs/hbx/seed{S}/keypoints' \
        --run long='runs/hbh/seed{S}/learned-flukes_lite0_cpu_long'

Fold 0's validation queries each keep two or more gallery photos of their individual, where a test query's may keep
one, so a fusion setting chosen there is chosen without the test's one-photo whales (docs/humpback.md, "A validation
with one-photo whales"). For each split seed ``S`` this writes ``OUT/NAME``, each run's **thinned view**
(:func:`whale.identify.thin.write_views`): its ``val.npz`` with the photos :func:`whale.identify.thin.hidden_photos`
hides from each known query (the share a split drawn as the test's gives, :func:`whale.identify.thin.mirror_share`;
the draw seeded by ``S``, as ``joint_thin.py`` seeds it) scored at its row's lowest, its ``test.npz`` linked as it
is. Every run of a seed hides the same photos; the runs must share fold 0's validation queries and gallery.
``benchmarks/flukes/humpback_fuse.py`` then fuses the views, its validation column read on the thinned validation.
The last stdout line is JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.flukes.humpback_fuse import parse_runs  # noqa: E402
from whale.identify.thin import hidden_names, hidden_photos, mirror_share, write_views  # noqa: E402
from whale.inference.scorefile import read_header, score_path  # noqa: E402


def thin_seed(runs: dict[str, Path], out: Path, seed: int) -> dict:
    """Each run's thinned view under ``out``, the same photos hidden in each; what was hidden, in figures."""
    files = {name: read_header(score_path(run, "val"), need_query_ids=True)  # the names: write_views reads each
             for name, run in runs.items()}                                  # matrix once
    first_name, first = next(iter(files.items()))
    for name, f in files.items():
        if list(map(str, f["query"])) != list(map(str, first["query"])) or \
                sorted(map(str, f["gallery"])) != sorted(map(str, first["gallery"])):
            raise SystemExit(f"{score_path(runs[name], 'val')}: not the validation queries and gallery of "
                             f"{score_path(runs[first_name], 'val')}: another split or fold")
    gallery_ids, truth = np.asarray(first["gallery_ids"], str), np.asarray(first["query_ids"], str)
    share = mirror_share(gallery_ids)
    hidden = hidden_photos(gallery_ids, truth, share, seed)
    names = hidden_names(hidden, first["query"], first["gallery"])
    write_views(runs, out, names, share, seed)
    known = int((truth != "new_whale").sum())
    print(f"seed {seed}: share {share:.3f}: {len(hidden)} of {known} known validation queries keep one gallery "
          f"photo; views of {', '.join(runs)} in {out}", flush=True)
    return {"share": share, "thinned": len(hidden), "known": known}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the views' folder of a seed, {S} for the seed")
    p.add_argument("--seeds", default="0", help="comma-separated split seeds (default 0)")
    p.add_argument("--run", action="append", default=[], metavar="NAME=PATH", help="a score folder, {S} for the seed")
    args = p.parse_args(argv)
    runs = parse_runs(args.run)
    if not runs:
        raise SystemExit("--run NAME=PATH: at least one score folder")
    seeds = [int(s) for s in args.seeds.split(",")]
    record = {s: thin_seed({n: Path(r.format(S=s)) for n, r in runs.items()}, Path(args.out.format(S=s)), s)
              for s in seeds}
    print(json.dumps({"benchmark": "thin_views", "seeds": record}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
