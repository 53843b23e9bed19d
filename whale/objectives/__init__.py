"""Training objectives: what sits on the branch, what a batch holds, the loss, and how features are scored.

The paper's head (pairs, binary cross-entropy) is the default; the other objectives come from the
toolkit's other founding documents (contrastive, triplet with semi-hard mining, the global loss and
TGLoss, the probabilistic similarity models) and from later winners (sub-center ArcFace).
Whatever the objective, a score is "higher = more alike", float32, in [0, 1].
"""
