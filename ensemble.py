"""Ensemble runs' score files into a Kaggle submission (see ``whale/ensemble.py`` for the method).

    python ensemble.py RUN_DIR [RUN_DIR ...] [--weights W ...]
        (--threshold T | --new-whale-fraction F | --tune) [--calibrate]
        --out submissions/NAME.csv [--sample sample_submission.csv]
"""

import sys

from whale.ensemble.cli import main
from whale.errors import WhaleError

if __name__ == "__main__":
    try:
        sys.exit(main())
    except WhaleError as err:
        print(f"ensemble.py: error: {err}", file=sys.stderr)
        sys.exit(2)
