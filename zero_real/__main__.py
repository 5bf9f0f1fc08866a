"""`python -m zero_real ...` is the `zero-real` command (where the package is on the path but not
installed, e.g. a GPU box that runs the source tree)."""

import sys

from zero_real.cli import main

sys.exit(main())
