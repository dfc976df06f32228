"""``gpujob doctor``: one line per check, marked ✓ (ok), ! (warn) or ✗ (error), with the remedy under it."""

from __future__ import annotations

from typing import Any

from gpujob.ui.output import console

MARKS = {"ok": "✓", "warn": "!", "error": "✗"}
COLORS = {"ok": "green", "warn": "yellow", "error": "red"}


def doctor_report(host: Any, rep: dict[str, Any]) -> None:
    from gpujob.ui.neutral import clean_doc

    rep = clean_doc(rep, markup=True)  # the instance wrote it: no escape sequence, no markup
    c = console()
    c.print(f"[bold]{host.name}[/] ({host.address}, preset {host.preset}, root {rep.get('root')})")
    for ch in rep["checks"]:
        level = ch["level"]
        c.print(f"[{COLORS.get(level, 'red')}]{MARKS.get(level, '?')} {ch['name']:<14}[/] {ch['message']}")
        if ch["remedy"] and level != "ok":
            c.print(f"  [dim]→ {ch['remedy']}[/]")
