"""The ``objective`` and ``batch`` keys of a run config: which objective trains, with which parameters.

:data:`OBJECTIVE_PARAMS` is the one table of every objective's parameters (kind, bounds, default) that
the config's validation, :mod:`whale.objectives` and the configs reference (:mod:`whale.configdoc`) read.
Loading a config never imports Keras: the objectives themselves are :mod:`whale.objectives`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from whale.checker import Checker

OBJECTIVES = ("head", "contrastive", "triplet", "global", "tgloss", "sglobal", "arcface", "probabilistic")
"""Training objectives (``objective``; :mod:`whale.objectives`): the paper's head first, the default."""
PAIRS = ("all", "triplet")
"""``pairs`` of ``objective: global | tgloss`` (:data:`whale.objectives.globalloss.PAIRS`): every pair of a batch, or one
triplet per anchor (seed 001's eq. 6 read per triplet)."""
SIMILARITY_MODELS = ("gaussian", "flattened_gaussian", "laplacian", "prob_clipped_l1", "cauchy")
"""Seed 004's similarity models (Table 3.1) of ``objective: probabilistic`` (:mod:`whale.objectives.similarity`)."""
# Each objective's parameters with their defaults, bounds and meaning (the one table the config, the
# objectives and the docs read). (kind, lo, hi, default): kind int/float/bool; None = unbounded.
OBJECTIVE_PARAMS: dict[str, dict[str, tuple]] = {
    "head": {},
    # DrLIM on the embeddings' Euclidean distance (seed 000's and seed 002's baseline).
    "contrastive": {"embedding": (int, 1, None, 256), "normalize": (bool, None, None, False),
                    "margin": (float, 0.0, None, 1.0)},
    # Seed 002: a linear Dense(256), not normalised; FaceNet semi-hard rule, squared distances, margin 0.5.
    "triplet": {"embedding": (int, 1, None, 256), "normalize": (bool, None, None, False),
                "margin": (float, 0.0, None, 0.5)},
    # Seed 001 (section 5.2): unit-norm embeddings; t = 0.4, lambda = 0.8; TGLoss adds gamma * ratio triplet (m).
    # pairs: the distances of eq. 6, every pair of the batch (all) or one triplet per anchor (triplet, the paper's).
    "global": {"embedding": (int, 1, None, 256), "t": (float, 0.0, None, 0.4), "lam": (float, 0.0, None, 0.8),
               "pairs": (str, PAIRS, None, "all")},
    "tgloss": {"embedding": (int, 1, None, 256), "t": (float, 0.0, None, 0.4), "lam": (float, 0.0, None, 0.8),
               "gamma": (float, 0.0, None, 1.0), "m": (float, 0.0, None, 0.01), "pairs": (str, PAIRS, None, "all")},
    # Seed 001's SNet-GLoss (eq. 8): the paper's head on labelled pairs, the global loss on its similarity (the
    # head's log-odds), margin (eq. 8's m) 1 and lambda 1 (section 5.2).
    "sglobal": {"margin": (float, 0.0, None, 1.0), "lam": (float, 0.0, None, 1.0)},
    # Sub-center ArcFace with per-identity margins m = a * n^p + c (n images of the identity), scale s: the
    # Happywhale 2022 1st place's tuned values (knshnb/kaggle-happywhale-1st-place, config/default.yaml;
    # whale.objectives.losses.HAPPYWHALE_2022_MARGINS).
    "arcface": {"embedding": (int, 1, None, 512), "subcenters": (int, 1, None, 2), "scale": (float, 0.0, None, 20.96),
                "margin_a": (float, 0.0, None, 0.27126), "margin_p": (float, None, 0.0, -0.364399),
                "margin_c": (float, 0.0, None, 0.05)},
    # Seed 004: g(h1, h2; alpha) in (0, 1] on a weighted norm of h1 - h2, binary cross-entropy of the pair
    # labels; a 20-d embedding as in the thesis' ORL network; Cauchy is the thesis' pick. (str: the choices.)
    "probabilistic": {"embedding": (int, 1, None, 20), "similarity": (str, SIMILARITY_MODELS, None, "cauchy"),
                      "beta": (float, 0.0, None, 1.0), "delta": (float, 0.0, None, 2.0)},
}
ADDED_LATER = {"pairs": "all"}
"""Parameters added after runs were recorded, with their defaults: a config writes them only when set otherwise,
so the configs of earlier runs keep their hash."""
IDENTITY_OBJECTIVES = ("triplet", "global", "tgloss", "arcface")
"""Objectives whose loss reads a whole batch of identities (P x K batches, ``batch``), not labelled pairs."""

