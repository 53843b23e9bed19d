"""Run configuration: YAML -> frozen dataclasses that reject unknown keys.

A config file describes one model variant: the branch, the batch size, how negatives are mined,
and the training schedule as a list of stages (paper Table 3: one row = one stage). Every value
is checked when the file is loaded; a bad file raises :class:`whale.errors.ConfigError` whose
message names the file, the key path (``stages[2].lr``), what was expected and what was received.

Numbers may be written as strings: PyYAML reads ``8e-5`` (no dot before the exponent) as the
string ``"8e-5"``, so numeric fields go through ``float()``/``int()``.

How the stages unroll into epochs (mining blocks, K per mining, resume) is
:mod:`whale.training.schedule`.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.errors import ConfigError
from whale.files import write_text_atomic

KNOWN_BRANCHES = (
    "densenet121",
    "seresnext50",
    "resnet50",
    "inceptionv3",
    "convnet_v1",
    "convnet_v2",
    "small",
    "tiny",
)
"""Branch names a config may use (kept here so loading a config never imports TensorFlow)."""

DATASETS = ("main", "playground")
STRATEGIES = ("auto", "mirrored", "default")
"""Device strategies (``strategy``; :mod:`whale.training.distribute`)."""
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
"""Keras dtype policies a run may train under (``precision``; :mod:`whale.models.precision`)."""
MINING_MODES = ("exact", "pruned")
CACHE_MODES = ("memory", "jpeg", "none")
"""How decoded box crops are kept (``crop_cache``; :class:`whale.data.ImageStore`)."""
STEMS = ("cadene", "timm")
"""``model.stem`` values (:data:`whale.models.seresnext.STEMS`; only ``seresnext50`` has one)."""
MIN_IMAGE_SIZE = 32
MAX_IMAGE_SIZE = 1024


# --------------------------------------------------------------------------------------------
# dataclasses


@dataclass(frozen=True)
class ModelConfig:
    """The siamese model: branch name and weights, input channels, head sizes.

    ``weights`` is ``None`` (random init), ``"imagenet"``, or a path to a weights file (for
    ``seresnext50`` one made by ``python -m whale.models.convert``; a relative path is read
    from the working directory, and a Kaggle kernel also finds it by name in an attached dataset).
    ``stem`` (``seresnext50`` only): ``"cadene"`` or ``"timm"``, the stem's max-pool layout;
    ``None`` = the one a converted weights file records, else ``"cadene"``.
    ``head_mid`` is the number of filters of the head's first Conv2D (32 in the paper's code),
    ``head_hidden`` an optional extra dense layer (0 = none).
    """

    branch: str = "densenet121"
    weights: str | None = None
    channels: int = 3
    head_mid: int = 32
    head_hidden: int = 0
    stem: str | None = None

    def branch_options(self) -> dict[str, str]:
        """Build options for :func:`whale.models.build_branch` (``{}`` = the defaults)."""
        return {"stem": self.stem} if self.stem else {}


@dataclass(frozen=True)
class Stage:
    """One row of the schedule.

    ``k`` is the noise scale K of Algorithm 1 (large = random negatives, small = hard ones);
    with ``k_end`` set, K moves linearly from ``k`` to ``k_end`` over the stage's minings.
    ``dataset`` is ``"main"`` (the competition) or ``"playground"`` (pre-training data).
    ``freeze_branch`` trains the head only (done after every image-size increase).
    ``l2`` is the weight-decay coefficient of the branch's kernels (0 = none).
    """

    epochs: int
    k: float
    lr: float
    image_size: int
    k_end: float | None = None
    dataset: str = "main"
    freeze_branch: bool = False
    l2: float = 0.0

    def n_minings(self, mining_interval: int) -> int:
        """How many times this stage mines: ``ceil(epochs / mining_interval)``."""
        return math.ceil(self.epochs / int(mining_interval))

    def k_at(self, mining_index: int, n_minings: int) -> float:
        """K for the ``mining_index``-th mining (0-based) out of ``n_minings`` in this stage.

        Linear from ``k`` (first mining) to ``k_end`` (last mining); constant ``k`` when
        ``k_end`` is None or the stage mines only once.
        """
        if n_minings < 1 or not 0 <= mining_index < n_minings:
            raise ValueError(
                f"mining_index must be in [0, n_minings) with n_minings >= 1; "
                f"received mining_index={mining_index}, n_minings={n_minings}"
            )
        if self.k_end is None or n_minings == 1:
            return float(self.k)
        t = mining_index / (n_minings - 1)
        return float(self.k + (self.k_end - self.k) * t)

    def k_for_epoch(self, epoch_in_stage: int, mining_interval: int) -> float:
        """K used by the mining that covers ``epoch_in_stage`` (0-based)."""
        if not 0 <= epoch_in_stage < self.epochs:
            raise ValueError(f"epoch_in_stage must be in [0, {self.epochs}); received {epoch_in_stage}")
        return self.k_at(epoch_in_stage // int(mining_interval), self.n_minings(mining_interval))


@dataclass(frozen=True)
class RunConfig:
    """A whole run: model, batching, mining, augmentation and the stages of the schedule.

    ``mining_interval`` n: mining happens on a stage's epochs 0, n, 2n, ...
    ``mining``: ``"exact"`` (dense score matrix + LAP) or ``"pruned"`` (``candidates`` best
    candidates per row + sparse LAP). ``box_margin``: fraction of the box size added on each side
    before cropping. ``val_new_whale``: add ~25% new_whale images to the validation fold.
    ``threshold``: new_whale threshold; ``None`` = tuned on validation.
    ``strategy``: ``auto`` (data parallel when several GPUs are visible: MirroredStrategy on
    TensorFlow, keras.distribution.DataParallel on JAX), ``mirrored`` or ``default``. ``crop_cache``: how decoded box crops are kept between epochs: ``memory``
    (fastest; ~16 GB for the full competition at 512 px), ``jpeg`` (about a tenth of that,
    decoded on access) or ``none`` (read every time); see :class:`whale.data.ImageStore`.
    ``precision``: the Keras dtype policy models are built under: ``float32`` (default),
    ``mixed_bfloat16`` (GPUs from A100 on; also CPUs) or ``mixed_float16`` (T4, P100, with
    loss scaling); the head's output, the loss and every score file stay float32.
    """

    name: str
    stages: tuple[Stage, ...]
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    batch_size: int = 32
    mining_interval: int = 5
    mining: str = "exact"
    candidates: int = 100
    box_margin: float = 0.05
    augment: bool = True
    workers: int = 1
    val_new_whale: bool = True
    threshold: float | None = None
    strategy: str = "auto"
    crop_cache: str = "memory"
    precision: str = "float32"

    @property
    def total_epochs(self) -> int:
        return sum(s.epochs for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (stages as a list) that :func:`config_from_dict` turns back into this."""
        d = dataclasses.asdict(self)
        if d["model"]["stem"] is None:
            del d["model"]["stem"]  # configs without one hash as they did before it existed
        order = ("epochs", "k", "k_end", "lr", "image_size", "dataset", "freeze_branch", "l2")
        stages = [{key: s[key] for key in order} for s in d.pop("stages")]
        d["stages"] = stages  # last, so a written config reads like the hand-written ones
        return d

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The resolved config as YAML text; also written to ``path`` when given."""
        import yaml

        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=200)
        if path is not None:
            write_text_atomic(path, text)
        return text


# --------------------------------------------------------------------------------------------
# validation helpers


class _Checker:
    """Turns raw YAML values into typed values, raising ConfigError with file and key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, expected: str, value: Any) -> ConfigError:
        return ConfigError(f"{self.source}: {path}: expected {expected}, received {value!r}")

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path or "<top level>", "a mapping", value)
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                raise ConfigError(
                    f"{self.source}: {where}: unknown key {key!r}; expected one of {', '.join(allowed)}"
                )
        for key in required:
            if key not in value:
                where = f"{path}.{key}" if path else key
                raise ConfigError(f"{self.source}: {where}: required key is missing")
        return value

    def number(self, value: Any, path: str, kind: type, lo=None, hi=None, lo_open=False) -> float | int:
        bounds = _describe_bounds(kind, lo, hi, lo_open)
        if isinstance(value, bool) or value is None:
            raise self.fail(path, bounds, value)
        try:
            if kind is int:
                if isinstance(value, float):
                    if not value.is_integer():
                        raise ValueError
                    x = int(value)
                elif isinstance(value, str):
                    f = float(value.strip())
                    if not f.is_integer():
                        raise ValueError
                    x = int(f)
                else:
                    x = int(value)
            else:
                x = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError, OverflowError):
            raise self.fail(path, bounds, value) from None
        if kind is float and not math.isfinite(x):
            raise self.fail(path, bounds, value)
        if lo is not None and (x < lo or (lo_open and x == lo)):
            raise self.fail(path, bounds, value)
        if hi is not None and x > hi:
            raise self.fail(path, bounds, value)
        return x

    def boolean(self, value: Any, path: str) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
            return value.strip().lower() in ("true", "yes")
        raise self.fail(path, "true or false", value)

    def choice(self, value: Any, path: str, options: tuple[str, ...]) -> str:
        if isinstance(value, str) and value.strip().lower() in options:
            return value.strip().lower()
        raise self.fail(path, "one of " + ", ".join(options), value)

    def string(self, value: Any, path: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, str) and value.strip():
            return value
        raise self.fail(path, "a non-empty string" + (" or null" if optional else ""), value)


