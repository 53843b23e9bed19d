"""Ensemble runs' score files into a Kaggle submission (the method: :mod:`whale.ensemble.cli`; ``whale ensemble``).

    python ensemble.py RUN_DIR [RUN_DIR ...] [--weights W ...]
        (--threshold T | --new-whale-fraction F | --tune) [--calibrate]
        --out submissions/NAME.csv [--sample sample_submission.csv]
"""

import sys

from whale.ensemble.cli import main

if __name__ == "__main__":
    sys.exit(main())
