"""The GPU suite's steps, one family of measurements a file; :mod:`benchmarks.gpu.gpu_suite` registers and runs them.

Each ``step_*`` function takes the suite's context (``ctx.quick``, ``ctx.workers``, ``ctx.work``: ``work/`` of the
output folder) and the keyword arguments of its entry in the suite's ``STEPS``, and returns the step's figures as
a dict (a ``skipped`` key: it decided not to measure). No file here imports Keras at module level: the suite's
parent process imports them all and leaves the GPU's memory to the steps' own processes.

* ``features.py``: what the scoring steps time: the hard world of :mod:`benchmarks.speed.bench_scoring` with
  Kaggle's images-per-id tail, and a random head.
* ``rates.py``: ``rates_*``: model-only, pipeline-only and end-to-end training pairs/s
  (:mod:`benchmarks.speed.bench_train`) of a branch, size and precision.
* ``head_matrix.py``: ``head_matrix``: the exact train-vs-train head matrix at Kaggle's 15,697 images.
* ``mining.py``: ``mining_pruned``, ``mining_exact``: the trainer's miners at that size.
* ``objectives.py``: ``objectives``: each embedding objective's exact score matrix at that size.
* ``omniglot.py``: ``omniglot_seed0..2``: ``benchmarks/seeds/omniglot.py --gpu``, one seed a step.
* ``homography.py``: ``homography_<row>``: seed 000's Table I at the paper's scale, one row a step.
* ``seed002.py``: ``seed002_triplet``: seed 002's Table II protocol on the carried flukes, the 5 folds at once.
* ``flukes.py``: ``flukes_lite0``, ``flukes_lite0_head``: EfficientNet-Lite0 from ImageNet fine-tuned on the
  real flukes (:mod:`benchmarks.gpu.gpu_flukes`).
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
"""The checkout (configs/, the carried .seed002_data)."""
