"""The joint identification's settings: YAML (``configs/joint.yaml``) -> one frozen dataclass.

``keypoints``: the keypoint configs whose features verify every shortlisted pair (one feature kind each: RootSIFT,
XFeat), paths relative to the YAML file; ``shortlist``: how many photos each source proposes per query; ``check``:
the one classifier over every pair's evidence; ``aggregate``: from photos to individuals.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.config.checker import Checker, read_mapping
from whale.core.errors import ConfigError
from whale.config.overrides import apply_override
from whale.keypoints.config import KeypointConfig, load_keypoint_config

VALIDATIONS = ("original", "thinned")
"""``check.validation``: the check fitted on fold ``K``'s validation queries as they are, or thinned as the test is
drawn (:mod:`whale.identify.thin`)."""

COLUMNS = ("pairs", "individuals")
"""``check.columns``: what the check fits on (:func:`whale.identify.check.check_rows`): each pair's own evidence
(the individual's photo count left out), or also the individual's (its photo count, its verified photos, each kind's
margin over the query's other individuals): only with ``check.validation: thinned``, the one validation that has
whales with one gallery photo as the test has."""

AGGREGATES = ("max", "noisy_or")
"""From the pairs' P(same whale) to an individual's: its best photo's, or ``1 - prod(1 - p)`` over its shortlisted
photos (photos of one whale are not independent evidence: measured side by side, docs/humpback.md)."""


@dataclass(frozen=True)
class JointConfig:
    """Everything :func:`whale.identify.score.score_joint` does besides its inputs (module docstring).

    ``kinds``: ``(name, KeypointConfig)`` per feature kind, the name the YAML file's stem. ``votes``: each feature
    kind's best photos by LNBNN votes that every kind verifies; ``runs``: each trained run's best photos by its
    scores, verified too. ``rounds``, ``leaf_nodes``, ``learning_rate``, ``folds``, ``seed``: the check's gradient-boosted
    trees and its cross-fitting on the validation queries (``folds`` groups of queries); ``validation``: the check
    fitted on those queries as they are or thinned as the test is drawn (:mod:`whale.identify.thin`); ``columns``:
    :data:`COLUMNS`. ``aggregate``: :data:`AGGREGATES`.
    """

    kinds: tuple[tuple[str, KeypointConfig], ...]
    votes: int = 40
    runs: int = 20
    rounds: int = 200
    leaf_nodes: int = 15
    learning_rate: float = 0.05
    folds: int = 5
    seed: int = 0
    aggregate: str = "max"
    validation: str = "original"
    columns: str = "pairs"
    source: str = "<joint config>"

    def to_dict(self) -> dict:
        return {"keypoints": {name: cfg.to_dict() for name, cfg in self.kinds},
                "shortlist": {"votes": self.votes, "runs": self.runs},
                "check": {"rounds": self.rounds, "leaf_nodes": self.leaf_nodes, "learning_rate": self.learning_rate,
                          "folds": self.folds, "seed": self.seed}
                | ({"validation": self.validation} if self.validation != "original" else {})
                | ({"columns": self.columns} if self.columns != "pairs" else {}),
                "aggregate": self.aggregate}


def parse_joint_config(raw: Any, source: str = "<joint config>", folder: Path | None = None) -> JointConfig:
    """A raw mapping (parsed YAML) -> :class:`JointConfig`; ``keypoints`` paths resolved against ``folder``.

    Raises:
        ConfigError: an unknown key, a bad value or an unreadable keypoint config, naming ``source`` and the key.
    """
    check = Checker(source)
    raw = check.mapping(raw if raw is not None else {}, "", ("keypoints", "shortlist", "check", "aggregate"),
                        ("keypoints",))
    paths = raw["keypoints"]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise check.fail("keypoints", "a non-empty list of keypoint config files", paths)
    kinds = []
    for i, p in enumerate(paths):
        path = Path(p) if folder is None or Path(p).is_absolute() else Path(folder) / p
        if not path.is_file():
            raise ConfigError(f"{source}: keypoints[{i}]: {path} is not a file (a keypoint config, e.g. "
                              "keypoints_checked.yaml beside this one)")
        kinds.append((path.stem, load_keypoint_config(path)))
    names = [n for n, _ in kinds]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: keypoints: two configs share a file name ({', '.join(names)}): each names a "
                          "feature kind in the pair table")
    short = check.mapping(raw.get("shortlist") or {}, "shortlist", ("votes", "runs"), ())
    fit = check.mapping(raw.get("check") or {}, "check", ("rounds", "leaf_nodes", "learning_rate", "folds", "seed",
                                                                 "validation", "columns"), ())
    validation = check.choice(fit.get("validation", "original"), "check.validation", VALIDATIONS)
    columns = check.choice(fit.get("columns", "pairs"), "check.columns", COLUMNS)
    if columns == "individuals" and validation != "thinned":
        raise ConfigError(f"{source}: check.columns: individuals needs check.validation: thinned (fold K's validation "
                          "queries each keep two or more photos of their whale, so a check fitted there learns that a "
                          "whale with one photo is never the answer)")
    return JointConfig(
        kinds=tuple(kinds),
        votes=check.number(short.get("votes", 40), "shortlist.votes", int, lo=0, hi=10000),
        runs=check.number(short.get("runs", 20), "shortlist.runs", int, lo=0, hi=10000),
        rounds=check.number(fit.get("rounds", 200), "check.rounds", int, lo=1, hi=5000),
        leaf_nodes=check.number(fit.get("leaf_nodes", 15), "check.leaf_nodes", int, lo=2, hi=1000),
        learning_rate=check.number(fit.get("learning_rate", 0.05), "check.learning_rate", float, lo=0, hi=1,
                                   lo_open=True),
        folds=check.number(fit.get("folds", 5), "check.folds", int, lo=2, hi=50),
        seed=check.number(fit.get("seed", 0), "check.seed", int, lo=0),
        aggregate=check.choice(raw.get("aggregate", "max"), "aggregate", AGGREGATES),
        validation=validation,
        columns=columns,
        source=source)


def load_joint_config(path, overrides: dict | None = None) -> JointConfig:
    """The config of ``path`` (YAML) with ``--set`` ``overrides`` applied.

    Raises:
        ConfigError: unreadable file, unknown key or bad value (file and key path named).
    """
    raw = read_mapping(path, "joint config", "keypoints/shortlist/check/aggregate")
    for key, value in (overrides or {}).items():
        apply_override(raw, key, value, str(path))
    return parse_joint_config(raw, str(path), Path(path).parent)
