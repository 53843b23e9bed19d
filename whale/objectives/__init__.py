"""Training objectives: what sits on the branch, what a batch holds, the loss, and how features are scored.

The paper's head (pairs, binary cross-entropy) is the default; the other objectives come from the
toolkit's other founding documents (contrastive, triplet with semi-hard mining, the global loss and
TGLoss, the probabilistic similarity models) and from later winners (sub-center ArcFace).
Whatever the objective, a score is "higher = more alike", float32, in [0, 1].

Modules: :mod:`~whale.objectives.registry` (the objectives by name, :func:`build_objective`), one module per
objective (:mod:`~whale.objectives.head`, :mod:`~whale.objectives.triplet`, ...: its declarations, loss and pieces), :mod:`~whale.objectives.base` (the
three families they build on), :mod:`~whale.objectives.losses` (the loss mathematics, checked against NumPy loops;
seed 001's in :mod:`~whale.objectives.globalloss`; the in-batch triplet miners in
:mod:`~whale.objectives.miners`), :mod:`~whale.objectives.distances` (every distance, once),
:mod:`~whale.objectives.layers` (what sits on the branch, saved in ``.keras`` files),
:mod:`~whale.objectives.scorer` (:func:`make_scorer`: one scorer interface for every objective),
:mod:`~whale.objectives.similarity` (seed 004's similarity models of ``objective: probabilistic``).
Importing the package imports every objective's module (:func:`~whale.objectives.registry.load_objectives`), so the
layers and losses of every objective are registered and their checkpoints load.
"""
from whale.objectives.base import Objective
from whale.objectives.layers import Embedding, PairDistance, SubCenterArcFace
from whale.objectives.registry import build_objective, load_objectives
from whale.objectives.scorer import EmbeddingScorer, make_scorer
from whale.objectives.similarity import SimilarityModel

__all__ = ["Embedding", "EmbeddingScorer", "Objective", "PairDistance", "SimilarityModel", "SubCenterArcFace",
           "build_objective", "make_scorer"]

load_objectives()
