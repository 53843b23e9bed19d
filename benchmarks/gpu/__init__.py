"""What a lent GPU session measures, from one command, and what it needs to get there.

A GPU comes to few sessions, for minutes, on a bare machine without the toolkit's wheels or data: these files
make that time count. The suite runs every GPU figure in order of value within a budget (docs/gpu.md; the
GPU rows of README row 14); its steps call the one implementation of each figure in the other groups.

* ``gpu_suite.py``: the runner: the steps' registry, the budget, each step in its own process, suite.md.
* ``steps/``: the steps, one family a file (rates, head matrix, mining, objectives, Omniglot, Table I, seed 002,
  flukes).
* ``gpu_flukes.py``: the suite's ``flukes_lite0`` steps: EfficientNet-Lite0 fine-tuned whole on the real flukes.
* ``gpu_wheels.py``: the wheels the GPU machine lacks, downloaded here into ``.whl/``.
* ``rates/``: training rates measured on an H100 (``run_fold.py --plan --rates FILE`` reads them).
"""
