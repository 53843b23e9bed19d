"""Mining: the pairs the siamese net trains on. Algorithm 1 (adversarial negatives), candidates, positives.

:func:`make_miner` gives the trainer's :class:`Miner` (dense, the paper's, pruned, or auto: by size);
:mod:`whale.mining.assignment` is Algorithm 1 itself on a score matrix or candidate pairs;
:mod:`whale.mining.mixing` swaps a share of its negatives for random ones (``negatives_mix``).
"""
from whale.mining.assignment import (
    NoValidAssignment,
    mine_negatives,
    mine_negatives_sparse,
    validate_negative_pairs,
)
from whale.mining.candidates import candidate_counts, candidates, proxy_scores
from whale.mining.miners import (AUTO_EXACT_MAX, AutoMiner, DenseMiner, Miner, MiningStats, PrunedMiner, make_miner,
                                 mine_pruned)
from whale.mining.mixing import mix_random_negatives
from whale.mining.positives import positive_pairs

__all__ = [
    "AUTO_EXACT_MAX",
    "AutoMiner",
    "DenseMiner",
    "Miner",
    "MiningStats",
    "NoValidAssignment",
    "PrunedMiner",
    "candidate_counts",
    "candidates",
    "make_miner",
    "mine_negatives",
    "mine_negatives_sparse",
    "mine_pruned",
    "mix_random_negatives",
    "positive_pairs",
    "proxy_scores",
    "validate_negative_pairs",
]
