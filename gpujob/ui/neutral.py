"""Host-supplied text made harmless before it reaches a terminal.

Job names, log lines, metric names, diagnoses and error text come from the instance or from the
job's own output: an escape sequence in one once reached the user's terminal raw through
``ls``/``status``/``-w`` (OSC 52 writes the clipboard, OSC 0 the window title, CSI 2J clears the
screen). ``clean`` strips every escape sequence and control character; ``TermFilter`` does it to
a byte stream (``tail``), keeping colours and the like with ``raw`` but never OSC/DCS strings.
"""

from __future__ import annotations

import codecs
import functools
import re
from typing import Any

# OSC, DCS, SOS, PM, APC (7-bit or C1): to BEL or ST, or to the end of the line when unterminated
_STRING = r"(?:\x1b[\]P_^X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
_SEQ = re.compile(f"(?P<s>{_STRING})|(?:\\x1b\\[|\\x9b)[0-?]*[ -/]*[@-~]?|\\x1b[ -/]*[0-~]?")
# C0 but for tab and newline, DEL, C1, and the bidirectional overrides that reorder what is shown
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# characters that show as nothing (zero-width spaces and joiners, marks, fillers, tags): in a job
# id or a metric name, `tiny\u200b-1` looked like `tiny-1` (Trojan Source); shown as their code
_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028\u2029"
                        "\u2060-\u2064\u206a-\u206f\u3164\ufe00-\ufe0e\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f]")
_CONTROL_TAIL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # keeps \r


def clean(text: str) -> str:
    """``text`` without escape sequences or control characters (tab and newline kept); a character
    that shows as nothing is shown as its code (``\\u200b``)."""
    if text.isprintable():  # the common case: nothing to look at
        return text
    return _INVISIBLE.sub(_code, _CONTROL.sub("", _SEQ.sub("", text)))


def _code(m: re.Match[str]) -> str:
    n = ord(m.group())
    return f"\\u{n:04x}" if n <= 0xFFFF else f"\\U{n:08x}"


def clean_doc(doc: Any, markup: bool = False) -> Any:
    """``doc`` (a JSON-like value) with every string, keys too, ``clean``ed; with ``markup`` also
    escaped for rich markup (a metric named ``[link=...]`` is text, not a link)."""
    if isinstance(doc, str):
        s = clean(doc)
        if markup:
            from rich.markup import escape

            s = escape(s)
        return s
    if isinstance(doc, dict):
        return {clean_doc(k, markup) if isinstance(k, str) else k: clean_doc(v, markup) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [clean_doc(v, markup) for v in doc]
    return doc


class TermFilter:
    """A byte stream (a log) made safe for a terminal, chunk by chunk. ``raw``: colours and cursor
    moves pass; OSC/DCS strings never do. A partial last line holding an escape waits for its
    end (at most ``HOLD`` characters), so a sequence split between two chunks is still seen whole."""

    HOLD = 4096

    def __init__(self, raw: bool = False) -> None:
        self.raw = raw
        self.dec = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = ""

    def _clean(self, text: str) -> str:
        if self.raw:
            return _SEQ.sub(lambda m: "" if m.group("s") else m.group(0), text)
        return _CONTROL_TAIL.sub("", _SEQ.sub("", text))

    def feed(self, data: bytes) -> bytes:
        text = self.pending + self.dec.decode(data)
        cut = text.rfind("\n") + 1
        rest = text[cut:]
        if len(rest) < self.HOLD and ("\x1b" in rest or any("\x90" <= c <= "\x9f" for c in rest)):
            self.pending, text = rest, text[:cut]
        else:
            self.pending = ""
        return self._clean(text).encode()

    def flush(self) -> bytes:
        text, self.pending = self.pending + self.dec.decode(b"", final=True), ""
        return self._clean(text).encode()


@functools.lru_cache(maxsize=1)
def console_class() -> type:
    """rich's Console whose output passes ``clean`` for every piece of text (rich's own control
    segments, such as the cursor moves of a live view, excepted): whatever path a host's string
    takes into a drawing, it reaches the terminal as text."""
    from rich.console import Console
    from rich.segment import Segment

    class SafeConsole(Console):
        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(s if s.control else Segment(clean(s.text), s.style) for s in buffer)

    return SafeConsole
