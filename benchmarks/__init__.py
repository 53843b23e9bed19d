"""Speed and accuracy benchmarks: scripts that print figures (never asserted), grouped by what they measure.

Each script runs from the checkout's root as ``python benchmarks/<group>/<name>.py ...``; docs/benchmarks.md
says which script backs which row of README.md's results.

* ``flukes/``: the real humpback flukes (``../shared/data/humpback``): the keypoint matcher, learned runs and their
  fusion on Kaggle-like splits, the catalogue and review page on real photos.
* ``seeds/``: the seed papers' tables and toy experiments, and the toolkit's accuracy on the synthetic
  competition, Omniglot, lions, ORL and MNIST.
* ``speed/``: scoring, mining and training speed, and the machinery's robustness and correctness checks.
* ``gpu/``: what a lent GPU session runs (``gpu_suite.py`` and its ``steps/``), the wheels it carries and the
  rates it measured (``rates/``).
* ``common.py``: what every group shares (the mini-competitions, the pixel baseline, seeds and reports).
* ``harness.py``: the skeleton of a measuring benchmark (rows kept in ``results.json`` and resumed, seeds one by one,
  ``--report`` tables, the final JSON line): a benchmark states its rows.
"""
