"""``python -m whale.catalogue`` (see :mod:`whale.catalogue.cli`)."""
import sys

from whale.catalogue.cli import main

if __name__ == "__main__":
    sys.exit(main())
