"""``python -m evalcore.cli``: the same command line as the ``evalcore`` script."""

import sys

from evalcore.cli import main

sys.exit(main())
