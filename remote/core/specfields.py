"""How the job spec's keys are declared: a :class:`Field` names a key of the job file, its place in
spec.json, its kind, default, bounds and wording (standard library only, Python 3.8+).

The agent reads spec.json through the declarations of remote/core/spec.py (:meth:`Field.read`: a
value of the wrong shape becomes the default); the laptop walks the same declarations to check a
job file with positions (gpujob/config/spec.py). The readers below take any JSON value.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence

# Field kinds.
INT = "int"  # a whole number from low to high
DURATION = "duration"  # 90s, 30m, 8h, 1d or seconds (spec.json: seconds)
CHOICE = "choice"  # one of ``choices``
CHOICES = "choices"  # a list, each one of ``choices``
BOOL = "bool"
TEXT = "text"
TEXTS = "texts"  # a list of strings (one string stands for a list of one)
TABLE = "table"  # a mapping checked by its own module (the mirror's remote/mirror/config.py)


def text(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def table(v: Any) -> Dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def strings(v: Any) -> Dict[str, str]:
    """An environment: str keys, values as text (a number written in YAML is still a value)."""
    return {str(k): str(x) for k, x in v.items() if x is not None} if isinstance(v, Mapping) else {}


def items(v: Any) -> List[Any]:
    return list(v) if isinstance(v, (list, tuple)) else []


class Field:
    """One key: ``key`` in the job file's section, ``sent`` in spec.json (in the section's own
    mapping when the section is sent whole, as ``retry``), its kind, default and wording."""

    __slots__ = ("key", "sent", "kind", "default", "what", "low", "high", "choices", "zero")

    def __init__(self, key: str, sent: str, kind: str, default: Any = None, what: str = "",
                 low: float = 0, high: float = 0, choices: Sequence[str] = (), zero: str = "") -> None:
        self.key, self.sent, self.kind, self.default, self.what = key, sent, kind, default, what
        self.low, self.high = low, high  # INT and DURATION bounds (seconds)
        self.choices = tuple(choices)  # in the order an error names them
        self.zero = zero  # DURATION: why 0 is refused ('' when it is a value)

    def read(self, doc: Mapping[str, Any]) -> Any:
        """The value in spec.json's ``doc``, or the default when it is absent or of the wrong shape."""
        v = doc.get(self.sent)
        if self.kind == INT:
            n = number(v)
            return int(n) if n is not None else self.default
        if self.kind == DURATION:
            n = number(v)
            return n if n is not None else self.default
        if self.kind == BOOL:  # only an explicit false turns a default true off
            return v is not False if self.default else bool(v)
        if self.kind in (TEXTS, CHOICES):
            return [str(x) for x in items(v)] or list(self.default or ())
        if self.kind == TABLE:
            return table(v)
        t = text(v)
        return (t or self.default) if self.kind == CHOICE else t if t is not None else self.default


class Section:
    """A mapping of the job file (``retry:``, ``stop:``; ``key`` '' for the top level): its fields in
    the order they are checked, and how an error names the mapping."""

    __slots__ = ("key", "what", "fields")

    def __init__(self, key: str, what: str, fields: Sequence[Field]) -> None:
        self.key, self.what, self.fields = key, what, tuple(fields)

    @property
    def keys(self) -> List[str]:
        return [f.key for f in self.fields]

    def field(self, key: str) -> Field:
        return next(f for f in self.fields if f.key == key)

    def read(self, doc: Mapping[str, Any]) -> Dict[str, Any]:
        """{key: value} of every field read from spec.json's ``doc``."""
        return {f.key: f.read(doc) for f in self.fields}
