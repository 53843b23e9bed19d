"""The box models' settings: a frozen dataclass read from YAML (``configs/boxes.yaml``), unknown keys refused.

Example::

    name: boxes
    seed: 0
    image_size: 128        # whole images resized to S x S (unit boxes, so aspect need not be kept)
    folds: 4               # K-fold cross-validated IoU; the K fold models predict together
    epochs: 12
    cycle_epochs: 4        # cosine annealing restarts every 4 epochs (3 cycles)
    batch_size: 16
    lr: 1.0e-3             # peak learning rate of each cycle
    vgg_width: 0.125       # VGG16 layout, channels x width (1.0: keras.applications.VGG16)
    vgg_weights: null      # null | imagenet (downloads; width 1.0) | a local VGG16 .h5 file
    vgg_head: dense        # dense: the paper's regressed outputs | integral: soft argmax per edge
    retinanet_filters: [16, 32, 64, 128]   # ResNet backbone, explicit (no preset download)
    retinanet_blocks: [1, 1, 1, 1]
    fpn_width: 64          # feature-pyramid channels (keras-cv's default 256 is a GPU size)
    min_confidence: 0.05   # RetinaNet boxes below this count as failed detections
    refine: false          # ours (whale.boxes.refine): a second look through a crop around the box
    refine_size: 64        # the crop's square size
    refine_margin: 0.25    # the crop: the box grown by this fraction of its size per side
    refine_jitter: 0.12    # training crops moved and scaled by up to this fraction (< margin)
    refine_margins: null   # margins a prediction looks at (each with its mirror; averaged); null: refine_margin
    refine_epochs: 24
    refine_passes: 3       # looks per image, each from the last box (and its mirror, averaged)
    refine_from: best      # the first box: best (highest cross-validated IoU) | average | vgg | retinanet
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.config import Checker, dataclass_fields
from whale.core.errors import ConfigError

MODELS = ("vgg", "retinanet")
VGG_HEADS = ("dense", "integral")  # the VGG regressor's heads (whale.boxes.vgg)
REFINE_FROM = ("best", "average", *MODELS)  # the refiner's first box (whale.boxes.train.first_box)


@dataclass(frozen=True)
class BoxConfig:
    """See the module docstring for each key."""

    name: str = "boxes"
    seed: int = 0
    image_size: int = 128
    folds: int = 4
    epochs: int = 12
    cycle_epochs: int = 4
    batch_size: int = 16
    lr: float = 1.0e-3
    vgg_width: float = 0.125
    vgg_weights: str | None = None
    vgg_head: str = "dense"
    retinanet_filters: tuple[int, ...] = (16, 32, 64, 128)
    retinanet_blocks: tuple[int, ...] = (1, 1, 1, 1)
    fpn_width: int = 64
    min_confidence: float = 0.05
    refine: bool = False
    refine_size: int = 64
    refine_margin: float = 0.25
    refine_jitter: float = 0.12
    refine_margins: tuple[float, ...] | None = None
    refine_epochs: int = 24
    refine_passes: int = 3
    refine_from: str = "best"

    def to_dict(self) -> dict:
        """Plain YAML-ready values (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _ints(c: Checker, raw: Any, path: str) -> tuple[int, ...]:
    if not isinstance(raw, (list, tuple)) or len(raw) != 4:
        raise c.fail(path, "a list of 4 integers (one per ResNet stage)", raw)
    return tuple(c.number(v, f"{path}[{i}]", int, 1) for i, v in enumerate(raw))


def _margins(c: Checker, raw: Any, path: str) -> tuple[float, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)) or not 1 <= len(raw) <= 5:
        raise c.fail(path, "null or a list of 1 to 5 margins", raw)
    return tuple(c.number(v, f"{path}[{i}]", float, 0.0, 2.0, lo_open=True) for i, v in enumerate(raw))


def box_config_from_dict(raw: Any, source: str = "<box config>") -> BoxConfig:
    """Validate a plain dict (as read from YAML); errors name ``source`` and the key."""
    c = Checker(source)
    allowed, _ = dataclass_fields(BoxConfig)
    raw = c.mapping({} if raw is None else raw, "", allowed, ())
    d = BoxConfig()
    get = lambda key: raw.get(key, getattr(d, key))  # noqa: E731
    cfg = BoxConfig(
        name=c.string(get("name"), "name"),
        seed=c.number(get("seed"), "seed", int, 0),
        image_size=c.number(get("image_size"), "image_size", int, 32, 1024),
        folds=c.number(get("folds"), "folds", int, 2),
        epochs=c.number(get("epochs"), "epochs", int, 1),
        cycle_epochs=c.number(get("cycle_epochs"), "cycle_epochs", int, 1),
        batch_size=c.number(get("batch_size"), "batch_size", int, 1),
        lr=c.number(get("lr"), "lr", float, 0.0, lo_open=True),
        vgg_width=c.number(get("vgg_width"), "vgg_width", float, 0.0, 1.0, lo_open=True),
        vgg_weights=c.string(get("vgg_weights"), "vgg_weights", optional=True),
        vgg_head=c.choice(get("vgg_head"), "vgg_head", VGG_HEADS),
        retinanet_filters=_ints(c, get("retinanet_filters"), "retinanet_filters"),
        retinanet_blocks=_ints(c, get("retinanet_blocks"), "retinanet_blocks"),
        fpn_width=c.number(get("fpn_width"), "fpn_width", int, 8),
        min_confidence=c.number(get("min_confidence"), "min_confidence", float, 0.0, 1.0),
        refine=c.boolean(get("refine"), "refine"),
        refine_size=c.number(get("refine_size"), "refine_size", int, 32, 1024),
        refine_margin=c.number(get("refine_margin"), "refine_margin", float, 0.0, 2.0, lo_open=True),
        refine_jitter=c.number(get("refine_jitter"), "refine_jitter", float, 0.0, 1.0),
        refine_margins=_margins(c, get("refine_margins"), "refine_margins"),
        refine_epochs=c.number(get("refine_epochs"), "refine_epochs", int, 1),
        refine_passes=c.number(get("refine_passes"), "refine_passes", int, 1, 10),
        refine_from=c.choice(get("refine_from"), "refine_from", REFINE_FROM),
    )
    if cfg.image_size % 32:
        raise c.fail("image_size", "a multiple of 32 (the detectors downsample 32 times)", cfg.image_size)
    if cfg.refine_size % 32:
        raise c.fail("refine_size", "a multiple of 32 (the refiner is the VGG regressor)", cfg.refine_size)
    if cfg.refine_jitter >= cfg.refine_margin:
        raise c.fail("refine_jitter", f"below refine_margin ({cfg.refine_margin}): the box must stay inside "
                     "its training crop", cfg.refine_jitter)
    if cfg.vgg_weights is not None and cfg.vgg_width != 1.0:
        raise c.fail("vgg_weights", "null when vgg_width is not 1.0 (weight files fit the full VGG16)",
                     cfg.vgg_weights)
    return cfg


def load_box_config(path, overrides: dict | None = None) -> BoxConfig:
    """Read a box config YAML file, top-level keys of ``overrides`` replacing its values (:func:`box_config_from_dict`)."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if overrides:
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of keys, received {raw!r}")
        raw = {**raw, **overrides}
    return box_config_from_dict(raw, str(path) + (" with --set" if overrides else ""))


def save_box_config(cfg: BoxConfig, path) -> Path:
    """Write the resolved config as YAML (atomically)."""
    import yaml

    from whale.core.files import write_text_atomic

    return write_text_atomic(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
