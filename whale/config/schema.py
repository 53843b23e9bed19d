"""The run config's schema: YAML -> frozen dataclasses that reject unknown keys.

A config file describes one model variant: the branch, the batch size, how negatives are mined,
and the training schedule as a list of stages (paper Table 3: one row = one stage). Every value
is checked when the file is loaded; a bad file raises :class:`whale.core.errors.ConfigError` whose
message names the file, the key path (``stages[2].lr``), what was expected and what was received.

Numbers may be written as strings: PyYAML reads ``8e-5`` (no dot before the exponent) as the
string ``"8e-5"``, so numeric fields go through ``float()``/``int()``.

How the stages unroll into epochs (mining blocks, K per mining, resume) is
:mod:`whale.training.schedule`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.config.checker import Checker, refuse_scoring_config
from whale.config.homography import HomographyConfig, homography_stage, parse_homography
from whale.config.inputs import parse_crop_aspect
from whale.config.objectives import BatchConfig, ObjectiveConfig, parse_batch, parse_objective
from whale.config.overrides import apply_override
from whale.config.trunk import TrunkConfig, parse_trunk
from whale.core.errors import ConfigError
from whale.core.files import write_text_atomic

KNOWN_BRANCHES = ("densenet121", "seresnext50", "resnet50", "inceptionv3", "efficientnet_lite0", "efficientnet_lite1",
                  "efficientnet_lite2", "convnet_v1", "convnet_v2", "small", "tiny")
"""Branch names a config may use (kept here so loading a config never imports TensorFlow)."""

DATASETS = ("main", "playground", "homography")
"""What a stage trains on (``stages[].dataset``); ``homography``: :mod:`whale.data.unlabelled`."""
STRATEGIES = ("auto", "mirrored", "default")
"""Device strategies (``strategy``; :mod:`whale.training.distribute`)."""
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
"""Keras dtype policies a run may train under (``precision``; :mod:`whale.models.precision`)."""
MINING_MODES = ("exact", "pruned", "auto")  # auto: exact up to whale.mining.AUTO_EXACT_MAX images, pruned above
BATCHINGS = ("pairs", "images")  # batching: the paper's pair batches / whale.training.imagebatches
CACHE_MODES = ("memory", "jpeg", "none")
"""How decoded box crops are kept (``crop_cache``; :class:`whale.data.ImageStore`)."""
AUGMENT_STYLES = ("paper", "koch")  # whale.data.augment: photo pipeline / Koch et al.'s affine
TTA_VIEWS = ("shift_left", "shift_right", "zoom", "bright", "dark")
"""Deterministic test-time views besides the plain one (``tta``; :func:`whale.data.augment.build_view`)."""
TTA_MODES = ("features", "scores")
LENGTH_KEYS = ("epochs", "steps", "pairs")  # how a stage's length may be given: exactly one per stage
STEMS = {"seresnext50": ("cadene", "timm"), "small": ("conv", "pool")}  # model.stem per branch (the registry's)
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
    ``stem`` (:data:`STEMS`): ``seresnext50``'s max-pool layout (``None`` = a converted weights
    file's, else ``"cadene"``); ``small``'s ``"pool"`` adds a 2x2 max pooling after its stem.
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
    ``dataset`` is ``"main"`` (the competition), ``"playground"`` (pre-training data) or
    ``"homography"`` (self-supervised pairs of unlabelled photos: two random homographies of one
    photo against two different photos, :mod:`whale.data.unlabelled`; random negatives, K unused).
    ``freeze_branch`` trains the head only (done after every image-size increase).
    ``l2`` is the weight-decay coefficient of the branch's kernels (0 = none).
    ``snapshot`` keeps the model as it is at the end of this stage (checkpoint ``snapshot-<image_size>``) and
    scores it into ``scores/<image_size>/``: one schedule then yields one model per size (e.g. ConvNet v1 at 384,
    768 and 1024), each an ensemble input. Length: exactly one of ``epochs``, ``steps`` (optimiser steps) or
    ``pairs`` (pairs seen); :func:`whale.training.schedule.sized_config` turns the last two into ``epochs``."""

    epochs: int | None
    k: float
    lr: float
    image_size: int
    k_end: float | None = None
    dataset: str = "main"
    freeze_branch: bool = False
    l2: float = 0.0
    steps: int | None = None
    pairs: int | None = None
    snapshot: bool = False

    @property
    def snapshot_name(self) -> str | None:
        """``"384"`` for a ``snapshot: true`` stage at 384 px (its ``scores/`` subfolder), else None."""
        return str(self.image_size) if self.snapshot else None

    def __post_init__(self):
        if sum(getattr(self, key) is not None for key in LENGTH_KEYS) != 1:
            raise ValueError(f"a stage needs exactly one of {', '.join(LENGTH_KEYS)}; received {self}")

    @property
    def sized(self) -> bool:
        """True when the stage's length is in epochs."""
        return self.epochs is not None

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
    ``negatives_mix``: share of each epoch's mined negatives swapped for random ones (0, the
    paper's Algorithm 1 alone, by default; see :mod:`whale.mining.mixing`).
    ``batching``: ``pairs`` (the paper's: a batch of B pairs runs the branch on 2B images) or
    ``images`` (B images per batch shared by B pairs: about half the branch's work for the same
    pairs; one device: ``strategy: auto`` picks one; :mod:`whale.training.imagebatches`).
    ``augment_style``: ``paper`` (the paper's photo augmentation) or ``koch`` (Koch et al.'s
    affine distortions, for line drawings such as Omniglot); see :mod:`whale.data.augment`.
    ``precision``: the Keras dtype policy models are built under: ``float32`` (default),
    ``mixed_bfloat16`` (GPUs from A100 on; also CPUs) or ``mixed_float16`` (T4, P100, with
    loss scaling); the head's output, the loss and every score file stay float32.
    ``init_from``: ``RUN_DIR[:checkpoint]`` of a finished run (e.g. the PlayGround pre-training of
    ``run_fold.py --pretrain``) whose stages are the first stages of this schedule: a new run
    starts from its model after those stages instead of training them again
    (:mod:`whale.training.pretrain`).
    ``flip_ids``: a mirrored image of id ``w`` trains as a sighting of a new id ``w_flip``
    (:meth:`whale.data.ImageSet.with_mirrors`), and scoring averages each score with the mirrored
    query's score against the mirrored gallery. ``tta``: extra deterministic views of every
    scored image (:data:`TTA_VIEWS`); ``tta_mode``: average their ``features`` (one head pass)
    or their head ``scores`` (one pass per view). All off by default.
    ``homography``: the photos and strength of ``dataset: homography`` stages (:class:`HomographyConfig`).
    ``crop``, ``aspect`` (width / height of the input; ``image_size``: its height): :mod:`whale.config.inputs`;
    ``trunk``: :mod:`whale.config.trunk`."""

    name: str
    stages: tuple[Stage, ...]
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    batch_size: int = 32
    mining_interval: int = 5
    mining: str = "exact"
    candidates: int = 100
    negatives_mix: float = 0.0
    batching: str = "pairs"
    box_margin: float = 0.05
    augment: bool = True
    augment_style: str = "paper"
    workers: int = 1
    val_new_whale: bool = True
    threshold: float | None = None
    strategy: str = "auto"
    crop_cache: str = "memory"
    precision: str = "float32"
    init_from: str | None = None
    flip_ids: bool = False
    tta: tuple[str, ...] = ()
    tta_mode: str = "features"
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    batch: BatchConfig | None = None  # P x K; set (defaults filled) exactly when the objective needs it
    homography: HomographyConfig = field(default_factory=HomographyConfig)
    crop: str = "box"
    aspect: float = 1.0
    trunk: TrunkConfig = field(default_factory=TrunkConfig)

    @property
    def total_epochs(self) -> int:
        """Epochs of the whole schedule (ConfigError while a stage is in steps or pairs)."""
        for i in (i for i, s in enumerate(self.stages) if not s.sized):
            raise ConfigError(f"{self.name}: stages[{i}] is given in steps or pairs; its epochs depend "
                              "on the training set's size (whale.training.schedule.sized_config)")
        return sum(s.epochs for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (stages as a list, each with its one length key) that
        :func:`config_from_dict` turns back into this."""
        d = dataclasses.asdict(self)
        if d["model"]["stem"] is None:
            del d["model"]["stem"]  # configs without one hash as they did before it existed
        order = ("epochs", "steps", "pairs", "k", "k_end", "lr", "image_size", "dataset", "freeze_branch", "l2",
                 "snapshot")
        # Keys added later are written only when set, so configs without them keep their hash.
        stages = [{key: s[key] for key in order
                   if (key not in LENGTH_KEYS or s[key] is not None) and (key != "snapshot" or s[key])}
                  for s in d.pop("stages")]
        d["tta"] = list(d["tta"])
        d["homography"]["photos"] = list(d["homography"]["photos"])
        d["objective"] = self.objective.written()
        if d["objective"] == {"name": "head"}:
            d["objective"] = "head"
        d["trunk"] = {k: v for k, v in d["trunk"].items() if k != "gallery_views" or v}  # added later: when set
        for key, default in _ADDED_LATER.items():
            if d[key] == default:
                del d[key]
        d["stages"] = stages  # last, so a written config reads like the hand-written ones
        return d

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The resolved config as YAML text; also written to ``path`` when given."""
        import yaml

        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=200)
        if path is not None:
            write_text_atomic(path, text)
        return text


_ADDED_LATER = {"init_from": None, "augment_style": "paper", "negatives_mix": 0.0, "batching": "pairs",
                "flip_ids": False, "tta": [], "tta_mode": "features", "objective": "head", "batch": None,
                "homography": {"photos": [], "R": HomographyConfig.R, "phi": HomographyConfig.phi}, "crop": "box",
                "aspect": 1.0, "trunk": {"layer": None, "views": TrunkConfig.views}}
# ^ run keys added after the first runs: written only when not at their default (same hash as before)


# --------------------------------------------------------------------------------------------
# validation helpers (the typed reads are whale.config.checker.Checker)


def dataclass_fields(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(all field names, required field names) of a dataclass."""
    names, required = [], []
    for f in dataclasses.fields(cls):
        names.append(f.name)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    return tuple(names), tuple(required)


def _model(c: Checker, raw: Any, path: str) -> ModelConfig:
    allowed, required = dataclass_fields(ModelConfig)
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
        if branch not in STEMS:
            raise c.fail(f"{path}.stem", f"no stem for branch {branch} ({' and '.join(STEMS)} only)", stem)
        stem = c.choice(stem, f"{path}.stem", STEMS[branch])
    return ModelConfig(
        branch=branch,
        weights=c.string(raw.get("weights", d.weights), f"{path}.weights", optional=True),
        channels=channels,
        head_mid=c.number(raw.get("head_mid", d.head_mid), f"{path}.head_mid", int, 1),
        head_hidden=c.number(raw.get("head_hidden", d.head_hidden), f"{path}.head_hidden", int, 0),
        stem=stem,
    )


def _stage(c: Checker, raw: Any, path: str) -> Stage:
    allowed, required = dataclass_fields(Stage)
    homography = isinstance(raw, dict) and raw.get("dataset") == "homography"
    raw = c.mapping(raw, path, allowed, tuple(r for r in required if r not in LENGTH_KEYS
                                              and not (homography and r == "k")))
    if homography:
        raw = homography_stage(c, raw, path)
    given = [key for key in LENGTH_KEYS if raw.get(key) is not None]
    if len(given) != 1:
        raise ConfigError(f"{c.source}: {path}: expected exactly one of {', '.join(LENGTH_KEYS)} "
                          f"(the stage's length), received {', '.join(given) or 'none'}")
    length = {"epochs": None, **{key: c.number(raw[key], f"{path}.{key}", int, 1) for key in given}}
    k_end = raw.get("k_end")
    return Stage(
        **length,
        k=c.number(raw["k"], f"{path}.k", float, 0.0),
        k_end=None if k_end is None else c.number(k_end, f"{path}.k_end", float, 0.0),
        lr=c.number(raw["lr"], f"{path}.lr", float, 0.0, lo_open=True),
        image_size=c.number(
            raw["image_size"], f"{path}.image_size", int, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE
        ),
        dataset=c.choice(raw.get("dataset", "main"), f"{path}.dataset", DATASETS),
        freeze_branch=c.boolean(raw.get("freeze_branch", False), f"{path}.freeze_branch"),
        l2=c.number(raw.get("l2", 0.0), f"{path}.l2", float, 0.0),
        snapshot=c.boolean(raw.get("snapshot", False), f"{path}.snapshot"),
    )


def config_from_dict(raw: Any, source: str = "<config>") -> RunConfig:
    """Validate a plain dict (as read from YAML) and build a :class:`RunConfig`.

    ``source`` names the origin (file path) in error messages.
    """
    c = Checker(source)
    allowed, required = dataclass_fields(RunConfig)
    refuse_scoring_config(raw, source)
    raw = c.mapping(raw, "", allowed, required)
    stages_raw = raw["stages"]
    if not isinstance(stages_raw, (list, tuple)) or not stages_raw:
        raise c.fail("stages", "a non-empty list of stages", stages_raw)
    stages = tuple(_stage(c, s, f"stages[{i}]") for i, s in enumerate(stages_raw))
    sizes: dict[str, int] = {}
    for i, s in enumerate(stages):
        if s.snapshot and sizes.setdefault(s.snapshot_name, i) != i:
            raise c.fail(f"stages[{i}].snapshot", f"one snapshot per image size (stages[{sizes[s.snapshot_name]}] "
                         f"already keeps the {s.image_size} px model)", True)
    d = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}
    get = lambda key: raw.get(key, d.get(key))  # noqa: E731
    threshold = get("threshold")
    objective = parse_objective(c, raw.get("objective"))
    # An identity objective packs its own P x K batches: `batching` (how pairs are packed) does not apply.
    batching = c.choice(get("batching"), "batching", BATCHINGS)
    batch = parse_batch(c, raw.get("batch"), objective, c.number(get("batch_size"), "batch_size", int, 1))
    for i, s in enumerate(stages):
        if s.dataset == "homography" and objective.identities:
            raise c.fail(f"stages[{i}].dataset", f"a pair objective for 'dataset: homography' (its photos have "
                         f"no identities; objective {objective.name!r} trains on identities)", s.dataset)
    crop, aspect = parse_crop_aspect(c, get("crop"), get("aspect"), [s.image_size for s in stages], (MIN_IMAGE_SIZE, MAX_IMAGE_SIZE))
    trunk = parse_trunk(c, raw.get("trunk"), "trunk", stages, c.boolean(get("flip_ids"), "flip_ids"),
                        _views(c, get("tta")))
    return RunConfig(
        name=c.string(raw["name"], "name"),
        stages=stages,
        seed=c.number(get("seed"), "seed", int, 0),
        model=_model(c, raw.get("model"), "model"),
        batch_size=(batch.ids * batch.per_id if batch else
                    c.number(get("batch_size"), "batch_size", int, 2 if get("batching") == "images" else 1)),
        mining_interval=c.number(get("mining_interval"), "mining_interval", int, 1),
        mining=c.choice(get("mining"), "mining", MINING_MODES),
        candidates=c.number(get("candidates"), "candidates", int, 1),
        negatives_mix=c.number(get("negatives_mix"), "negatives_mix", float, 0.0, 1.0),
        batching=batching,
        box_margin=c.number(get("box_margin"), "box_margin", float, 0.0, 1.0),
        augment=c.boolean(get("augment"), "augment"),
        augment_style=c.choice(get("augment_style"), "augment_style", AUGMENT_STYLES),
        workers=c.number(get("workers"), "workers", int, 1),
        val_new_whale=c.boolean(get("val_new_whale"), "val_new_whale"),
        threshold=None if threshold is None else c.number(threshold, "threshold", float, 0.0, 1.0),
        strategy=c.choice(get("strategy"), "strategy", STRATEGIES),
        crop_cache=c.choice(get("crop_cache"), "crop_cache", CACHE_MODES),
        precision=c.choice(get("precision"), "precision", PRECISIONS),
        init_from=c.string(get("init_from"), "init_from", optional=True),
        flip_ids=c.boolean(get("flip_ids"), "flip_ids"),
        tta=_views(c, get("tta")),
        tta_mode=c.choice(get("tta_mode"), "tta_mode", TTA_MODES),
        objective=objective,
        batch=batch,
        homography=parse_homography(c, raw.get("homography"), "homography"),
        crop=crop,
        aspect=aspect,
        trunk=trunk,
    )


def _views(c: Checker, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise c.fail("tta", "a list of views from " + ", ".join(TTA_VIEWS), raw)
    views = tuple(c.choice(v, f"tta[{i}]", TTA_VIEWS) for i, v in enumerate(raw))
    if len(set(views)) != len(views):
        raise c.fail("tta", "each view once", raw)
    return views


# --------------------------------------------------------------------------------------------
# overrides and loading

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
            apply_override(raw, str(key), value, str(path))
    return config_from_dict(raw, source=str(path))


def config_hash(cfg: RunConfig) -> str:
    """A short hash (12 hex digits) of the resolved config: equal hashes, equal configs."""
    import hashlib

    return hashlib.sha256(cfg.to_yaml().encode("utf-8")).hexdigest()[:12]
