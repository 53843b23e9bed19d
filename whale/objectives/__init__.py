"""Training objectives: what sits on the branch, what a batch holds, the loss, and how features are scored.

The paper's head (pairs, binary cross-entropy) is the default; the other objectives come from the
toolkit's other founding documents (contrastive, triplet with semi-hard mining, the global loss and
TGLoss, the probabilistic similarity models) and from later winners (sub-center ArcFace).
Whatever the objective, a score is "higher = more alike", float32, in [0, 1].

Modules: :mod:`~whale.objectives.objective` (one class per family, :func:`build_objective`, the Keras
losses), :mod:`~whale.objectives.losses` (the loss mathematics, checked against NumPy loops; seed 001's in
:mod:`~whale.objectives.globalloss`),
:mod:`~whale.objectives.layers` (what sits on the branch, saved in ``.keras`` files),
:mod:`~whale.objectives.scorer` (:func:`make_scorer`: one scorer interface for every objective),
:mod:`~whale.objectives.similarity` (seed 004's similarity models of ``objective: probabilistic``).
Importing the package registers the layers and losses, so checkpoints of every objective load.
"""
from whale.objectives.layers import Embedding, PairDistance, SubCenterArcFace
from whale.objectives.objective import Objective, build_objective
from whale.objectives.scorer import EmbeddingScorer, make_scorer
from whale.objectives.similarity import SimilarityModel

__all__ = ["Embedding", "EmbeddingScorer", "Objective", "PairDistance", "SimilarityModel", "SubCenterArcFace",
           "build_objective", "make_scorer"]
