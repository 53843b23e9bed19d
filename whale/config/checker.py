"""Typed reads of raw YAML values that name the file and key path of a bad value.

:class:`Checker` is what :mod:`whale.config` validates every config with, and what other YAML
files (``ensemble.py --recipe``) use for the same messages:
``FILE: stages[2].lr: expected a number > 0, received 'fast'``.
"""
from __future__ import annotations

import math
from typing import Any

from whale.core.errors import ConfigError



class Checker:
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
        return f"{name} in {'(' if lo_open else '['}{lo}, {hi}]"
    if lo is not None:
        return f"{name} {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{name} <= {hi}"
    return name


def read_mapping(path, what: str, keys: str) -> dict:
    """The YAML mapping in ``path`` (an empty file: ``{}``), ``what`` and ``keys`` naming the config and its top-level
    keys in the messages.

    Raises:
        ConfigError: unreadable file, invalid YAML or not a mapping (the file named).
    """
    import yaml
    from pathlib import Path

    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of {keys}, received {raw!r}")
    return raw


def refuse_scoring_config(raw: Any, source: str) -> None:
    """Refuse a scoring command's config given where a training config belongs, saying which command takes it: a
    keypoint matcher's (``features``/``verify``) or the joint identification's (``keypoints`` and ``shortlist``).

    Raises:
        ConfigError: naming ``source`` and the command.
    """
    if not isinstance(raw, dict) or "stages" in raw:
        return
    if "keypoints" in raw and "shortlist" in raw:
        raise ConfigError(f"{source}: the joint identification's settings, not a training config: use it with "
                          "`whale score --matcher joint --config ...`")
    if {"features", "verify"} & set(raw):
        raise ConfigError(f"{source}: a keypoint matcher's settings, not a training config: use it with "
                          "`whale score --matcher keypoints --config ...`")
