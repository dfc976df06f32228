"""A table of one-line cells, padded by hand (``gpujob runs`` over a big ledger), and sparklines.

rich's Table measures every cell through its renderables: 50 runs cost ~35 ms of CPU to draw and
~30 ms to import rich's console, most of what ``runs`` costs. A ledger listing is plain text in
columns, so it is drawn here with the same look (bold header, coloured state, ``…`` where a
column is cut to fit the width) and no rich at all. Host-made text is cleaned first (``neutral``).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import unicodedata
from collections.abc import Sequence

from gpujob.ui.neutral import clean

# rich style names (``STATE_STYLE``) as SGR codes
SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
       "cyan": "36", "white": "37"}


def colour() -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set or ``TERM=dumb`` (as rich does)."""
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def styled(text: str, style: str, on: bool) -> str:
    codes = ";".join(SGR[w] for w in style.split() if w in SGR)
    return f"\x1b[{codes}m{text}\x1b[0m" if on and codes else text


def width_of(text: str) -> int:
    """Terminal cells: East Asian wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def cut(text: str, cells: int) -> str:
    """``text`` in at most ``cells`` cells, ``…`` where it was cut."""
    if width_of(text) <= cells:
        return text
    out, used = "", 0
    for ch in text:
        w = width_of(ch)
        if used + w > cells - 1:
            break
        out, used = out + ch, used + w
    return out + "…"


def fit(widths: list[int], room: int, gap: int, keep: Sequence[int] = ()) -> list[int]:
    """Narrow the widest columns (never below 4 cells) until the row fits ``room``; the columns in
    ``keep`` only once no other can give, and the first column (what names the row) last of all."""
    widths = list(widths)
    while sum(widths) + gap * (len(widths) - 1) > room:
        others = [k for k in range(1, len(widths)) if widths[k] > 4 and k not in keep] or \
            [k for k in range(1, len(widths)) if widths[k] > 4]
        i = max(others, key=lambda k: widths[k]) if others else 0
        if widths[i] <= 4:
            break
        widths[i] -= 1
    return widths


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], styles: Sequence[Sequence[str]] | None = None,
           width: int | None = None, keep: Sequence[int] = ()) -> str:
    """The table as text: ``styles[r][c]`` a rich style name for that cell (colour on a terminal only);
    ``keep``: columns cut only when nothing else can give."""
    on = colour()
    cells = [[clean(str(c)).replace("\n", " ") for c in row] for row in rows]
    widths = [max([width_of(h)] + [width_of(r[i]) for r in cells]) for i, h in enumerate(headers)]
    room = width or shutil.get_terminal_size((80, 24)).columns
    widths = fit(widths, room, 2, keep)

    def line(row: Sequence[str], style: Sequence[str]) -> str:
        parts = []
        for i, (text, w) in enumerate(zip(row, widths)):
            t = cut(text, w)
            pad = "" if i == len(widths) - 1 else " " * (w - width_of(t))
            parts.append(styled(t, style[i] if i < len(style) else "", on) + pad)
        return "  ".join(parts).rstrip()

    out = [line(headers, ["bold"] * len(headers))]
    out += [line(r, (styles[n] if styles else ())) for n, r in enumerate(cells)]
    return "\n".join(out) + "\n"


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """A one-line chart of the last ``width`` values."""
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)][-width:]  # nan/inf: no height
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in vals)
