"""The ``objective`` and ``batch`` keys of a run config: which objective trains, with which parameters.

Each objective declares its name, its batches and its parameters (kind, bounds, default) in its own module
under ``whale/objectives/``, on its class registered with ``@register`` (:mod:`whale.objectives.registry`). Loading a config never imports Keras, and
this layer-0 module may not import :mod:`whale.objectives` (``tests/test_architecture.py``), so the
declarations are read here as data, from the source of the modules, without running them
(:func:`objective_specs`); an objective registered at run time (a test's toy objective) adds its spec with
:func:`add_spec`. The config's validation, :mod:`whale.objectives` and the configs reference
(:mod:`whale.config.doc`) all read :func:`objective_specs`.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.config.checker import Checker

BATCHES = ("pairs", "identities")
"""What an objective's batches hold: labelled pairs, or P x K identities (``batch``)."""
FOLDER = Path(__file__).resolve().parents[1] / "objectives"
"""The folder of the objective modules, one per objective (:mod:`whale.objectives`)."""
ADDED_LATER = {"pairs": "all", "miner": "semihard", "reduction": "mean"}
"""Parameters added after runs were recorded, with their defaults: a config writes them only when set otherwise,
so the configs of earlier runs keep their hash."""


@dataclass(frozen=True)
class ObjectiveSpec:
    """What the config knows of an objective: ``name``, ``batches`` (:data:`BATCHES`), ``params``
    ``{key: (kind, lo, hi, default)}`` (kind int/float/bool, or str with ``lo`` its choices; None = unbounded),
    ``meanings`` ``{key: text}`` for docs/configs.md, and ``order`` (the place in :func:`objective_names`)."""

    name: str
    batches: str = "pairs"
    params: dict = field(default_factory=dict)
    meanings: dict = field(default_factory=dict)
    order: int = 100


SPEC_FIELDS = ("name", "batches", "params", "meanings", "order")
"""The class attributes of a registered objective that make its :class:`ObjectiveSpec`."""
_ADDED: dict[str, ObjectiveSpec] = {}


def _module_file(module: str) -> Path | None:
    path = FOLDER.parent.joinpath(*module.split(".")[1:])
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class _Imported:
    """A name a module imports from another module of ``whale``: read from that module when asked for."""

    module: str
    name: str


