"""Which runs are one model: the folds of one config count once in an ensemble, whatever their number.

The paper's recipe trains a model per fold and averages the folds. Given several models, each with its folds, an
ensemble weighs the models, not the score files: the folds of a model share its weight. A run's model is what its
score file's identity (:func:`whale.inference.scorefile.score_identity`) says besides where and when it ran
(:data:`NOT_THE_MODEL`: the run's folder and id, its fold, its best epoch, the code's revision, the split, the
backend): the config's hash, its seed, the checkpoint or snapshot it scored, what it was initialised from, a keypoint
matcher's name. A file without an identity (an older version's) is a model of its own.

So the four folds of a network fused with a keypoint matcher scored on fold 0 are two models of equal weight (the
network's folds a quarter of it each), not five runs of which four are the network; and fold 0's validation file,
where both models score the same queries, weighs them as the test does, one model against the other
(:func:`validation_weights`), while the validation files of folds 1-3, which only the network scores, are not where
a threshold of the two fused can be tuned (:func:`complete_groups`). Runs of equal numbers of folds, one per model
included, keep the weights they had before this module: equal per run.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

NOT_THE_MODEL = ("run_id", "run", "fold", "epoch", "git_revision", "split", "backend")
"""Identity fields that say where and when a run ran, not which model it is."""


def model_keys(identities: Sequence[dict | None], paths: Sequence) -> list[str]:
    """One key per run: its score file's identity without :data:`NOT_THE_MODEL` (its path where it has none)."""
    keys = []
    for ident, path in zip(identities, paths):
        if not ident:
            keys.append(f"path:{path}")
            continue
        keys.append(json.dumps({k: v for k, v in ident.items() if k not in NOT_THE_MODEL}, sort_keys=True,
                               default=str))
    return keys


def model_weights(keys: Sequence[str]) -> np.ndarray:
    """``[n_runs]`` summing to 1: every model the same weight, shared equally by its runs (its folds)."""
    keys = list(keys)
    models = sorted(set(keys))
    counts = {k: keys.count(k) for k in models}
    return np.array([1.0 / (len(models) * counts[k]) for k in keys], np.float64)


def validation_weights(keys: Sequence[str], weights: Sequence[float], members: Sequence[int]) -> np.ndarray:
    """The weights of the validation files ``members`` (indices into the runs) that score one set of queries: each
    model its whole weight (the sum of its runs' ``weights``), shared by its files among them; summing to 1."""
    weights = np.asarray(weights, np.float64)
    keys = list(keys)
    total = {k: float(weights[[i for i, kk in enumerate(keys) if kk == k]].sum()) for k in set(keys)}
    here = [keys[i] for i in members]
    w = np.array([total[k] / here.count(k) for k in here], np.float64)
    return w / w.sum()


def complete_groups(keys: Sequence[str], members: Sequence[Sequence[int]]) -> list[int]:
    """The indices of the validation groups (each a list of run indices scoring one set of queries) in which every
    model of ``keys`` scores: where the models fused can be validated together."""
    models = set(keys)
    return [g for g, mem in enumerate(members) if {keys[i] for i in mem} == models]


def models_in_groups(keys: Sequence[str], members: Sequence[Sequence[int]]) -> int:
    """``K``: the most distinct models scoring one set of validation queries (the log-odds rule's count)."""
    return max((len({keys[i] for i in mem}) for mem in members), default=1)
