#!/usr/bin/env python
"""Train one fold of one model config: a thin entry point over :mod:`whale.training.cli` (``whale train``).

Example:
    python run_fold.py --config configs/demo.yaml --fold 0 --data data/synthetic --out runs/demo
"""

import sys

from whale.training.cli import main

if __name__ == "__main__":
    sys.exit(main())