@dataclass(frozen=True)
class ObjectiveConfig:
    """What the model learns (:mod:`whale.objectives`): ``name`` (:data:`OBJECTIVES`) and its parameters.

    ``params`` holds every parameter of :data:`OBJECTIVE_PARAMS` ``[name]`` as ``(key, value)``
    pairs (defaults filled in), so a run folder's config says exactly what trained.
    """

    name: str = "head"
    params: tuple[tuple[str, Any], ...] = ()

    def __getitem__(self, key: str):
        for k, v in self.params:
            if k == key:
                return v
        raise KeyError(f"objective {self.name!r} has no parameter {key!r}")

    def written(self) -> dict[str, Any]:
        """``{"name": NAME, PARAM: VALUE, ...}`` as a config file holds it; a parameter of :data:`ADDED_LATER` only
        when set to another value than its default, so the configs of earlier runs keep their hash."""
        return {"name": self.name, **{k: v for k, v in self.params if k not in ADDED_LATER or v != ADDED_LATER[k]}}

    @property
    def identities(self) -> bool:
        """True when batches are P x K identities (:data:`IDENTITY_OBJECTIVES`), False for labelled pairs."""
        return self.name in IDENTITY_OBJECTIVES


@dataclass(frozen=True)
class BatchConfig:
    """P x K batches of the identity objectives: ``ids`` identities, ``per_id`` images of each."""

    ids: int = 8
    per_id: int = 4


def parse_objective(c: Checker, raw: Any) -> ObjectiveConfig:
    """``objective: NAME`` or ``objective: {name: NAME, PARAM: VALUE, ...}`` -> :class:`ObjectiveConfig`."""
    if raw is None or isinstance(raw, str):
        raw = {"name": "head" if raw is None else raw}
    if not isinstance(raw, dict) or "name" not in raw:
        raise c.fail("objective", "a name (" + ", ".join(OBJECTIVES) + ") or a mapping with a 'name'", raw)
    name = c.choice(raw["name"], "objective.name", OBJECTIVES)
    table = OBJECTIVE_PARAMS[name]
    raw = c.mapping(raw, "objective", ("name", *table), ("name",))
    params = []
    for key, (kind, lo, hi, default) in table.items():
        value = raw.get(key, default)
        if kind is bool:
            value = c.boolean(value, f"objective.{key}")
        elif kind is str:
            value = c.choice(value, f"objective.{key}", lo)
        else:
            value = c.number(value, f"objective.{key}", kind, lo, hi, lo_open=lo == 0.0 and kind is float)
        params.append((key, value))
    return ObjectiveConfig(name, tuple(params))


def parse_batch(c: Checker, raw: Any, objective: ObjectiveConfig, batch_size: int) -> BatchConfig | None:
    """``batch: {ids: P, per_id: K}`` of an identity objective (default: K = 4, P = batch_size // 4)."""
    if not objective.identities:
        if raw is not None:
            raise c.fail("batch", f"no batch for objective {objective.name} (it trains on labelled pairs; "
                         f"P x K batches are for {', '.join(IDENTITY_OBJECTIVES)})", raw)
        return None
    raw = c.mapping({} if raw is None else raw, "batch", ("ids", "per_id"), ())
    per_id = c.number(raw.get("per_id", 4), "batch.per_id", int, 1)
    ids = c.number(raw.get("ids", max(2, batch_size // per_id)), "batch.ids", int, 2)
    return BatchConfig(ids=ids, per_id=per_id)
