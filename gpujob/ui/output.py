"""Output every command shares: a rich console (imported only when something is drawn), JSON, errors."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable


def console(stderr: bool = False) -> Any:
    """rich's console, its text passed through ``neutral.clean`` (no host's escape sequence is drawn)."""
    from gpujob.ui.neutral import console_class

    return console_class()(stderr=stderr, highlight=False)


def print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def error(e: Exception, as_json: bool) -> None:
    from gpujob.errors import GpujobError

    if as_json:
        doc = e.to_json() if isinstance(e, GpujobError) else {"error": str(e), "kind": type(e).__name__}
        print_json(doc)
        return
    from rich.markup import escape

    from gpujob.ui.neutral import clean

    c = console(stderr=True)  # causes quote what the user typed: brackets in it are text, not markup
    if isinstance(e, GpujobError):
        c.print(f"[bold red]error:[/] {escape(clean(e.cause))}", markup=True, soft_wrap=True)
        if e.remedy:
            c.print(f"  [yellow]→[/] {escape(clean(e.remedy))}", soft_wrap=True)
    else:
        c.print(f"[bold red]error:[/] {escape(clean(str(e)))}", soft_wrap=True)


def show(doc: Any, as_json: bool, draw: Callable[[Any], None]) -> None:
    """What a command prints: ``doc`` as JSON with ``--json``, else ``draw(doc)``."""
    if as_json:
        print_json(doc)
    else:
        draw(doc)
