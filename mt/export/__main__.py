"""``python -m mt.export``: see ``mt.export.cli``."""

import sys

from mt.export.cli import main

if __name__ == "__main__":
    sys.exit(main())
