"""``python -m whale.explain`` (see :mod:`whale.explain.cli`)."""
import sys

from whale.explain.cli import main

if __name__ == "__main__":
    sys.exit(main())
