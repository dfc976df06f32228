"""The job file's checks, each error with its position (``file:line:col``) and a "did you mean".

:class:`Collector` gathers the errors; the checks below take a value, its path in the job file and
the wording of what was expected. :func:`check_section` walks a section the agent declares
(remote/core/spec.py: its fields' kinds, bounds, defaults and wording), so the laptop states none of them.
"""

from __future__ import annotations

import difflib
from typing import Any

from gpujob.bundle import import_remote
from gpujob.config.yamlsafe import Mark

FIELDS = import_remote("core.specfields")  # the kinds of a declared field


class Collector:
    """Collects errors with their positions."""

    def __init__(self, marks: dict[tuple, Mark]) -> None:
        self.marks = marks
        self.errors: list[str] = []

    def err(self, path: tuple, msg: str) -> None:
        where = self.marks.get(path)
        while where is None and path:
            path = path[:-1]
            where = self.marks.get(path)
        key = ".".join(str(p) for p in path)
        self.errors.append(f"{where or '?'}: {key + ': ' if key else ''}{msg}")


def suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(sorted(known))})"


def check_keys(ctx: Collector, path: tuple, d: dict, known: list[str]) -> None:
    for k in d:
        if k not in known:
            ctx.err(path + (k,), f"unknown key {short(k)}{suggest(str(k), known)}")


def short(value: Any) -> str:
    """``repr`` cut to one line's worth: an error message names a value, it does not reprint it."""
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def want(ctx: Collector, path: tuple, value: Any, kind: type | tuple, what: str) -> bool:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        ok = False
    else:
        ok = isinstance(value, kind)
    if not ok:
        ctx.err(path, f"expected {what}, got {type(value).__name__} {short(value)}")
    elif isinstance(value, str) and "\0" in value:
        ctx.err(path, "holds a NUL character (\\0), which no command, path or variable can carry")
        ok = False
    return ok


def int_in(ctx: Collector, path: tuple, value: Any, lo: int, hi: int, what: str) -> bool:
    """``value`` is a whole number from ``lo`` to ``hi``."""
    if not want(ctx, path, value, int, what):
        return False
    if not lo <= value <= hi:
        ctx.err(path, f"{short(value)} is out of range: expected {what} from {lo} to {hi}")
        return False
    return True


def str_list(ctx: Collector, path: tuple, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not want(ctx, path, value, list, "a list of strings"):
        return []
    out = []
    for i, v in enumerate(value):
        if want(ctx, path + (i,), v, (str, int, float), "a string"):
            out.append(str(v))
    return out


def duration(ctx: Collector, path: tuple, value: Any, default: float | None, top: float) -> float | None:
    """A duration from 0 to ``top`` (seconds: 30 days for most), else an error and ``default``."""
    try:
        seconds = import_remote("core.protocol").parse_duration(value)
    except ValueError as e:
        ctx.err(path, str(e))
        return default
    if not 0 <= seconds <= top:
        ctx.err(path, f"{short(value)} is out of range: expected 0s to "
                      f"{f'{top / 86400:g}d' if top >= 86400 else f'{top:g}s'}")
        return default
    return seconds


def check_field(ctx: Collector, path: tuple, f: Any, value: Any) -> Any:
    """``value`` of the declared field ``f`` (remote/core/specfields.py's Field), checked; its default when wrong."""
    kind = f.kind
    if kind == FIELDS.INT:
        return value if int_in(ctx, path, value, int(f.low), int(f.high), f.what) else f.default
    if kind == FIELDS.DURATION:
        seconds = duration(ctx, path, value, f.default, f.high)
        if f.zero and seconds == 0:
            ctx.err(path, f.zero)
            return f.default
        return seconds
    if kind == FIELDS.CHOICE:
        if value not in f.choices:
            ctx.err(path, f"expected {' or '.join(map(repr, f.choices))}, got {short(value)}")
        return value
    if kind in (FIELDS.TEXTS, FIELDS.CHOICES):
        out = str_list(ctx, path, value)
        for i, o in enumerate(out if kind == FIELDS.CHOICES else []):
            if o not in f.choices:
                ctx.err(path + (i,), f"unknown {f.what} {short(o)}{suggest(o, list(f.choices))}")
        return out
    if kind in (FIELDS.BOOL, FIELDS.TEXT):
        return value if want(ctx, path, value, bool if kind == FIELDS.BOOL else str, f.what) else f.default
    return value  # a TABLE: its own module checks it


def check_section(ctx: Collector, raw: dict, sec: Any) -> dict[str, Any]:
    """{key: value} of the declared section ``sec`` (remote/core/spec.py): each key the job file gives,
    checked with its position; the agent's default for one it leaves out (or leaves empty, where the
    default is none)."""
    d = raw.get(sec.key, {}) or {}
    if want(ctx, (sec.key,), d, dict, sec.what):
        check_keys(ctx, (sec.key,), d, sec.keys)
    else:
        d = {}
    return {f.key: f.read({}) if d.get(f.key) is None and (f.key not in d or f.default is None)
            else check_field(ctx, (sec.key, f.key), f, d[f.key]) for f in sec.fields}