@functools.lru_cache(maxsize=None)
def _constants(path: Path) -> dict[str, Any]:
    """The module-level names of the file at ``path`` whose values are data (literals, the kinds, names imported
    from other modules of ``whale``, read there when used): read, never run."""
    env: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "whale" and node.level == 0:
            env.update({alias.asname or alias.name: _Imported(node.module, alias.name) for alias in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = _data(node.value, env)
            except ValueError:
                continue
            env.update({t.id: value for t in targets if isinstance(t, ast.Name)})
    return env


def _data(node: ast.AST, env: dict[str, Any]) -> Any:
    """The value of a data expression: literals, tuples, lists, dicts, a sign, and names ``env`` holds."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        value = env[node.id]
        if isinstance(value, _Imported):
            source = _module_file(value.module)
            found = {} if source is None else _constants(source)
            if value.name not in found or isinstance(found[value.name], _Imported):
                raise ValueError(f"{value.module}.{value.name} is not data")
            return found[value.name]
        return value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_data(e, env) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_data(k, env): _data(v, env) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _data(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"not data: {ast.dump(node)[:80]}")


def _declared(path: Path) -> ObjectiveSpec | None:
    """The spec of the ``@register`` class of the objective module at ``path`` (None without one)."""
    env = _constants(path)
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ClassDef) and any(getattr(d, "id", getattr(d, "attr", None)) == "register"
                                                  for d in node.decorator_list):
            found = {}
            for item in node.body:
                if (isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name)
                        and item.targets[0].id in SPEC_FIELDS):
                    try:
                        found[item.targets[0].id] = _data(item.value, env)
                    except ValueError as err:
                        raise ValueError(f"{path}: {node.name}.{item.targets[0].id} must be data (literals and "
                                         f"constants): {err}") from err
            if "name" not in found:
                raise ValueError(f"{path}: the registered class {node.name} declares no name")
            return ObjectiveSpec(**found)
    return None


@functools.lru_cache(maxsize=1)
def _declared_specs() -> dict[str, ObjectiveSpec]:
    """``{module name: spec}`` of the modules of ``whale/objectives/`` that register an objective."""
    return {f"whale.objectives.{path.stem}": spec for path in sorted(FOLDER.glob("*.py"))
            if (spec := _declared(path)) is not None}


def objective_modules() -> tuple[str, ...]:
    """The modules of ``whale/objectives/`` that register an objective (:func:`whale.objectives.registry.load_objectives`
    imports them)."""
    return tuple(_declared_specs())


def objective_specs() -> dict[str, ObjectiveSpec]:
    """``{name: spec}`` of every objective (those of ``whale/objectives/`` and those added at run time), in
    their ``order`` (the paper's head first, the default), then by name."""
    every = {spec.name: spec for spec in _declared_specs().values()}
    every.update(_ADDED)
    return dict(sorted(every.items(), key=lambda kv: (kv[1].order, kv[0])))


def add_spec(spec: ObjectiveSpec) -> None:
    """Make an objective registered at run time known to the config (:func:`whale.objectives.registry.register`).

    Raises:
        ValueError: another spec has this name (a module of ``whale/objectives/`` whose class does not say what its source says
            would be one), or ``spec.batches`` is not one of :data:`BATCHES`.
    """
    if spec.batches not in BATCHES:
        raise ValueError(f"objective {spec.name!r}: batches must be one of {', '.join(BATCHES)}, got {spec.batches!r}")
    known = objective_specs().get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"objective {spec.name!r} is declared twice, differently: {known} and {spec}")
    _ADDED[spec.name] = spec


def remove_spec(name: str) -> None:
    """Forget an objective added at run time (:func:`whale.objectives.registry.unregister`); no-op otherwise."""
    _ADDED.pop(name, None)


def objective_names() -> tuple[str, ...]:
    """Every objective name (``objective``; :mod:`whale.objectives`): the paper's head first, the default."""
    return tuple(objective_specs())


def identity_objectives() -> tuple[str, ...]:
    """Objectives whose loss reads a whole batch of identities (P x K batches, ``batch``), not labelled pairs."""
    return tuple(name for name, spec in objective_specs().items() if spec.batches == "identities")


def __getattr__(name: str):
    # The tables of earlier versions, computed from the declarations when asked for.
    if name == "OBJECTIVES":
        return objective_names()
    if name == "OBJECTIVE_PARAMS":
        return {n: spec.params for n, spec in objective_specs().items()}
    if name == "IDENTITY_OBJECTIVES":
        return identity_objectives()
    if name == "SIMILARITY_MODELS":  # seed 004's similarity models, the choices of objective: probabilistic
        return objective_specs()["probabilistic"].params["similarity"][1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ObjectiveConfig:
    """What the model learns (:mod:`whale.objectives`): ``name`` (:func:`objective_names`) and its parameters.

    ``params`` holds every parameter of its :class:`ObjectiveSpec` as ``(key, value)``
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
        """True when batches are P x K identities (the spec's ``batches``), False for labelled pairs."""
        return objective_specs()[self.name].batches == "identities"


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
        raise c.fail("objective", "a name (" + ", ".join(objective_names()) + ") or a mapping with a 'name'", raw)
    name = c.choice(raw["name"], "objective.name", objective_names())
    table = objective_specs()[name].params
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
                         f"P x K batches are for {', '.join(identity_objectives())})", raw)
        return None
    raw = c.mapping({} if raw is None else raw, "batch", ("ids", "per_id"), ())
    per_id = c.number(raw.get("per_id", 4), "batch.per_id", int, 1)
    ids = c.number(raw.get("ids", max(2, batch_size // per_id)), "batch.ids", int, 2)
    return BatchConfig(ids=ids, per_id=per_id)
