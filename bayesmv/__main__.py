"""``python -m bayesmv``: the same as the ``bayesmv`` command."""

import sys

from bayesmv.cli import main

# The guard matters: PyMC runs chains in child processes, and where they are spawned rather
# than forked (macOS, Windows, Python >= 3.14) each child re-imports this module.
if __name__ == "__main__":
    sys.exit(main())
