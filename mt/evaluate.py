"""``python -m mt.evaluate``: see ``mt.cli.evaluate``."""

import sys

from mt.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
