"""``python -m whale.boxes`` (see :mod:`whale.boxes.cli`)."""
import sys

from whale.boxes.cli import main

if __name__ == "__main__":
    sys.exit(main())
