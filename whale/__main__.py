"""``python -m whale``: the ``whale`` command (:mod:`whale.cli`) without installing the package."""

import sys

from whale.cli import main

if __name__ == "__main__":
    sys.exit(main())
