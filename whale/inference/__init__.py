"""Inference: branch features, score matrices of a trained run, streaming top-k, the score-file format.

Modules: :mod:`whale.inference.features` (branch features of image batches),
:mod:`whale.inference.runs` (a run's model -> score files), :mod:`whale.inference.topk`
(streaming top-k without a full matrix) and :mod:`whale.inference.scorefile` (the format,
re-exported here; it needs no Keras, so ``ensemble.py`` starts without TensorFlow).
``python -m whale.inference --run RUN --data DIR --out FILE.npz`` scores any Kaggle-format folder.
"""
from whale.inference.scorefile import ScoreFile, ScoreFileError, load_score_file, score_path, write_scores

__all__ = ["ScoreFile", "ScoreFileError", "load_score_file", "score_path", "write_scores"]
