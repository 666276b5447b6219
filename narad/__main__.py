"""`python -m narad`: the `narad` command line (narad/cli.py)."""

import sys

from narad.cli import main

if __name__ == "__main__":
    sys.exit(main())
