"""`python -m laneboard`: the command line."""

import sys

from laneboard.tui.cli import main

sys.exit(main())
