"""The score rule: a gallery photo's verified evidence and votes -> a score in [0, 1) (the matcher's step 3).

``score = t / (t + scale), t = evidence + vote_weight * votes``: the score files of the toolkit
(:mod:`whale.inference.scorefile`), so the per-id maximum, the ``new_whale`` threshold and the ensemble treat
it like a trained run's; a threshold on it is a threshold on verified evidence. :class:`EvidenceScore` is the
rule built once from the config (:class:`~whale.keypoints.config.VerifyConfig`) and handed to the matcher.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whale.keypoints.config import VerifyConfig

BLOCK = 1 << 22
"""Scores worked out at a time (32 MB of float64 each)."""


def evidence_to_score(evidence, votes, cfg: VerifyConfig) -> np.ndarray:
    """``t / (t + scale), t = evidence + vote_weight * votes`` as float32 (module docstring)."""
    return EvidenceScore.of(cfg)(evidence, votes)


@dataclass(frozen=True)
class EvidenceScore:
    """``t / (t + scale), t = evidence + vote_weight * votes`` (module docstring).

    Example:
        >>> EvidenceScore(vote_weight=0.0, scale=1.0)(np.array([1.0, 3.0]), np.zeros(2))
        array([0.5 , 0.75], dtype=float32)
    """

    vote_weight: float = 0.001
    scale: float = 1.0

    @classmethod
    def of(cls, cfg: VerifyConfig) -> "EvidenceScore":
        return cls(vote_weight=cfg.vote_weight, scale=cfg.scale)

    def __call__(self, evidence, votes) -> np.ndarray:
        """Scores of ``evidence`` and ``votes`` (arrays of one shape) as float32 of that shape, worked out in
        float64 :data:`BLOCK` values at a time (a whole-matrix float64 temporary would take GBs at the
        competition's size)."""
        evidence, votes = np.asarray(evidence), np.asarray(votes)
        out = np.empty(evidence.shape, np.float32)
        e, v, o = evidence.reshape(-1), votes.reshape(-1), out.reshape(-1)
        for lo in range(0, e.size, BLOCK):
            total = e[lo:lo + BLOCK].astype(np.float64) + self.vote_weight * v[lo:lo + BLOCK].astype(np.float64)
            o[lo:lo + BLOCK] = total / (total + self.scale)
        return out
