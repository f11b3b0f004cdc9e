"""``python -m mt.eval``: the same as ``python -m mt.evaluate``."""

import sys

from mt.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
