"""`python -m aotkit`: the same command line as the `aotkit` console script."""

import sys

from aotkit.cli import main

sys.exit(main())
