"""Every table gpujob prints (``ls``, ``status``, ``runs``, ``compare``, ``cost``, ``host ls``, a sweep's
leaderboard), laid out by one rule to stay readable at any width, and sparklines.

``table(cols, rows)``: each column says what it holds (``Col.kind``) and how much it matters
(``Col.rank``). At a narrow width free text gives way first (cut at its end, names in their
middle); on a terminal, ids longer than ``ID_MIN`` shorten in the middle, keeping their unique end
(``a-long-name…wj047``: the random suffix is a reference every command takes; a pipe or a file
gets them whole, for scripts); then whole columns give way by rank, least important first, named in
a footnote; only when nothing is left to drop do ids shorten to that end alone. A number, a state
or a date is never cut. ``--wide`` shows every column whole, ``--columns a,b,c`` those
(``choose``, from the command line).

Plain padded text, no rich: rich's Table cost ~35 ms of CPU for 50 runs plus ~30 ms to import, most
of what ``runs`` costs. Host-made text is cleaned first (``neutral``).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from gpujob.errors import GpujobError
from gpujob.ui.neutral import clean

# rich style names (``STATE_STYLE``) as SGR codes
SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
       "cyan": "36", "white": "37"}


def _tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def colour() -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set or ``TERM=dumb`` (as rich does)."""
    return _tty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


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


@dataclass(frozen=True)
class Col:
    """A column: ``kind`` says how it may give way — ``id`` (to its unique end, last of all),
    ``name`` (shortened in the middle), ``text`` (cut at its end), ``fixed`` (numbers, states, dates:
    never cut); ``rank`` 0 is never dropped, the highest goes first; ``cap``: the most cells it
    takes (free text); ``hide_empty``: left out where no row has a value."""

    name: str
    kind: str = "fixed"
    rank: int = 0
    cap: int = 0
    hide_empty: bool = False


@dataclass
class Choice:
    """``--wide`` and ``--columns`` of the command being run (set once by the command line)."""

    wide: bool = False
    columns: tuple[str, ...] = ()


CHOICE = Choice()
TEXT_MIN = 12
ID_MIN = 24  # a job id's name part and its unique end: tiny-12020606-a1fef (19) stays whole


def choose(wide: bool = False, columns: str | None = None) -> None:
    CHOICE.wide = wide
    CHOICE.columns = tuple(c.strip() for c in (columns or "").split(",") if c.strip())


def _key(name: str) -> str:
    return name.lower().replace("_", " ").replace("-", " ").strip()


def _picked(cols: Sequence[Col], names: Sequence[str]) -> list[int]:
    """The columns ``--columns`` names, in its order (any case; ``last_line`` for LAST LINE)."""
    by = {_key(c.name): i for i, c in enumerate(cols) if c.name}
    tails: dict[str, list[int]] = {}  # ``loss``: LAST LOSS of ``ls``, BEST LOSS of ``runs`` (their names before)
    for key, i in by.items():
        if " " in key:
            tails.setdefault(key.split(" ", 1)[1], []).append(i)
    by.update({t: min(found, key=lambda i: cols[i].rank) for t, found in tails.items() if t not in by})
    unknown = [n for n in names if _key(n) not in by]
    if unknown:
        raise GpujobError(f"--columns: no column {unknown[0]!r} in this table",
                          "its columns: " + ",".join(c.name.lower().replace(" ", "_") for c in cols if c.name))
    return [by[_key(n)] for n in names]


def unique_tail(ids: Sequence[str], text: str) -> int:
    """How many characters of ``text``'s end tell it from every other of ``ids``: its last ``-`` part
    at least (what a job reference takes), more where two share it."""
    n = len(text.rsplit("-", 1)[-1]) if "-" in text else min(len(text), 6)
    others = [i for i in ids if i != text]
    while n < len(text) and any(o.endswith(text[-n:]) for o in others):
        n += 1
    return n


