"""The names earlier versions imported from here: the families (:mod:`whale.objectives.base`),
:func:`build_objective` (:mod:`whale.objectives.registry`) and the Keras losses (each in its objective's module,
e.g. :mod:`whale.objectives.triplet`).

==============  =================  ==============================  ===========================================
objective       batches            on the branch                   loss
==============  =================  ==============================  ===========================================
head            labelled pairs     the paper's head                binary cross-entropy (seed 003)
sglobal         labelled pairs     the paper's head                global loss on its log-odds (seed 001, eq. 8)
contrastive     labelled pairs     Embedding -> PairDistance       DrLIM, margin m (seed 000/002's baseline)
probabilistic   labelled pairs     Embedding -> SimilarityModel    cross-entropy of g(h1, h2; alpha) (seed 004)
triplet         P x K identities   Embedding (linear, 256)         semi-hard triplet, margin 0.5 (seed 002)
global          P x K identities   Embedding (unit norm)           global loss, t, lambda, pairs (seed 001)
tgloss          P x K identities   Embedding (unit norm)           ratio triplet + global loss (seed 001)
arcface         P x K identities   Embedding -> SubCenterArcFace   softmax CE with per-identity margins
==============  =================  ==============================  ===========================================
"""
from whale.objectives.base import HeadObjective, IdentityObjective, Objective, PairObjective
from whale.objectives.registry import build_objective
from whale.objectives.arcface import ArcFaceLoss
from whale.objectives.contrastive import ContrastiveLoss
from whale.objectives.global_ import GlobalLoss
from whale.objectives.sglobal import SimilarityGlobalLoss
from whale.objectives.tgloss import TGLoss
from whale.objectives.triplet import TripletLoss

__all__ = ["Objective", "HeadObjective", "PairObjective", "IdentityObjective", "build_objective",
           "ContrastiveLoss", "TripletLoss", "GlobalLoss", "TGLoss", "SimilarityGlobalLoss", "ArcFaceLoss"]
