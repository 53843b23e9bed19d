"""What a fold costs: the schedule stage by stage and the hours it takes at measured rates.

``python run_fold.py --config X --data DIR --plan [--rates FILE]`` prints, for each stage of
:class:`whale.training.schedule.Schedule`: epochs, image size, the pairs one epoch trains on
(two per training image of the fold: one positive, one mined negative; the playground's for
``dataset: playground`` stages) and the minings; and, given a rates file, the hours.

Rates file (JSON, written by ``benchmarks/bench_train.py``)::

    {"device": "...", "rates": [{"branch": "densenet121", "image_size": 384,
      "precision": "mixed_bfloat16", "model_pairs_s": 307.0, "end_to_end_pairs_s": 280.0}, ...]}

A stage uses the end-to-end rate of its branch, precision and image size when there is one,
else the model-only rate; an image size that was not measured is scaled from the nearest
measured one by pixel count (rate x (S_measured / S)^2). Hours count training only: mining
(features, head matrix, assignment) and validation come on top.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from whale.config import RunConfig
from whale.errors import ConfigError
from whale.training.schedule import Schedule

__all__ = ["StagePlan", "plan_fold", "load_rates", "format_plan"]


@dataclass(frozen=True)
class StagePlan:
    """One stage's share of a fold: ``hours`` is ``None`` without a rate."""

    stage: int
    epochs: int
    image_size: int
    dataset: str
    pairs_per_epoch: int
    minings: int
    pairs_s: float | None
    rate_source: str
    hours: float | None


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


def _rate(rates: list[dict], branch: str, precision: str, size: int) -> tuple[float | None, str]:
    """Pairs/s for one stage and where it came from."""
    same = [r for r in rates if r["branch"] == branch and r["precision"] == precision]
    if not same:
        return None, f"no rate for {branch} {precision}"
    r = min(same, key=lambda r: (abs(int(r["image_size"]) - size), -int(r["image_size"])))
    kind = "end_to_end" if r.get("end_to_end_pairs_s") else "model"
    rate = float(r[f"{kind}_pairs_s"]) * (int(r["image_size"]) / size) ** 2
    scaled = "" if int(r["image_size"]) == size else f" scaled from {r['image_size']} px"
    return rate, f"{kind}{scaled}"


def plan_fold(cfg: RunConfig, pair_images: dict[str, int], rates: list[dict] | None = None) -> list[StagePlan]:
    """The cost of each stage of ``cfg``'s schedule.

    Args:
        cfg: the run's config.
        pair_images: training images per dataset (``{"main": n, "playground": m}``): the
            ``pairs`` of the fold's :class:`whale.data.FoldData`.
        rates: entries of :func:`load_rates`, or ``None`` (no hours).
    """
    schedule = Schedule.from_config(cfg)
    out = []
    for index, stage in enumerate(cfg.stages):
        epochs = [ep for ep in schedule if ep.stage_index == index]
        if stage.dataset not in pair_images:
            raise ConfigError(f"stages[{index}].dataset: {stage.dataset!r} has no data (give --playground)")
        pairs = 2 * int(pair_images[stage.dataset])
        rate, source = _rate(rates, cfg.model.branch, cfg.precision, stage.image_size) if rates else (None, "")
        hours = stage.epochs * pairs / rate / 3600 if rate else None
        out.append(StagePlan(index + 1, stage.epochs, stage.image_size, stage.dataset, pairs,
                             sum(ep.mines for ep in epochs), rate, source, hours))
    return out


def format_plan(cfg: RunConfig, plan: list[StagePlan], rates_file: str | None = None) -> str:
    """The plan as a text table, with the total and a line on what the hours cover."""
    lines = [f"{cfg.name}: {cfg.model.branch}, precision {cfg.precision}, batch {cfg.batch_size}, "
             f"mining every {cfg.mining_interval} epochs ({cfg.mining})",
             f"{'stage':>5} {'epochs':>6} {'size':>5} {'dataset':>10} {'pairs/epoch':>11} {'minings':>7} "
             f"{'pairs/s':>8} {'hours':>7}  rate"]
    for p in plan:
        rate = f"{p.pairs_s:8.1f}" if p.pairs_s else f"{'-':>8}"
        hours = f"{p.hours:7.2f}" if p.hours is not None else f"{'-':>7}"
        lines.append(f"{p.stage:>5} {p.epochs:>6} {p.image_size:>5} {p.dataset:>10} {p.pairs_per_epoch:>11} "
                     f"{p.minings:>7} {rate} {hours}  {p.rate_source}")
    epochs = sum(p.epochs for p in plan)
    pairs = sum(p.epochs * p.pairs_per_epoch for p in plan)
    minings = sum(p.minings for p in plan)
    if rates_file is None:
        total = "no estimate of hours: pass --rates FILE (written by benchmarks/bench_train.py)"
    elif any(p.hours is None for p in plan):
        total = f"no estimate of hours: {rates_file} has no rate for {cfg.model.branch} {cfg.precision}"
    else:
        total = (f"estimated {sum(p.hours for p in plan):.1f} h per fold of training at the rates in "
                 f"{rates_file} (mining and validation not included)")
    lines.append(f"total: {epochs} epochs, {pairs:,} pairs, {minings} minings; {total}")
    return "\n".join(lines)