def middle(text: str, cells: int, tail: int | None = None) -> str:
    """``text`` in ``cells`` cells, its start and end kept and ``…`` between (``tail``: end cells kept)."""
    if width_of(text) <= cells:
        return text
    if cells <= 1:
        return "…"[:cells]
    end = min(tail if tail is not None else (cells - 1) // 2, cells - 1)
    head = cut(text, cells - end)  # the start in (cells - end) cells, its own "…" closing it
    return head + (text[-end:] if end else "")


def _layout(cols: Sequence[Col], cells: list[list[str]], room: int, gap: int) -> tuple[list[int], list[int], list[int]]:
    """(columns shown, their widths, columns dropped) for ``room`` cells."""
    nat = [max([width_of(c.name)] + [width_of(r[i]) for r in cells]) for i, c in enumerate(cols)]
    nat = [min(n, c.cap) if c.cap else n for n, c in zip(nat, cols)]
    ids = [[r[i] for r in cells] for i in range(len(cols))]
    on_tty = _tty()

    def floor(i: int, last: bool) -> int:
        c = cols[i]
        if c.kind in ("text", "name"):
            return min(nat[i], TEXT_MIN if not last else 4)
        if c.kind == "id":  # a long id shortens (its start and its unique end) before a column is dropped;
            if not on_tty:  # into a pipe or a file it stays whole: a script greps it, a command takes it
                return nat[i]
            tails = max([unique_tail(ids[i], t) + 1 for t in ids[i]] + [min(width_of(c.name), 6)])
            return tails if last else max(tails, min(nat[i], ID_MIN))
        if last:  # a number is never cut; its header may be, in its middle
            return max([width_of(r[i]) for r in cells] + [min(width_of(c.name), 6)])
        return nat[i]

    shown = [i for i, c in enumerate(cols) if not (c.hide_empty and all(r[i] in ("", "-") for r in cells))]
    dropped: list[int] = []

    def need(last: bool, whole_ids: bool = False) -> int:
        return sum(nat[i] if whole_ids and cols[i].kind == "id" else floor(i, last) for i in shown) \
            + gap * (len(shown) - 1)

    # free text (a last line) only takes the room left: no id shortens for it
    while need(False, whole_ids=True) > room and any(cols[i].kind == "text" and cols[i].rank for i in shown):
        worst = max((i for i in shown if cols[i].kind == "text" and cols[i].rank), key=lambda i: (cols[i].rank, i))
        shown.remove(worst)
        dropped.append(worst)
    while need(False) > room:
        droppable = [i for i in shown if cols[i].rank > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (cols[i].rank, i))
        shown.remove(worst)
        dropped.append(worst)
    last = need(False) > room  # only the never-dropped columns left, still too wide: ids and headers give too
    widths = {i: nat[i] for i in shown}
    over = sum(widths.values()) + gap * (len(shown) - 1) - room
    floors = {i: floor(i, last) for i in shown}
    while over > 0:  # a cell at a time from the widest of the kind that gives first: alike columns end alike
        can = [i for i in shown if widths[i] > floors[i]]
        if not can:
            break
        i = min(can, key=lambda i: ({"text": 0, "name": 1, "id": 3}.get(cols[i].kind, 2), -widths[i]))
        widths[i] -= 1
        over -= 1
    return shown, [widths[i] for i in shown], dropped


def table(cols: Sequence[Col], rows: Sequence[Sequence[str]], styles: Sequence[Sequence[str]] | None = None,
          width: int | None = None, title: str = "") -> str:
    """The table as text under the rule of this module's doc, with a footnote naming what was left out;
    ``styles[r][c]`` a rich style name for that cell (colour on a terminal only)."""
    on = colour()
    gap = 2
    cells = [[clean(str(c)).replace("\n", " ") for c in row] for row in rows]
    room = width or shutil.get_terminal_size((80, 24)).columns
    if CHOICE.columns:
        shown = _picked(cols, CHOICE.columns)
        widths = [max([width_of(cols[i].name)] + [width_of(r[i]) for r in cells]) for i in shown]
        dropped: list[int] = []
    elif CHOICE.wide:
        shown = [i for i in range(len(cols))]
        widths = [max([width_of(c.name)] + [width_of(r[i]) for r in cells]) for i, c in enumerate(cols)]
        dropped = []
    else:
        shown, widths, dropped = _layout(cols, cells, room, gap)
    dropped = [i for i in dropped if any(r[i] not in ("", "-") for r in cells)]  # an empty column is no loss

    def fitted(i: int, text: str, w: int, header: bool) -> str:
        kind = cols[i].kind
        if width_of(text) <= w:
            return text
        if header and "-" in text:  # a run id over compare's column: its unique end is what tells them apart
            return middle(text, w, unique_tail([c.name for c in cols], text))
        if header or kind in ("name", "fixed"):
            return middle(text, w)
        if kind == "id":
            return middle(text, w, unique_tail([r[i] for r in cells], text))
        return cut(text, w)

    def line(row: Sequence[str], style: Sequence[str], header: bool = False) -> str:
        parts = []
        for n, (i, w) in enumerate(zip(shown, widths)):
            t = fitted(i, row[i], w, header)
            pad = "" if n == len(shown) - 1 else " " * (w - width_of(t))
            parts.append(styled(t, style[i] if i < len(style) else "", on) + pad)
        return (" " * gap).join(parts).rstrip()

    out = [styled(clean(title), "bold", on)] if title else []
    out.append(line([c.name for c in cols], ["bold"] * len(cols), header=True))
    out += [line(r, (styles[n] if styles else ())) for n, r in enumerate(cells)]
    if dropped:
        import textwrap

        names = ", ".join(cols[i].name for i in sorted(dropped))
        note = f"not shown at {room} columns: {names} (--wide: all; --columns a,b: those)"
        out += [styled(ln, "dim", on) for ln in textwrap.wrap(note, max(room, 20), break_on_hyphens=False)]
    return "\n".join(out) + "\n"


def parts_that_fit(parts: Sequence[str], sep: str, width: int, indent: str = "") -> list[str]:
    """``parts`` on one line joined by ``sep`` where it fits ``width``, else one part a line (a command
    in a hint stays whole, to be pasted, instead of the terminal breaking it anywhere)."""
    line = indent + sep.join(parts)
    return [line] if width_of(line) <= width else [indent + p for p in parts]


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """A one-line chart of the last ``width`` values."""
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)][-width:]  # nan/inf: no height
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in vals)
