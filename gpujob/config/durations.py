"""Durations: defined once, in ``remote/protocol.py`` (the agent reads the same forms).

Kept only for the laptop modules that still import them from here (cli/jobs.py, cli/tools.py, ui/jobs.py);
new code imports ``import_remote("protocol")``. Delete this file once they do.
"""

from __future__ import annotations

from gpujob.bundle import import_remote

parse_duration = import_remote("protocol").parse_duration
format_duration = import_remote("protocol").format_duration
