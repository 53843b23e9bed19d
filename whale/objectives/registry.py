"""The objectives by name: :func:`register` (a class decorator), :func:`objective_class`, :func:`build_objective`.

One module per objective in ``whale/objectives/`` holds its class (a family of
:mod:`whale.objectives.base` with its declarations and its loss), decorated with :func:`register`; importing
:mod:`whale.objectives` imports every such module (:func:`load_objectives`), so their Keras losses are registered
for loading checkpoints. Adding an objective is that one file and its tests: the config reads its declarations
(:mod:`whale.config.objectives`), docs/configs.md its parameters (:mod:`whale.config.doc`), training its batches,
loss and scorer, and nothing else asks for its name (``tests/test_architecture.py``).

Example:
    >>> objective = build_objective(cfg.objective)          # doctest: +SKIP
    >>> model = objective.build(branch, classes=counts)      # doctest: +SKIP
    >>> objective.compile(model, lr=1e-4)                    # doctest: +SKIP
"""
from __future__ import annotations

import importlib

from whale.config.objectives import (SPEC_FIELDS, ObjectiveConfig, ObjectiveSpec, add_spec, objective_modules,
                                   remove_spec)
from whale.objectives.base import Objective

__all__ = ["register", "unregister", "objective_class", "objective_classes", "build_objective", "load_objectives"]

_CLASSES: dict[str, type[Objective]] = {}


def register(cls: type[Objective]) -> type[Objective]:
    """Register an objective class under its ``name`` (a class decorator); its spec goes to the config.

    Raises:
        ValueError: the class declares no name, or another class has the name.
    """
    if not (isinstance(cls, type) and issubclass(cls, Objective)) or not cls.name:
        raise ValueError(f"register: expected a named subclass of whale.objectives.base.Objective, got {cls!r}")
    if cls.name in _CLASSES and _CLASSES[cls.name] is not cls:
        raise ValueError(f"objective {cls.name!r} is registered twice: {_CLASSES[cls.name]} and {cls}")
    add_spec(ObjectiveSpec(**{f: getattr(cls, f) for f in SPEC_FIELDS}))
    _CLASSES[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Forget the objective registered at run time as ``name`` (a test's toy objective)."""
    _CLASSES.pop(name, None)
    remove_spec(name)


def load_objectives() -> None:
    """Import every module of ``whale/objectives/`` that registers an objective
    (:func:`whale.config.objectives.objective_modules`; each registers itself when imported)."""
    for module in objective_modules():
        importlib.import_module(module)


def objective_classes() -> dict[str, type[Objective]]:
    """``{name: class}`` of every registered objective."""
    load_objectives()
    return dict(_CLASSES)


def objective_class(name: str) -> type[Objective]:
    """The class registered as ``name``.

    Raises:
        ValueError: no objective has that name (the message lists those that do).
    """
    classes = objective_classes()
    if name not in classes:
        raise ValueError(f"objective: unknown name {name!r} (known: {', '.join(sorted(classes))})")
    return classes[name]


def build_objective(cfg: ObjectiveConfig, head_mid: int = 32, head_hidden: int = 0) -> Objective:
    """The :class:`~whale.objectives.base.Objective` of a config's ``objective`` (``head_*``: the paper's head
    sizes, ``model.head_*``)."""
    return objective_class(cfg.name)(cfg, head_mid, head_hidden)
