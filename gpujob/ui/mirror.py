"""The mirror's lines in ``gpujob status``: what each target holds, what it is sending, its lag."""

from __future__ import annotations

import time
from typing import Any

from gpujob.bundle import import_remote
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView

format_duration = import_remote("core.protocol").format_duration


def _ago(t: Any, now: float) -> str:
    if not isinstance(t, (int, float)):
        return ""
    s = max(0.0, now - t)
    return "just now" if s < 60 else f"{int(s // 60)} min ago" if s < 3600 else f"{s / 3600:.1f} h ago"


def mirror_lines(m: dict[str, Any], now: float | None = None) -> list[str]:
    """One line per target: ``mirrored checkpoint-400 (2 min ago) · uploading checkpoint-500 43 %``.
    ``m`` is already neutralised and markup-escaped (job_panel's ``clean_doc(..., markup=True)``)."""
    now = now or time.time()
    lines = []
    for t in m.get("targets") or []:
        parts = [f"mirrored {t['mirrored']} ({_ago(t.get('mirrored_at'), now)})"
                 if t.get("mirrored") else "nothing mirrored yet"]
        up = t.get("uploading")
        if up:
            parts.append(f"uploading {up.get('name')} {up.get('percent') or 0} %")
        if t.get("error"):
            since = format_duration(now - t["failing_since"]) if t.get("failing_since") else "?"
            err = str(t["error"])[:160].rstrip("\\")  # a cut never leaves a markup escape open
            parts.append(f"[red]failing for {since}: {err}[/]")
        lines.append(" · ".join(parts) + f"  [dim]→ {t.get('target')}[/]")
    if m.get("lag_s"):
        lines.append(f"lag {format_duration(m['lag_s'])} (the newest complete checkpoint is only on the instance)")
    return lines


def mark_mirror(doc: JSONObject) -> JSONObject:
    """For the dashboard's job page: each checkpoint's mirror cell (``✓ mirrored``, ``uploading 43 %``)
    and ``mirror_lines``, the lines ``status`` shows, as plain text (the page sets them as text)."""
    view = JobView(doc)
    m = view.mirror
    if not isinstance(m, dict):
        return doc
    from rich.text import Text

    from gpujob.ui.neutral import clean_doc

    targets = [t for t in m.get("targets") or [] if isinstance(t, dict)]
    for ck in view.checkpoints or []:
        cells = []
        for t in targets:
            up = t.get("uploading") or {}
            if up.get("name") == ck.get("name"):
                cells.append(f"uploading {up.get('percent') or 0} %")
            elif t.get("mirrored") == ck.get("name"):
                cells.append("✓ mirrored")
        if cells:
            ck["mirror"] = " · ".join(dict.fromkeys(cells))  # one target or several saying the same: once
    lines = mirror_lines(clean_doc(m, markup=True), view.now)
    doc["mirror_lines"] = [Text.from_markup(line).plain for line in lines]
    return doc
