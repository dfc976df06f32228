"""Remakes the dashboard's screenshots in docs/img (1400×900, docs/dashboard.md shows them).

They are taken by the Chromium tests of tests/gpujob/dashboard/test_dashboard_charts.py, over real jobs on
``local``, at the states those tests assert: this runs them with ``GPUJOB_SHOTS_DIR`` pointing at
docs/img, so a screenshot is always of a page a test has just checked.

    python3 benchmarks/dashboard/screenshots.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    env = dict(os.environ, GPUJOB_SHOTS_DIR=str(REPO / "docs" / "img"))
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(REPO / "tests" / "gpujob" / "dashboard" / "test_dashboard_charts.py")], env=env, cwd=str(REPO))


if __name__ == "__main__":
    sys.exit(main())
