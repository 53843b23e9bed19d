"""Run configuration: YAML -> frozen dataclasses that reject unknown keys (layer 0 of docs/ARCHITECTURE.md).

:mod:`whale.config.schema` (the run config: :class:`RunConfig`, :class:`ModelConfig`, :class:`Stage`,
:func:`load_config`, :func:`config_from_dict`, :func:`config_hash`), :mod:`whale.config.objectives` (the
``objective`` and ``batch`` keys, every objective's declarations read as data from its module's source),
:mod:`whale.config.homography` (the ``homography`` key), :mod:`whale.config.inputs` (``crop`` and ``aspect``),
:mod:`whale.config.overrides` (``--set KEY=VALUE``), :mod:`whale.config.checker` (the typed reads behind every
config and recipe error message) and :mod:`whale.config.doc` (docs/configs.md generated from the schema).
The names below are the package's API: ``from whale.config import load_config``.
"""

from whale.config.checker import Checker
from whale.config.homography import HOMOGRAPHY_K, HomographyConfig
from whale.config.objectives import BatchConfig, ObjectiveConfig
from whale.config.schema import (
    AUGMENT_STYLES,
    BATCHINGS,
    CACHE_MODES,
    DATASETS,
    KNOWN_BRANCHES,
    LENGTH_KEYS,
    MAX_IMAGE_SIZE,
    MIN_IMAGE_SIZE,
    MINING_MODES,
    PRECISIONS,
    STEMS,
    STRATEGIES,
    TTA_MODES,
    TTA_VIEWS,
    ModelConfig,
    RunConfig,
    Stage,
    config_from_dict,
    config_hash,
    dataclass_fields,
    load_config,
)

__all__ = [
    "AUGMENT_STYLES", "BATCHINGS", "CACHE_MODES", "DATASETS", "HOMOGRAPHY_K", "KNOWN_BRANCHES", "LENGTH_KEYS",
    "MAX_IMAGE_SIZE", "MIN_IMAGE_SIZE", "MINING_MODES", "PRECISIONS", "STEMS", "STRATEGIES", "TTA_MODES",
    "TTA_VIEWS", "BatchConfig", "Checker", "HomographyConfig", "ModelConfig", "ObjectiveConfig", "RunConfig",
    "Stage", "config_from_dict", "config_hash", "dataclass_fields", "load_config",
]
