"""``python -m mt.translate``: see ``mt.cli.translate``."""

import sys

from mt.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
