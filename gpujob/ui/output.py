"""Output every command shares: a rich console (imported only when something is drawn), JSON, errors."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable

STATE_STYLE = {
    "queued": "cyan", "pending": "cyan", "requeued": "yellow", "running": "green", "restarting": "yellow", "succeeded": "bold green",
    "failed": "bold red", "stopped": "magenta", "autostopped": "magenta", "lost": "bold red",
    "moved": "blue",
}


def console(stderr: bool = False) -> Any:
    """rich's console, its text passed through ``neutral.clean`` (no host's escape sequence is drawn)."""
    from gpujob.ui.neutral import console_class

    stream = sys.stderr if stderr else sys.stdout
    # into a pipe or a file a line is never broken (a command in it would no longer paste); tables still fit
    return console_class()(stderr=stderr, highlight=False, soft_wrap=not _is_tty(stream))


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def print_json(doc: Any) -> None:
    """``doc`` as strict JSON (every parser reads it: no ``NaN``/``Infinity``; see ``finite``)."""
    sys.stdout.write(json.dumps(finite(doc), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


def finite(doc: Any) -> Any:
    """``doc`` with each non-finite float (a diverged loss: ``nan``, ``inf``) as ``null``, and the
    object holding it flagged: ``"nonfinite": {"loss": "nan"}`` (the path below that object,
    list indices included: ``"loss.3.1"``). The value is kept, in words, not lost (docs/json.md)."""
    flags: dict[str, str] = {}
    out = _finite(doc, "", flags)
    return out


def _finite(v: Any, path: str, flags: dict[str, str]) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        flags[path] = "nan" if v != v else ("inf" if v > 0 else "-inf")
        return None
    if isinstance(v, dict):
        mine: dict[str, str] = {}
        out = {k: _finite(x, str(k), mine) for k, x in v.items()}
        if mine:
            out["nonfinite"] = {**(out.get("nonfinite") or {}), **mine} if isinstance(out.get("nonfinite"), dict) else mine
        return out
    if isinstance(v, (list, tuple)):
        return [_finite(x, f"{path}.{i}", flags) for i, x in enumerate(v)]
    return v


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
