"""``python -m gpujob.cli``."""

import sys

from gpujob.cli import main

sys.exit(main())
