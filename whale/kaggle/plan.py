"""How many Kaggle kernel versions (and GPU hours) one fold of a config needs: an estimate.

Training time per epoch = pairs per epoch / pairs per second of the GPU, plus the mining of
each block (branch features of every image, the head on the upper triangle, the assignment).
Pairs per epoch = 2 x the images mined (one positive and one negative pair per image,
:func:`whale.training.pairs.make_epoch_pairs`). Defaults: the 15,697 known images of
Humpback Whale Identification's ``train.csv`` (a fold trains on fewer, so this is an upper
bound) and 9,040 of the PlayGround (9,850 images less its 810 ``new_whale``).

Speeds are model-only training steps measured on one H100 (Keras 3.15, JAX, mixed bfloat16,
batch 32; ``../shared/docs/gpu-notes.md``): DenseNet121 200 pairs/s at 512 px and 307 at
384 px, SE-ResNeXt50 412 at 384 px. Sizes without a figure are scaled from the nearest
measured size by pixel count. Kaggle's T4 x2 and P100 are slower than an H100: measure the
real speed from version 1's ``log.csv`` and run this again with it. It is an estimate, not a
promise::

    python -m whale.kaggle.plan --config configs/densenet121.yaml
    python -m whale.kaggle.plan --config configs/densenet121.yaml --speed 384=60 --speed 512=35
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from whale.kaggle.kernels import DEFAULT_BUDGET_HOURS, DEFAULT_SCORE_MARGIN_MINUTES

# pairs/s on one H100 by branch and image size (model only, bf16, batch 32).
H100_SPEED = {"densenet121": {384: 307.0, 512: 200.0}, "seresnext50": {384: 412.0}}
MAIN_IMAGES = 15_697        # known (not new_whale) images of the competition's train.csv
PLAYGROUND_IMAGES = 9_040   # known images of whale-categorization-playground
# One exact mining on the H100 machine: features of 15,697 images at 512 px (~31 s), the head on
# the upper triangle (11-28 s), lap.lapjv on 15,697 x 15,697 (121 s on its CPU).
MINING_SECONDS = 180.0
WEEKLY_GPU_HOURS = 30.0     # Kaggle's published weekly GPU quota


@dataclass(frozen=True)
class Estimate:
    """Hours per stage (``[(stage index, epochs, image size, dataset, pairs/s, hours)]``) and totals."""

    stages: list
    hours: float
    hours_per_version: float

    @property
    def versions(self) -> int:
        return max(1, math.ceil(self.hours / self.hours_per_version))

    @property
    def quota_weeks(self) -> float:
        return self.hours / WEEKLY_GPU_HOURS


def speed_at(size: int, speeds: dict[int, float]) -> float:
    """pairs/s at ``size``: measured, or scaled from the nearest measured size by pixel count."""
    if not speeds:
        raise ValueError("speeds: expected at least one SIZE=PAIRS_PER_SECOND figure, received none")
    if size in speeds:
        return float(speeds[size])
    near = min(speeds, key=lambda s: abs(s - size))
    return float(speeds[near]) * (near / size) ** 2


def estimate(cfg, speeds: dict[int, float], main_images: int = MAIN_IMAGES,
             playground_images: int = PLAYGROUND_IMAGES, mining_seconds: float = MINING_SECONDS,
             hours_per_version: float = DEFAULT_BUDGET_HOURS - DEFAULT_SCORE_MARGIN_MINUTES / 60) -> Estimate:
    """The GPU hours of ``cfg``'s whole schedule (one fold) and the kernel versions they need."""
    from whale.training.schedule import Schedule

    plan = Schedule.from_config(cfg)
    rows, total = [], 0.0
    for si, stage in enumerate(cfg.stages):
        images = playground_images if stage.dataset == "playground" else main_images
        rate = speed_at(stage.image_size, speeds)
        minings = sum(1 for e in plan if e.stage_index == si and e.mines)
        hours = (stage.epochs * 2 * images / rate + minings * mining_seconds) / 3600
        rows.append((si, stage.epochs, stage.image_size, stage.dataset, rate, hours))
        total += hours
    return Estimate(rows, total, float(hours_per_version))


def _speed(text: str) -> tuple[int, float]:
    size, _, rate = text.partition("=")
    try:
        return int(size), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SIZE=PAIRS_PER_SECOND, e.g. 512=200, received {text!r}") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m whale.kaggle.plan", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="configs/NAME.yaml")
    p.add_argument("--speed", type=_speed, action="append", default=[],
                   help="SIZE=PAIRS_PER_SECOND (repeatable); default: the H100 figures of the branch")
    p.add_argument("--main-images", type=int, default=MAIN_IMAGES)
    p.add_argument("--playground-images", type=int, default=PLAYGROUND_IMAGES)
    p.add_argument("--mining-seconds", type=float, default=MINING_SECONDS)
    p.add_argument("--hours-per-version", type=float,
                   default=DEFAULT_BUDGET_HOURS - DEFAULT_SCORE_MARGIN_MINUTES / 60,
                   help="training hours of one version (time budget less the scoring margin)")
    args = p.parse_args(argv)
    from whale.config import load_config

    cfg = load_config(args.config)
    speeds = dict(args.speed) or H100_SPEED.get(cfg.model.branch, {})
    if not speeds:
        print(f"{args.config}: no measured speed for branch {cfg.model.branch!r}; give --speed SIZE=PAIRS_PER_SECOND",
              file=sys.stderr)
        return 2
    est = estimate(cfg, speeds, args.main_images, args.playground_images, args.mining_seconds,
                   args.hours_per_version)
    print("stage  epochs  size  dataset     pairs/s   hours")
    for si, epochs, size, dataset, rate, hours in est.stages:
        print(f"{si:5d}  {epochs:6d}  {size:4d}  {dataset:10s}  {rate:7.0f}  {hours:6.1f}")
    print(f"{args.config}: {est.hours:.0f} GPU hours per fold = {est.versions} kernel versions of "
          f"{est.hours_per_version:g} h = {est.quota_weeks:.1f} weeks of the {WEEKLY_GPU_HOURS:g} h weekly "
          f"GPU quota (estimate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
