"""Hyperparameters read from a ``run:`` line, a run line with one changed, and ``--where`` filters.

``python train.py --lr 3e-4 --batch=32 --fp16 data/`` holds ``{lr: 3e-4, batch: 32, fp16: true}``:
values are read as JSON numbers/booleans where they are one, else kept as text.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject


def value_of(text: str) -> Any:
    """``3e-4`` → 0.0003, ``true`` → True, ``32`` → 32; anything else stays text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        v = json.loads(text)
        return v if isinstance(v, (int, float)) else text
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _words(run: str) -> list[str]:
    try:
        return shlex.split(run, comments=True)
    except ValueError:
        return run.split()


def _is_key(word: str) -> bool:
    return bool(re.match(r"--[A-Za-z_][\w.-]*(=|$)", word))


def command_of(run: str) -> str:
    """The run line without its ``--key value`` arguments: what stays the same across a sweep."""
    words, out, i = _words(run), [], 0
    while i < len(words):
        w = words[i]
        i += 1
        if _is_key(w):
            if "=" not in w and i < len(words) and not words[i].startswith("--") and words[i] not in ("&&", "||", ";", "|"):
                i += 1
            continue
        out.append(w)
    return " ".join(out)


def run_args(run: str) -> JSONObject:
    """The ``--key value`` / ``--key=value`` / ``--flag`` arguments of a run line (``-`` and ``_`` alike in keys)."""
    out: JSONObject = {}
    words = _words(run)
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w in ("&&", "||", ";", "|"):
            continue
        if not _is_key(w):
            continue
        key, eq, val = w[2:].partition("=")
        key = key.replace("-", "_")
        if eq:
            out[key] = value_of(val)
        elif i < len(words) and not words[i].startswith("--") and words[i] not in ("&&", "||", ";", "|"):
            out[key] = value_of(words[i])
            i += 1
        else:
            out[key] = True
    return out


def set_arg(run: str, key: str, value: Any) -> str:
    """``run`` with ``--key``'s value replaced (``-``/``_`` alike), or ``--key value`` appended to its
    first command where it has none. Only the argument's own words change. A boolean sets a bare
    flag: True adds ``--key`` (a switch), False takes it away; a flag written with a value gets
    ``true``/``false``."""
    text = "true" if value is True else "false" if value is False else str(value)
    quoted = shlex.quote(text)
    want = key.replace("-", "_")
    pat = re.compile(r"(?<!\S)--([A-Za-z_][\w.-]*)(=(\"[^\"]*\"|'[^']*'|\S*)|[ \t]+(\"[^\"]*\"|'[^']*'|(?!--)[^\s;&|]+))?")
    for m in pat.finditer(run):
        if m.group(1).replace("-", "_") != want:
            continue
        if m.group(2) is None and isinstance(value, bool):  # a switch
            return run if value else (run[:m.start()].rstrip(" ") + run[m.end():])
        new = f"--{m.group(1)}={quoted}" if (m.group(2) or "").startswith("=") else f"--{m.group(1)} {quoted}"
        return run[:m.start()] + new + run[m.end():]
    if value is False:
        return run
    cut = re.search(r"\s(&&|\|\||;|\|)\s", run)
    at = cut.start() if cut else len(run.rstrip())
    return run[:at] + (f" --{key}" if value is True else f" --{key} {quoted}") + run[at:]


def parse_where(expr: str) -> tuple[str, str, Any]:
    """``lr<1e-3`` → (``lr``, ``<``, 0.001); the key may be a parameter, a metric or a column."""
    m = re.match(r"\s*([\w.\-/]+)\s*(<=|>=|!=|==|<|>|=|~)\s*(.+?)\s*$", expr)
    if not m or m.group(3)[0] in "<>=!~":
        raise GpujobError(f"--where {expr!r}: not KEY OP VALUE", "e.g. --where 'lr<1e-3' or --where state=succeeded "
                          "(operators: < <= > >= = != ~)")
    return m.group(1), m.group(2), value_of(m.group(3))
