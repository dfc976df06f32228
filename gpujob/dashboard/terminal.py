"""Text a job or host controls, as a terminal would show it: what the dashboard puts in its pages.

A job's output holds control characters: tqdm redraws its bar after ``\\r`` and moves up a line with
``ESC[A`` for a nested bar, loggers colour with ``ESC[31m``, a script may print a BEL or a NUL. Raw, the
page would show them as boxes or nothing, and a redraw as every redraw strung together. :func:`shown`
replays a line the way a terminal does, line by line: ``\\r`` returns to the first column and later
text overwrites, ``\\b`` steps back, ``ESC[K``/``ESC[J`` erase, ``ESC[C``/``ESC[D``/``ESC[G`` move
along the line; a move up or down (``ESC[A``, ``ESC[B``...) writes on the row above or below, each row
its own line of the result; colours and every other escape sequence (CSI, OSC such as a hyperlink or a
title, DCS...) are dropped. Any control character left (C0 but ``\\n`` and ``\\t``, DEL, C1) is shown
visibly: C0 and DEL as their Unicode control pictures (``␇`` for BEL), C1 as ``\\x85``.
Linear in the text's length, with bounded rows and columns, whatever a hostile line holds.
"""

from __future__ import annotations

import re

# anything a page must not get raw (\t and \n pass); a string without one is returned as it is
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)(?P<params>[0-?]*)[ -/]*(?P<final>[@-~])"  # CSI (7- or 8-bit)
    r"|(?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC: to BEL/ST
    r"|\x1b[ -/]*[0-OQ-WYZ\\`a-~]"  # any other escape (ESC 7, ESC M, ESC ( B ...)
    r"|(?P<cr>\r+)"  # back to the first column (a bar's redraw; many in a row are one)
    r"|(?P<ctl>[\x00-\x08\x0b-\x1f\x7f-\x9f])"  # one control character (a lone ESC among them)
)
# the sequences that change no character shown: colours (m), modes (h, l), OSC strings (a title, a hyperlink)...
SILENT = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@IL-Z\[\\\]^_a-eg-~]"
                    r"|(?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                    r"|\x1b[ -/]*[0-OQ-WYZ\\`a-~]")  # (not ESC [, ESC ], ESC P...: those start a longer one)
NOT_CR = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # any control but \r (\n and \t pass)
# "clear the line and go back to its first column", before each redraw of some bars: what came before shows no more
CLEARED = re.compile(r"\r\x1b\[[02]?K|\x1b\[2K\r")
ROW_MOVE = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[ABEF]")
MAX_ROWS = 64  # rows one line may write by moving up and down
MAX_COLS = 1 << 16  # the column a cursor move may reach (text written goes on past it)


def visible(ch: str) -> str:
    """A control character as text: C0 and DEL as their control pictures, C1 as ``\\x85``."""
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)
    return "\u2421" if code == 0x7F else f"\\x{code:02x}"


def shown(text: str) -> str:
    """``text`` as a terminal leaves it (each ``\\n``-separated line replayed), no control character but ``\\n``/``\\t``."""
    if not CONTROL.search(text):
        return text
    return "\n".join(_line(part) for part in text.split("\n"))


def _count(params: str) -> int:
    first = params.split(";", 1)[0]
    return min(int(first), MAX_COLS) if first.isdigit() else 0


class _Screen:
    """The rows one line writes on; ``r``, ``c``: the cursor. ``touched``: the first row changed since it was
    last reset (a log's screen says which of the rows a page shows to write again)."""

    def __init__(self, budget: int, grow_up: bool = True) -> None:
        self.rows: list[list[str]] = [[]]
        self.r = self.c = 0
        # characters the cursor's moves may pad or erase in all (a hostile line moving far and back again
        # and again stays linear: past the budget, a move pads no further, an erase before the cursor is skipped)
        self.budget = budget
        self.grow_up = grow_up  # a move above the first row makes a row there (one line); else it stops there (a log)
        self.touched = 0

    def write(self, s: str) -> None:
        self.touched = min(self.touched, self.r)
        row = self.rows[self.r]
        if self.c > len(row):
            pad = min(self.c - len(row), max(0, self.budget))
            self.budget -= pad
            self.c = len(row) + pad
            row.extend(" " * pad)
        row[self.c:self.c + len(s)] = s
        self.c += len(s)

    def move(self, rows: int) -> None:
        """To the row ``rows`` below (above, if negative): a row beyond the first or last is a new one."""
        r = self.r + rows
        if r < 0:
            new = min(-r, MAX_ROWS - len(self.rows)) if self.grow_up else 0
            self.rows[:0] = [[] for _ in range(max(0, new))]
            r = 0
        elif r >= len(self.rows):  # a log's last row is the terminal's bottom: a move down stops there
            if self.grow_up:
                self.rows.extend([] for _ in range(min(r + 1, MAX_ROWS) - len(self.rows)))
            r = len(self.rows) - 1
        self.r = r

    def csi(self, params: str, final: str) -> None:
        n = max(1, _count(params))
        row = self.rows[self.r]
        if final in "AF":  # up (F: to its first column)
            self.move(-n)
        elif final in "BE":  # down (E: to its first column)
            self.move(n)
        elif final == "C":
            self.c = min(self.c + n, MAX_COLS)
        elif final == "D":
            self.c = max(0, self.c - n)
        elif final in "G`":  # to column n
            self.c = min(n - 1, MAX_COLS)
        elif final in "Hf":  # to row;column: the row is the screen's, unknown in a log; the column holds
            cols = params.split(";")
            self.c = min(max(1, _count(cols[1]) if len(cols) > 1 else 1) - 1, MAX_COLS)
        elif final in "KJ":  # erase in line / in display: after the cursor (0), before it (1), all (2, 3)
            how = _count(params)
            self.touched = min(self.touched, 0 if final == "J" and how else self.r)
            if how == 0:
                del row[self.c:]
                if final == "J":
                    del self.rows[self.r + 1:]
            elif how == 1 and self.budget > 0:
                self.budget -= min(self.c + 1, len(row))
                row[:self.c + 1] = " " * min(self.c + 1, len(row))
                if final == "J":
                    self.rows[:self.r] = [[] for _ in range(self.r)]
            else:
                row.clear()
                if final == "J":
                    self.rows = [[] for _ in self.rows]
                    row = self.rows[self.r]
        if final in "EF":
            self.c = 0
        # m (colours), h/l (modes), s/u, r and the rest change no character shown


def _redrawn(line: str) -> str:
    """A line whose only control is ``\r`` (a bar's redraws): each return writes again from the first column,
    over what was there. From the last write back, an earlier one shows only past its end: linear, however many."""
    shown = ""
    for part in reversed(line.split("\r")):
        if len(part) > len(shown):
            shown += part[len(shown):]
    return shown


def _prepared(line: str) -> str:
    """``line`` less what changes no character shown (colours, titles...) and what a clear on its row hides."""
    if "\x1b" in line or "\x9b" in line:
        line = SILENT.sub("", line)  # colours: most escapes a job prints
        before, *after = CLEARED.split(line)
        if after and not ROW_MOVE.search(line, 0, len(line) - len(after[-1])):
            line = after[-1]  # (cleared on the same row: a move up or down before it wrote elsewhere)
    return line


def _replay(scr: _Screen, line: str) -> None:
    """``line``'s text and controls played on ``scr`` from its cursor."""
    at = 0
    for m in SEQUENCE.finditer(line):
        if m.start() > at:
            scr.write(line[at:m.start()])
        at = m.end()
        ctl, final = m.group("ctl"), m.group("final")
        if m.group("cr"):
            scr.c = 0
        elif ctl == "\b":
            scr.c = max(0, scr.c - 1)
        elif ctl is not None:
            scr.write(visible(ctl))
        elif final is not None:
            scr.csi(m.group("params"), final)
    if at < len(line):
        scr.write(line[at:])


def _line(line: str) -> str:
    line = _prepared(line)
    if not NOT_CR.search(line):
        return _redrawn(line)
    scr = _Screen(4 * len(line) + MAX_COLS)
    _replay(scr, line)
    rows = ["".join(r) for r in scr.rows]
    return "\n".join(r for r in rows if r) if len(rows) > 1 else rows[0]


class LogScreen:
    """A log as a terminal shows it, line after line: each line is written after a newline (the cursor to
    the next row's first column), so tqdm's nested bar, which moves up with ``ESC[A`` and writes again,
    overwrites the rows it wrote before instead of adding a copy of each redraw. Keeps the last ``MAX_ROWS``
    rows (a move up stops at the first of them); :meth:`feed` says which rows a page shows again."""

    def __init__(self, row_kept: int = 1 << 14) -> None:
        self.scr: _Screen | None = None
        self.row_kept = row_kept  # a longer row keeps its end (a later move back onto it writes from there)

    def feed(self, line: str) -> tuple[int, list[str]]:
        """(rewrite, rows) for one line of the log: the page drops its last ``rewrite`` rows, then adds ``rows``
        (after a plain line ``(0, [line])``; after a redraw on the row above ``(2, [above, this])``)."""
        line = _prepared(line)
        budget = 4 * len(line) + MAX_COLS
        if self.scr is None:
            self.scr = scr = _Screen(budget, grow_up=False)
            before = 0
        else:
            scr, before = self.scr, len(self.scr.rows)
            scr.budget, scr.touched = budget, before
            if scr.r + 1 == before:  # the newline: a new row at the bottom, else the next row
                scr.rows.append([])
            scr.r, scr.c = scr.r + 1, 0
        if not CONTROL.search(line):
            scr.write(line)
        else:
            _replay(scr, line)
        touched = min(scr.touched, len(scr.rows))
        for i in range(touched, len(scr.rows)):
            if len(scr.rows[i]) > self.row_kept:
                scr.rows[i] = list("…") + scr.rows[i][-(self.row_kept - 1):]
        out = ["".join(r) for r in scr.rows[touched:]]
        extra = len(scr.rows) - MAX_ROWS
        if extra > 0:
            del scr.rows[:extra]
            scr.r = max(0, scr.r - extra)
        return before - touched, out
