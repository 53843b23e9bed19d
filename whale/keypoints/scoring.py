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
        """Scores of ``evidence`` and ``votes`` (arrays of one shape) as float32 of that shape."""
        total = np.asarray(evidence, np.float64) + self.vote_weight * np.asarray(votes, np.float64)
        return (total / (total + self.scale)).astype(np.float32)
