"""``gpujob ui``: the local dashboard (gpujob/dashboard/), its web framework imported only here."""

from __future__ import annotations

import argparse


def cmd_ui(args: argparse.Namespace) -> int:
    from gpujob.dashboard.server import serve

    return serve(port=args.port or 0, only=args.host, interval=args.interval, open_browser=args.open,
                 as_json=args.json, pull_dir=args.pull_dir)
