"""The real flukes' splits, packed small enough to travel to a lent GPU. Not a test.

    python benchmarks/flukes/humpback_pack.py --out .humpback_pack --seeds 0,1,2

A GPU machine takes at most 64 MiB of files a call, and ``../shared/data/humpback`` does not travel. The pack
holds each photo of the source once, as the training stores it (:func:`whale.data.images.load_crop`: its content,
the white padding cut, with the config's margin, resized to the stored crop of the training input), gray and
encoded as WebP; and for every split seed of :mod:`benchmarks.flukes.humpback` the competition folder's rows naming
those photos (``splits/seed<N>.csv``: ``Image, Id, set, photo``; ``set`` is ``train`` or ``test``, a test row's
``Id`` its truth). The photos are spread over ``part1/`` and ``part2/`` so that each fits one device call beside
the wheels: the first call carries ``part1`` (and the wheels), the second ``part2``; the warm machine keeps what
the first call brought (docs/gpu.md, "The real flukes, fine-tuned").

There, :func:`benchmarks.flukes.shared.materialize` builds split ``N``'s competition folder (``train/``,
``test/``, ``train.csv``, ``test_solution.csv``) from the pack with hard links: the same image names, ids and folds
as the folder that :func:`benchmarks.flukes.shared.build_split` writes here, the photos already cropped (train
there with ``crop: box`` and ``box_margin: 0``). The pack's code is :mod:`benchmarks.flukes.shared`'s; this script
is its command. Scores made there are remade here from the returned checkpoint on the original photos
(``benchmarks/flukes/humpback.py --gpu-runs``).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common, harness  # noqa: E402
from benchmarks.flukes.shared import FIRST_PART_BYTES, pack, tar_parts  # noqa: E402


def crop_shape(config: str) -> tuple[int, int]:
    """``(height, width)`` of the crop the training stores for ``config``'s largest stage."""
    from whale.config import load_config
    from whale.data import crop_size_for
    from whale.imagesize import as_hw, input_size

    cfg = load_config(config)
    return as_hw(crop_size_for(input_size(max(s.image_size for s in cfg.stages), cfg.aspect)))


def main(argv=None) -> int:
    p = harness.parser(__doc__, "the pack's folder (git-ignored: .humpback_pack)")
    p.add_argument("--seeds", default="0,1,2", help="split seeds (benchmarks/flukes/humpback.py --seeds)")
    p.add_argument("--config", default="configs/flukes_lite0_gpu.yaml", help="the crop's shape: this config's")
    p.add_argument("--quality", type=int, default=60, help="WebP quality")
    p.add_argument("--first-part-mib", type=float, default=FIRST_PART_BYTES / 2**20)
    args = p.parse_args(argv)
    source = harness.shared_source("humpback", "pack")
    if source is None:
        return 0
    t0 = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",")]
    info = pack(source, Path(args.out), seeds, crop_shape(args.config), quality=args.quality,
                first_part_bytes=int(args.first_part_mib * 2**20))
    tars = tar_parts(Path(args.out))
    print(f"carry {args.out}/part1.tar ({tars['part1'] / 2**20:.1f} MiB) with .whl in the first call, "
          f"{args.out}/part2.tar ({tars['part2'] / 2**20:.1f} MiB) in the second (docs/gpu.md)")
    print(common.final_json("humpback_pack", {"photos": info["photos"],
                                              **{f"{k}_tar_mib": v / 2**20 for k, v in tars.items()}},
                            time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
