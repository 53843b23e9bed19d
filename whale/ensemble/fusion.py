"""Calibrated fusion: every run's scores read as P(same individual), the runs combined as probabilities.

Runs of different kinds (a trained head's probabilities, the keypoint matcher's evidence, an embedding's
cosine) score on scales that a weighted average of raw scores cannot line up without a weight search
(:mod:`whale.ensemble.weights`). Here each run's validation file is fitted to P(same individual | score)
(:class:`whale.ranking.pairprob.PairCalibration`, isotonic or logistic, on that file alone), its validation
and test matrices are mapped to probabilities, and the runs are combined by one of :data:`RULES`:

* ``mean`` (the default): ``P = sum_r w_r p_r``, the runs' probabilities averaged (``w`` the runs' weights
  summing to 1; a linear opinion pool): never more confident than the most confident run, and a run that knows
  nothing of a pair (its base rate) only halves what the other says, never reverses it;
* ``logodds`` (naive Bayes): ``logit P = logit(prior) + K * sum_r w_r (logit p_r - logit prior_r)``: each run's
  evidence, its log-odds beyond its own base rate, added to the prior as if the runs erred independently
  (``K`` the models, :func:`models_of`: with equal weights, the plain sum over the models; the folds of one
  model averaged, not added). A candidate two runs both back rises above one that a single run backs, but
  runs that err together (the same photo's water, a caption) are counted twice.

``scores`` (:data:`FUSIONS`) is the weighted average of the raw scores, the paper's rule and what
``--tune-weights``' grid searches. For runs of several models the calibrated rule is the default
(:func:`resolve_fusion`); one run, or the folds of one model, keep the raw scores: calibration would only
relabel one model's scale. The ``new_whale`` threshold (tuned on the fused validation matrix, given, or
kept by an earlier ``--tune``) is then a probability. Both rules were measured side by side on the real flukes'
validation queries (docs/ensemble.md, "Calibrated fusion"); ``mean`` measured better and is the default.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError, DataError
from whale.core.files import write_json_atomic
from whale.inference.scorefile import load_score_file, read_header
from whale.ranking.pairprob import METHODS, PairCalibration, logit

RULES = ("logodds", "mean")
FUSIONS = ("scores", *RULES)
DEFAULT_RULE = "mean"
"""The rule ``--tune`` uses for runs of several models unless ``--fusion`` says otherwise (docs/ensemble.md)."""
_P_CLIP = 1e-7  # probabilities kept inside (0, 1) before their logit in float32


def _sigmoid32(z: np.ndarray) -> np.ndarray:
    return (0.5 * (1.0 + np.tanh(0.5 * z.astype(np.float64)))).astype(np.float32)


@dataclass(frozen=True)
class Fusion:
    """Calibrated runs and the rule that combines them.

    Attributes:
        rule: one of :data:`RULES`.
        calibrations: one :class:`PairCalibration` per run, fitted on its own validation file.
        models: ``K`` of the ``logodds`` rule (:func:`models_of`).
        runs: the runs' folders (for the record).
    """

    rule: str
    calibrations: tuple[PairCalibration, ...]
    models: int
    runs: tuple[str, ...] = ()

    @property
    def prior(self) -> float:
        """The fused prior: the runs' mean base rate."""
        return float(np.mean([c.base_rate for c in self.calibrations]))

    def transforms(self) -> list[Callable]:
        """Per run: ``[b, n] -> [b, n] float32``, its scores as what the rule sums (probability or evidence)."""
        if self.rule == "mean":
            return [c.transform for c in self.calibrations]
        return [self._evidence(c) for c in self.calibrations]

    def _evidence(self, cal: PairCalibration) -> Callable:
        shift, k = np.float32(logit(cal.base_rate)), np.float32(self.models)

        def evidence(block):
            p = np.clip(cal.transform(block), _P_CLIP, 1 - _P_CLIP)
            return k * (np.log(p) - np.log1p(-p) - shift)
        return evidence

    def finish(self) -> Callable | None:
        """The weighted sum's last map: the prior added back and the log-odds made a probability (``logodds``)."""
        if self.rule == "mean":
            return None
        prior = np.float32(logit(self.prior))
        return lambda total: _sigmoid32(total + prior)

    def maps(self) -> dict:
        """``transforms`` and ``finish`` for :func:`whale.ensemble.combine.average_score_files`."""
        return {"transforms": self.transforms(), "finish": self.finish()}

    def describe(self) -> str:
        """One line: the rule and what it does."""
        if self.rule == "mean":
            return "calibrated fusion, mean probability of the runs"
        return (f"calibrated fusion, naive Bayes: the runs' log-odds beyond their base rates summed over "
                f"{self.models} model(s), prior {self.prior:.3g}")

    def to_dict(self) -> dict:
        """JSON-ready: the rule, K, and every run's calibration."""
        return {"rule": self.rule, "models": self.models, "prior": self.prior,
                "runs": [{"run": r, "calibration": c.to_dict()} for r, c in zip(self.runs, self.calibrations)]}


