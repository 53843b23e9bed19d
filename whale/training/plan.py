"""What a fold costs: the schedule stage by stage, the hours it takes and, on Kaggle, the kernel
versions and weeks of GPU quota those hours need. The one planner of the toolkit.

``python run_fold.py --config X --data DIR --plan [--rates FILE] [--slowdown F]
[--mining-seconds S] [--hours-per-version H]`` prints, for each stage of
:class:`whale.training.schedule.Schedule`: epochs, image size, the pairs one epoch trains on
(two per training image of the fold: one positive, one mined negative; the playground's for
``dataset: playground`` stages) and the minings; and, given a rates file, the hours.

Rates file (JSON, written by ``benchmarks/speed/bench_train.py``)::

    {"device": "...", "rates": [{"branch": "densenet121", "image_size": 384,
      "precision": "mixed_bfloat16", "model_pairs_s": 307.0, "end_to_end_pairs_s": 280.0}, ...]}

A stage uses the end-to-end rate (pairs/s) of its branch, precision and image size when there
is one, else the model-only rate; an image size that was not measured is scaled from the
nearest measured one by pixel count (rate x (S_measured / S)^2).

Hours of one stage = epochs x pairs per epoch / rate / 3600 x ``slowdown`` + minings x
``mining_seconds`` / 3600. ``slowdown`` (default 1) is the estimated ratio of the planned GPU's
time to the rates file's GPU's time; the docs use published memory bandwidth against an H100
(P100 x4.6, T4 x10.5, 2 x T4 x5.8). ``mining_seconds`` (default 0: mining not included) is the
wall-clock seconds of one mining (features, head matrix, assignment) on the planned machine; it
is not scaled. Validation is never included. The total in hours then becomes kernel versions of
``hours_per_version`` hours (ceil) and weeks of Kaggle's weekly GPU quota.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from whale.config import STEMS, RunConfig
from whale.core.errors import ConfigError
from whale.training.pretrain import pretrain_stage_count
from whale.training.schedule import Schedule, sized_config

__all__ = ["StagePlan", "FoldCost", "plan_fold", "fold_cost", "load_rates", "format_plan", "pretrain_saving",
           "KERNEL_HOURS_PER_VERSION", "WEEKLY_GPU_HOURS"]

# Training hours of one Kaggle kernel version: whale.kaggle.kernels' time budget (8.5 h) less its
# scoring margin (45 min). Repeated here because whale.training must not import whale.kaggle;
# tests/test_plan.py checks the two agree.
KERNEL_HOURS_PER_VERSION = 8.5 - 45.0 / 60.0
WEEKLY_GPU_HOURS = 30.0  # Kaggle's published weekly GPU quota, hours


@dataclass(frozen=True)
class StagePlan:
    """One stage's share of a fold. ``pairs_s``: pairs/s on the rates file's GPU;
    ``train_hours`` (x slowdown) and ``mining_hours``: hours, ``None`` without a rate."""

    stage: int
    epochs: int
    image_size: int
    dataset: str
    pairs_per_epoch: int
    minings: int
    pairs_s: float | None
    rate_source: str
    train_hours: float | None
    mining_hours: float | None = None

    @property
    def hours(self) -> float | None:
        """Training plus mining, hours; ``None`` without a rate."""
        return None if self.train_hours is None else self.train_hours + (self.mining_hours or 0.0)


@dataclass(frozen=True)
class FoldCost:
    """A fold's total: ``train_hours`` + ``mining_hours`` = ``hours``; ``versions``: Kaggle kernel
    versions of ``hours_per_version`` hours each (at least 1); ``quota_weeks``: ``hours`` / 30 h."""

    train_hours: float
    mining_hours: float
    hours_per_version: float

    @property
    def hours(self) -> float:
        return self.train_hours + self.mining_hours

    @property
    def versions(self) -> int:
        return max(1, math.ceil(self.hours / self.hours_per_version))

    @property
    def quota_weeks(self) -> float:
        return self.hours / WEEKLY_GPU_HOURS


def load_rates(path) -> list[dict]:
    """The ``rates`` list of a rates file; each entry has branch, image_size, precision and a rate.

    Raises:
        ConfigError: the file is missing, is not JSON, or an entry lacks a field (names the file).
    """
    path = Path(path)
    try:
        rates = json.loads(path.read_text())["rates"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{path}: expected a rates JSON with a 'rates' list ({type(err).__name__}: {err})") from err
    for i, r in enumerate(rates):
        missing = [k for k in ("branch", "image_size", "precision") if k not in r]
        if missing or not (r.get("end_to_end_pairs_s") or r.get("model_pairs_s")):
            raise ConfigError(f"{path}: rates[{i}] lacks {missing or 'a model_pairs_s or end_to_end_pairs_s'}")
    return rates


def _stem(branch: str, stem: str | None) -> str | None:
    return stem or STEMS.get(branch, (None,))[0]


def _rate(rates: list[dict], branch: str, precision: str, size: int,
          stem: str | None = None, batching: str = "pairs") -> tuple[float | None, str]:
    """Pairs/s for one stage and where it came from (an entry without ``stem``: the branch's default;
    one without ``batching``: the paper's pair batches)."""
    same = [r for r in rates if r["branch"] == branch and r["precision"] == precision
            and _stem(branch, r.get("stem")) == _stem(branch, stem) and r.get("batching", "pairs") == batching]
    if not same:
        return None, f"no rate for {branch} {precision}" + ("" if batching == "pairs" else f" batching {batching}")
    r = min(same, key=lambda r: (abs(int(r["image_size"]) - size), -int(r["image_size"])))
    kind = "end_to_end" if r.get("end_to_end_pairs_s") else "model"
    rate = float(r[f"{kind}_pairs_s"]) * (int(r["image_size"]) / size) ** 2
    scaled = "" if int(r["image_size"]) == size else f" scaled from {r['image_size']} px"
    return rate, f"{kind}{scaled}"


def plan_fold(cfg: RunConfig, pair_images: dict[str, int], rates: list[dict] | None = None,
              slowdown: float = 1.0, mining_seconds: float = 0.0) -> list[StagePlan]:
    """The cost of each stage of ``cfg``'s schedule.

    Args:
        cfg: the run's config.
        pair_images: training images per dataset (``{"main": n, "playground": m}``): the
            ``pairs`` of the fold's :class:`whale.data.FoldData`.
        rates: entries of :func:`load_rates`, or ``None`` (no hours).
        slowdown: training hours are multiplied by it (planned GPU vs the rates file's; > 0).
        mining_seconds: seconds per mining on the planned machine (>= 0; 0: not counted).
    """
    if not slowdown > 0 or not mining_seconds >= 0:
        raise ConfigError(f"--slowdown must be > 0 and --mining-seconds >= 0, received {slowdown}, {mining_seconds}")
    cfg = sized_config(cfg, pair_images)
    schedule = Schedule.from_config(cfg)
    out = []
    for index, stage in enumerate(cfg.stages):
        minings = sum(ep.mines for ep in schedule if ep.stage_index == index)
        if stage.dataset not in pair_images:
            raise ConfigError(f"stages[{index}].dataset: {stage.dataset!r} has no data (give --playground; "
                              "a homography stage needs --data or homography.photos)")
        pairs = 2 * int(pair_images[stage.dataset])
        rate, source = (_rate(rates, cfg.model.branch, cfg.precision, stage.image_size, cfg.model.stem, cfg.batching)
                        if rates else (None, ""))
        if rate and cfg.aspect != 1:  # an input of aspect a has a times the pixels of the square
            rate, source = rate / cfg.aspect, f"{source}, / aspect {cfg.aspect:g}"
        train = stage.epochs * pairs / rate / 3600 * slowdown if rate else None
        mining = minings * mining_seconds / 3600 if rate else None
        out.append(StagePlan(index + 1, stage.epochs, stage.image_size, stage.dataset, pairs, minings,
                             rate, source, train, mining))
    return out


def fold_cost(plan: list[StagePlan], hours_per_version: float = KERNEL_HOURS_PER_VERSION) -> FoldCost | None:
    """The fold's total hours, kernel versions and quota weeks; ``None`` when a stage has no rate."""
    if not hours_per_version > 0:
        raise ConfigError(f"--hours-per-version must be > 0, received {hours_per_version}")
    if any(p.train_hours is None for p in plan):
        return None
    return FoldCost(sum(p.train_hours for p in plan), sum(p.mining_hours for p in plan), float(hours_per_version))


def format_plan(cfg: RunConfig, plan: list[StagePlan], rates_file: str | None = None, *, slowdown: float = 1.0,
                mining_seconds: float = 0.0, hours_per_version: float = KERNEL_HOURS_PER_VERSION) -> str:
    """The plan as a text table, the total, what the hours cover and, with hours, the kernel
    versions of ``hours_per_version`` hours and weeks of the 30 h weekly GPU quota they need."""
    lines = [f"{cfg.name}: {cfg.model.branch}, precision {cfg.precision}, batch {cfg.batch_size}, "
             f"mining every {cfg.mining_interval} epochs ({cfg.mining})",
             f"{'stage':>5} {'epochs':>6} {'size':>5} {'dataset':>10} {'pairs/epoch':>11} {'minings':>7} "
             f"{'pairs/s':>8} {'hours':>7}  rate"]
    for p in plan:
        rate = f"{p.pairs_s:8.1f}" if p.pairs_s else f"{'-':>8}"
        hours = f"{p.hours:7.3f}" if p.hours is not None else f"{'-':>7}"
        lines.append(f"{p.stage:>5} {p.epochs:>6} {p.image_size:>5} {p.dataset:>10} {p.pairs_per_epoch:>11} "
                     f"{p.minings:>7} {rate} {hours}  {p.rate_source}")
    epochs = sum(p.epochs for p in plan)
    pairs = sum(p.epochs * p.pairs_per_epoch for p in plan)
    minings = sum(p.minings for p in plan)
    cost = fold_cost(plan, hours_per_version)
    if rates_file is None:
        total = "no estimate of hours: pass --rates FILE (written by benchmarks/speed/bench_train.py)"
    elif cost is None:
        total = f"no estimate of hours: {rates_file} has no rate for {cfg.model.branch} {cfg.precision}"
    else:
        scaled = "" if slowdown == 1 else f" x {slowdown:g} (--slowdown)"
        mined = (f" + {cost.mining_hours:.1f} h of mining ({minings} x {mining_seconds:g} s)" if mining_seconds
                 else "; mining not included (--mining-seconds)")
        minutes = f" ({cost.hours * 60:.1f} minutes in all)" if cost.hours < 1 else ""
        total = (f"estimated {cost.hours:.1f} h per fold: {cost.train_hours:.1f} h of training at the rates in "
                 f"{rates_file}{scaled}{mined}; validation not included{minutes}")
    lines.append(f"total: {epochs} epochs, {pairs:,} pairs, {minings} minings; {total}")
    if rates_file is not None and cost is not None:
        lines.append(f"= {cost.versions} kernel versions of {cost.hours_per_version:g} h = {cost.quota_weeks:.1f} "
                     f"weeks of the {WEEKLY_GPU_HOURS:g} h weekly GPU quota (Kaggle's published figure)")
    saving = pretrain_saving(cfg, plan, hours_per_version=hours_per_version)
    return "\n".join(lines + ([saving] if saving else []))


def pretrain_saving(cfg: RunConfig, plan: list[StagePlan], folds: int = 4,
                    hours_per_version: float = KERNEL_HOURS_PER_VERSION) -> str | None:
    """What training the leading PlayGround stages once (``--pretrain`` + ``--init-from``) saves
    over ``folds`` folds that each train them; None when the schedule has no such stages."""
    n = pretrain_stage_count(cfg)
    if n == 0 or n == len(plan):
        return None
    pre, rest = plan[:n], plan[n:]
    e_pre, e_rest = sum(p.epochs for p in pre), sum(p.epochs for p in rest)
    once, each = e_pre + folds * e_rest, folds * (e_pre + e_rest)
    text = (f"PlayGround once: stages 1-{n} ({e_pre} epochs) are the same in every fold; trained once "
            f"(--pretrain) and started from (--init-from), {folds} folds take {e_pre} + {folds} x {e_rest} = "
            f"{once} epochs instead of {folds} x {e_pre + e_rest} = {each}: {each - once} epochs "
            f"({(each - once) / each:.0%}) fewer")
    cost_pre, cost_rest = fold_cost(pre, hours_per_version), fold_cost(rest, hours_per_version)
    if cost_pre is None or cost_rest is None:
        return text
    h_once, h_each = cost_pre.hours + folds * cost_rest.hours, folds * (cost_pre.hours + cost_rest.hours)
    return (text + f"; {h_once:.1f} h instead of {h_each:.1f} h ({h_each - h_once:.1f} h = "
            f"{(h_each - h_once) / WEEKLY_GPU_HOURS:.1f} weeks of the weekly GPU quota saved)")
