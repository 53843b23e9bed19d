"""Command-line overrides of a raw config: ``--set stages[2].lr=1e-4`` sets a value at a key path.

:func:`overrides` reads the ``--set KEY=VALUE`` flags (each value as YAML), :func:`apply_override` puts one
into the raw config before it is validated, so an overridden value is checked like the file's.
"""
from __future__ import annotations

import re
from typing import Any

from whale.core.errors import ConfigError

_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$")


def apply_override(raw: dict, dotted: str, value: Any, source: str) -> None:
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
            apply_override(node, f"{last}.{k}", v, source)
    else:
        node[last] = value


def overrides(pairs) -> dict:
    """``["KEY=VALUE", ...]`` (``--set``) -> ``{KEY: YAML value}`` (``objective={name: triplet}`` is a mapping)."""
    import yaml

    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value)
    return out