def _describe_bounds(kind: type, lo, hi, lo_open) -> str:
    name = "an integer" if kind is int else "a number"
    if lo is not None and hi is not None:
        return f"{name} in [{lo}, {hi}]"
    if lo is not None:
        return f"{name} {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{name} <= {hi}"
    return name


def _fields(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(all field names, required field names) of a dataclass."""
    names, required = [], []
    for f in dataclasses.fields(cls):
        names.append(f.name)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    return tuple(names), tuple(required)


def _model(c: _Checker, raw: Any, path: str) -> ModelConfig:
    allowed, required = _fields(ModelConfig)
    raw = c.mapping({} if raw is None else raw, path, allowed, required)
    d = ModelConfig()
    branch = c.string(raw.get("branch", d.branch), f"{path}.branch").strip().lower()
    if branch not in KNOWN_BRANCHES:
        raise c.fail(f"{path}.branch", "one of " + ", ".join(KNOWN_BRANCHES), raw.get("branch"))
    channels = c.number(raw.get("channels", d.channels), f"{path}.channels", int, 1, 3)
    if channels not in (1, 3):
        raise c.fail(f"{path}.channels", "1 or 3", raw.get("channels"))
    stem = raw.get("stem")
    if stem is not None:
        stem = c.choice(stem, f"{path}.stem", STEMS)
        if branch != "seresnext50":
            raise c.fail(f"{path}.stem", "no stem for branch " + branch + " (seresnext50 only)", stem)
    return ModelConfig(
        branch=branch,
        weights=c.string(raw.get("weights", d.weights), f"{path}.weights", optional=True),
        channels=channels,
        head_mid=c.number(raw.get("head_mid", d.head_mid), f"{path}.head_mid", int, 1),
        head_hidden=c.number(raw.get("head_hidden", d.head_hidden), f"{path}.head_hidden", int, 0),
        stem=stem,
    )


def _stage(c: _Checker, raw: Any, path: str) -> Stage:
    allowed, required = _fields(Stage)
    raw = c.mapping(raw, path, allowed, required)
    k_end = raw.get("k_end")
    return Stage(
        epochs=c.number(raw["epochs"], f"{path}.epochs", int, 1),
        k=c.number(raw["k"], f"{path}.k", float, 0.0),
        k_end=None if k_end is None else c.number(k_end, f"{path}.k_end", float, 0.0),
        lr=c.number(raw["lr"], f"{path}.lr", float, 0.0, lo_open=True),
        image_size=c.number(
            raw["image_size"], f"{path}.image_size", int, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE
        ),
        dataset=c.choice(raw.get("dataset", "main"), f"{path}.dataset", DATASETS),
        freeze_branch=c.boolean(raw.get("freeze_branch", False), f"{path}.freeze_branch"),
        l2=c.number(raw.get("l2", 0.0), f"{path}.l2", float, 0.0),
    )


def config_from_dict(raw: Any, source: str = "<config>") -> RunConfig:
    """Validate a plain dict (as read from YAML) and build a :class:`RunConfig`.

    ``source`` names the origin (file path) in error messages.
    """
    c = _Checker(source)
    allowed, required = _fields(RunConfig)
    raw = c.mapping(raw, "", allowed, required)
    stages_raw = raw["stages"]
    if not isinstance(stages_raw, (list, tuple)) or not stages_raw:
        raise c.fail("stages", "a non-empty list of stages", stages_raw)
    stages = tuple(_stage(c, s, f"stages[{i}]") for i, s in enumerate(stages_raw))
    d = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}
    get = lambda key: raw.get(key, d.get(key))  # noqa: E731
    threshold = get("threshold")
    return RunConfig(
        name=c.string(raw["name"], "name"),
        stages=stages,
        seed=c.number(get("seed"), "seed", int, 0),
        model=_model(c, raw.get("model"), "model"),
        batch_size=c.number(get("batch_size"), "batch_size", int, 1),
        mining_interval=c.number(get("mining_interval"), "mining_interval", int, 1),
        mining=c.choice(get("mining"), "mining", MINING_MODES),
        candidates=c.number(get("candidates"), "candidates", int, 1),
        box_margin=c.number(get("box_margin"), "box_margin", float, 0.0, 1.0),
        augment=c.boolean(get("augment"), "augment"),
        workers=c.number(get("workers"), "workers", int, 1),
        val_new_whale=c.boolean(get("val_new_whale"), "val_new_whale"),
        threshold=None if threshold is None else c.number(threshold, "threshold", float, 0.0, 1.0),
        strategy=c.choice(get("strategy"), "strategy", STRATEGIES),
        crop_cache=c.choice(get("crop_cache"), "crop_cache", CACHE_MODES),
        precision=c.choice(get("precision"), "precision", PRECISIONS),
    )


# --------------------------------------------------------------------------------------------
# overrides and loading

_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$")


def _apply_override(raw: dict, dotted: str, value: Any, source: str) -> None:
    """Set ``raw[...]`` at a key path like ``model.branch`` or ``stages[2].lr``."""
    steps: list[str | int] = []
    for part in dotted.split("."):
        m = _PART.match(part)
        if not m:
            raise ConfigError(f"{source}: override {dotted!r}: expected a key path like stages[2].lr")
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    node: Any = raw
    for i, step in enumerate(steps[:-1]):
        nxt = steps[i + 1]
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                raise ConfigError(f"{source}: override {dotted!r}: index {step} is out of range")
            node = node[step]
        else:
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: override {dotted!r}: {step!r} is not inside a mapping")
            if node.get(step) is None:
                node[step] = [] if isinstance(nxt, int) else {}
            node = node[step]
    last = steps[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ConfigError(f"{source}: override {dotted!r}: index {last} is out of range")
        node[last] = value
    elif not isinstance(node, dict):
        raise ConfigError(f"{source}: override {dotted!r}: {last!r} is not inside a mapping")
    elif isinstance(value, dict) and isinstance(node.get(last), dict):
        for k, v in value.items():
            _apply_override(node, f"{last}.{k}", v, source)
    else:
        node[last] = value


def load_config(path: str | Path, overrides: dict | None = None) -> RunConfig:
    """Read a YAML config file, apply ``overrides``, validate, return a :class:`RunConfig`.

    ``overrides`` maps key paths to values: ``{"seed": 3, "model.branch": "tiny",
    "stages[0].epochs": 2}``; a nested dict value (``{"model": {"channels": 1}}``) is merged
    into the mapping rather than replacing it. Overridden values are validated like the file's.
    """
    import copy

    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file ({e})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: expected valid YAML, received a parse error: {e}") from None
    if raw is None:
        raw = {}
    raw = copy.deepcopy(raw)
    if overrides:
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: <top level>: expected a mapping, received {raw!r}")
        for key, value in overrides.items():
            _apply_override(raw, str(key), value, str(path))
    return config_from_dict(raw, source=str(path))



def config_hash(cfg: RunConfig) -> str:
    """A short hash (12 hex digits) of the resolved config: equal hashes, equal configs."""
    import hashlib

    return hashlib.sha256(cfg.to_yaml().encode("utf-8")).hexdigest()[:12]
