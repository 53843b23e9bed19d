"""The miner the trainer calls: one interface, a dense and a pruned implementation of Algorithm 1.

A :class:`Miner` turns the current model (its head as a :class:`whale.models.HeadScorer`
and the branch features of the training images) into the negative pairs of the next
``epochs`` epochs::

    miner = make_miner("exact")                       # or "pruned", candidates=100
    negatives = miner.mine(scorer, features, ids, k=1.0, epochs=5, rng=rng)
    print(miner.last_stats.line())                    # what was mined, how hard, how fast

* :class:`DenseMiner` (``mining: exact``, the paper): the whole train-vs-train score matrix,
  then :func:`whale.mining.assignment.mine_negatives` (``lap.lapjv``).
* :class:`PrunedMiner` (``mining: pruned``): the head scores only each image's candidate
  partners (:func:`whale.mining.candidates.candidates`), then the sparse assignment
  (:func:`whale.mining.assignment.mine_negatives_sparse`, ``lap.lapmod``). Pairs the sparse
  solver had to add outside the candidates are reported as fallback pairs.
* :class:`AutoMiner` (``mining: auto``): dense up to :data:`AUTO_EXACT_MAX` images, pruned above,
  decided at each mining by the number of images (a stage on another dataset, or ``flip_ids``'s
  doubled set, may cross the line); its statistics name the miner that ran.

Both check their output (:func:`whale.mining.assignment.validate_negative_pairs`: every image
once per column and epoch, never a same-id pair, no ordered pair repeated) and record
:class:`MiningStats`: the mean head score of the mined pairs (higher = harder negatives),
the fallback pairs, and the seconds spent scoring and solving.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from whale.core.arrays import as_features
from whale.config import MINING_MODES
from whale.mining.assignment import mine_negatives, mine_negatives_sparse, validate_negative_pairs
from whale.mining.candidates import candidate_counts, candidates

__all__ = ["AUTO_EXACT_MAX", "MiningStats", "Miner", "DenseMiner", "PrunedMiner", "AutoMiner", "make_miner",
           "mine_pruned"]

AUTO_EXACT_MAX = 3000
"""``mining: auto`` mines exactly up to this many training images and pruned above. Dense ``lapjv``
solves the whole ``n x n`` cost matrix: at n = 3,000 one mining took 7-32 s (K = 0.25 / 0.05,
docs/scoring.md, 2 loaded CPU cores), at 7,340 (the real flukes of issue 41, K = 0.25) 597 s,
about the ``n^3`` growth of the solver; pruned mining keeps to ``n x candidates`` pairs (one epoch
at n = 15,697: 175 s on the same loaded cores) and mined as hard at 3,000 (mean head score 0.998
of the dense miner's). Below the line exact costs seconds and is the paper's; above it, minutes
per mining, more than the epochs between minings on 2 CPU cores."""


@dataclass(frozen=True)
class MiningStats:
    """What one call of :meth:`Miner.mine` did.

    ``mean_score``: mean head probability of the mined pairs over all epochs (1 = the model
    confuses them completely); ``pairs_scored``: head evaluations spent; ``fallback_pairs``:
    mined pairs that were not candidates (pruned mining only; random valid partners).
    """

    mode: str
    images: int
    epochs: int
    k: float
    mean_score: float
    pairs_scored: int
    fallback_pairs: int
    seconds: float

    def line(self) -> str:
        """One log line; names the mode so a run's log says how its negatives were mined."""
        fallback = f", {self.fallback_pairs} fallback partners" if self.mode == "pruned" else ""
        return (f"mined {self.epochs} epochs of negatives ({self.mode}) at K={self.k:g} for {self.images} "
                f"images in {self.seconds:.1f} s: mean mined score {self.mean_score:.4f}, "
                f"{self.pairs_scored} head evaluations{fallback}")


class Miner:
    """Negatives for the next ``epochs`` epochs from the current head and branch features."""

    mode = ""

    def __init__(self, progress: bool = False):
        self.progress = bool(progress)
        self.last_stats: MiningStats | None = None

    def mine(self, scorer, features, ids, k: float, epochs: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Algorithm 1 on ``features`` scored by ``scorer``.

        Args:
            scorer: a :class:`whale.models.HeadScorer` of the current head.
            features: ``[n, d]`` float branch features of the training images (no ``new_whale``).
            ids: ``[n]`` labels.
            k: the noise scale K; epochs: how many epochs of negatives; rng: the generator.

        Returns:
            ``epochs`` arrays ``(n, 2)`` int64 ``(i, x[i])``, checked; :attr:`last_stats` is set.
        """
        t0 = time.time()
        features = as_features(features, "features", scorer.d)
        before = scorer.pairs_computed
        pairs, mean_score, fallback = self._mine(scorer, features, ids, float(k), int(epochs), rng)
        validate_negative_pairs(pairs, ids, len(features))
        self.last_stats = MiningStats(self.mode, len(features), len(pairs), float(k), mean_score,
                                      scorer.pairs_computed - before, fallback, time.time() - t0)
        return pairs

    def _mine(self, scorer, features, ids, k, epochs, rng) -> tuple[list[np.ndarray], float, int]:
        raise NotImplementedError


class DenseMiner(Miner):
    """The paper's miner: the exact train-vs-train score matrix and a dense assignment."""

    mode = "exact"

    def _mine(self, scorer, features, ids, k, epochs, rng):
        scores = scorer.matrix(features, None, progress=self.progress)
        pairs = mine_negatives(scores, ids, k, epochs, rng)
        mined = np.concatenate(pairs)
        return pairs, float(scores[mined[:, 0], mined[:, 1]].mean()), 0


class PrunedMiner(Miner):
    """Algorithm 1 on candidate pairs only: proxy top-``m`` + random partners, exact head scores.

    ``m`` and ``n_random`` follow :func:`whale.mining.candidates.candidate_counts` (which
    shrinks the proxy part when ``k >= 1``); ``similarity`` is the proxy of the top candidates.
    """

    mode = "pruned"

    def __init__(self, m: int = 100, n_random: int | None = None, similarity: str = "cosine",
                 maxval: float = 10000.0, progress: bool = False):
        super().__init__(progress)
        self.m, self.n_random, self.similarity, self.maxval = int(m), n_random, similarity, maxval

    def _mine(self, scorer, features, ids, k, epochs, rng):
        n = len(features)
        m_top, r = candidate_counts(self.m, k, self.n_random)
        rows, cols = candidates(features, ids, m=m_top, n_random=r, rng=rng, similarity=self.similarity,
                                progress=self.progress, scorer=scorer)
        scores = scorer.pairs_index(features, features, rows, cols, progress=self.progress)
        pairs = mine_negatives_sparse(rows, cols, scores, ids, k, epochs, rng, maxval=self.maxval)
        mined = np.concatenate(pairs)
        keys = rows * n + cols  # sorted: candidates come in CSR order
        wanted = mined[:, 0] * n + mined[:, 1]
        pos = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        is_candidate = (keys[pos] == wanted) if len(keys) else np.zeros(len(wanted), bool)
        mined_scores = np.empty(len(mined), np.float32)
        mined_scores[is_candidate] = scores[pos[is_candidate]]
        off = ~is_candidate
        if off.any():  # fallback partners were never scored: score them for the statistics
            mined_scores[off] = scorer.pairs_index(features, features, mined[off, 0], mined[off, 1])
        return pairs, float(mined_scores.mean()), int(off.sum())


class AutoMiner(Miner):
    """:class:`DenseMiner` for up to ``exact_max`` images (:data:`AUTO_EXACT_MAX`), :class:`PrunedMiner` above.

    :attr:`last_stats` is the stats of the miner that ran (its ``mode`` says which).
    """

    mode = "auto"

    def __init__(self, candidates: int = 100, exact_max: int | None = None, progress: bool = False):
        super().__init__(progress)
        self.exact_max = int(AUTO_EXACT_MAX if exact_max is None else exact_max)
        self.dense, self.pruned = DenseMiner(progress), PrunedMiner(m=candidates, progress=progress)

    def choose(self, n_images: int) -> Miner:
        """The miner for ``n_images`` training images."""
        return self.dense if n_images <= self.exact_max else self.pruned

    def mine(self, scorer, features, ids, k: float, epochs: int, rng: np.random.Generator) -> list[np.ndarray]:
        miner = self.choose(len(features))
        pairs = miner.mine(scorer, features, ids, k, epochs, rng)
        self.last_stats = miner.last_stats
        return pairs


def make_miner(mode: str, candidates: int = 100, progress: bool = False) -> Miner:
    """The miner of a config's ``mining`` key: ``"exact"`` -> :class:`DenseMiner`, ``"pruned"`` ->
    :class:`PrunedMiner`, ``"auto"`` -> :class:`AutoMiner` (:data:`AUTO_EXACT_MAX`)."""
    if mode == "exact":
        return DenseMiner(progress=progress)
    if mode == "pruned":
        return PrunedMiner(m=candidates, progress=progress)
    if mode == "auto":
        return AutoMiner(candidates, progress=progress)
    raise ValueError(f"mining: expected one of {', '.join(MINING_MODES)}, received {mode!r}")


def mine_pruned(scorer, features, ids, k, epochs, rng, m: int = 100, n_random: int | None = None,
                similarity: str = "cosine", maxval: float = 10000.0, progress: bool = False):
    """Algorithm 1 on candidate pairs only, as a function (:class:`PrunedMiner` with these arguments).

    Returns:
        list of ``epochs`` arrays ``(n, 2)`` int64 ``(i, x[i])``: every image once per column
        per epoch, never a same-id pair, no ordered pair repeated across epochs (the rules of
        :func:`whale.mining.assignment.mine_negatives_sparse`, which solves the assignment).
    """
    miner = PrunedMiner(m=m, n_random=n_random, similarity=similarity, maxval=maxval, progress=progress)
    return miner.mine(scorer, features, ids, k, epochs, rng)