def models_of(val_paths: Sequence[Path], models: Sequence[str] | None = None) -> int:
    """``K``: the largest number of validation files with one query set (the models scoring one fold); with the
    runs' ``models`` (:func:`whale.ensemble.models.model_keys`), of distinct models among them."""
    from whale.ensemble.models import models_in_groups

    sets: dict[frozenset, list[int]] = {}
    for i, p in enumerate(val_paths):
        sets.setdefault(frozenset(read_header(Path(p), True)["query"].tolist()), []).append(i)
    keys = list(models) if models is not None else [str(i) for i in range(len(val_paths))]
    return models_in_groups(keys, list(sets.values()))


def resolve_fusion(fusion: str | None, n_runs: int, val_paths: Sequence[Path], *, tune_weights: bool = False,
                   weights_given: bool = False, models: Sequence[str] | None = None) -> tuple[str, str]:
    """``(fusion, why)``: ``fusion`` (``--fusion``) if given (checked against ``--tune-weights``), else the default:
    :data:`DEFAULT_RULE` for runs of several models (:func:`models_of` >= 2), each with its validation file,
    with neither ``--weights`` (``weights_given``) nor ``--tune-weights``; else ``scores``. Whatever the threshold
    mode: a threshold ``--tune`` kept is then read back (``--threshold NAME.threshold.json``) on the same scale.

    Raises:
        ConfigError: a calibrated rule with ``--tune-weights`` (whose grid weighs raw scores).
    """
    if fusion is not None:
        if fusion in RULES and tune_weights:
            raise ConfigError(f"--fusion {fusion} combines calibrated probabilities; --tune-weights searches "
                              "weights of raw scores (--fusion scores): give one of them")
        return fusion, "--fusion"
    if tune_weights:
        return "scores", "--tune-weights searches weights of the raw scores"
    if n_runs < 2:
        return "scores", "one run"
    if weights_given:
        return "scores", "--weights weigh the raw scores (--fusion logodds|mean to calibrate them)"
    if not all(Path(p).is_file() for p in val_paths):
        return "scores", "not every run has validation scores to calibrate"
    if models_of(val_paths, models) < 2:
        return "scores", "the runs are folds of one model (each validation file its own queries)"
    return DEFAULT_RULE, "the default for runs of several models"


def calibrate_runs(runs: Sequence[Path], val_paths: Sequence[Path], rule: str, open_label: str,
                   method: str = "isotonic", log=None, models: Sequence[str] | None = None) -> Fusion:
    """Fit every run's :class:`PairCalibration` on its own validation file; the :class:`Fusion` of ``rule``.

    Raises:
        DataError: a run without validation scores (naming it), or one that cannot be calibrated (no pair of
            one individual, or none of two).
        ConfigError: an unknown rule or method.
    """
    if rule not in RULES:
        raise ConfigError(f"--fusion: expected one of {', '.join(FUSIONS)}, received {rule!r}")
    if method not in METHODS:
        raise ConfigError(f"--calibration: expected one of {', '.join(METHODS)}, received {method!r}")
    missing = [str(p) for p in val_paths if not Path(p).is_file()]
    if missing:
        raise DataError(f"--fusion {rule} calibrates every run on its validation scores; missing: "
                        + ", ".join(missing[:3]))
    cals = []
    for run, path in zip(runs, val_paths):
        val = load_score_file(path, need_query_ids=True)
        try:
            cal = PairCalibration.fit(val.scores, val.query_ids, val.gallery_ids, open_label, method)
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from None
        if log:
            log(f"  {run}: {cal.describe()}")
        cals.append(cal)
    return Fusion(rule, tuple(cals), models_of(val_paths, models), tuple(str(r) for r in runs))


def write_fusion(path, fusion: Fusion) -> Path:
    """Keep ``fusion`` (rule and calibrations) as JSON in ``path``, atomically; returns ``path``."""
    return write_json_atomic(path, fusion.to_dict())


def read_fusion(path) -> Fusion:
    """The :class:`Fusion` :func:`write_fusion` kept in ``path`` (to fuse other score files as that ensemble did).

    Raises:
        DataError: naming ``path``: unreadable, not JSON, or a rule or calibration that is not one.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read the fusion: {exc}") from None
    if not isinstance(raw, dict) or raw.get("rule") not in RULES or not isinstance(raw.get("runs"), list):
        raise DataError(f"{path}: expected a fusion's JSON (rule one of {', '.join(RULES)}, runs a list)")
    models = raw.get("models")
    if isinstance(models, bool) or not isinstance(models, int) or models < 1:
        raise DataError(f"{path}: models: expected a positive integer, received {models!r}")
    cals, runs = [], []
    for i, run in enumerate(raw["runs"]):
        if not isinstance(run, dict):
            raise DataError(f"{path}: runs[{i}]: expected a JSON object")
        cals.append(PairCalibration.from_dict(run.get("calibration"), f"{path}: runs[{i}].calibration"))
        runs.append(str(run.get("run", "")))
    return Fusion(raw["rule"], tuple(cals), models, tuple(runs))
