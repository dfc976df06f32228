"""A metrics record's line, exactly as ``json.dumps(rec, sort_keys=True)`` writes it, for less.

A flood of printed metrics makes 20,000 records a second, and their encoding was a third of the
supervisor's time: each call builds an encoder, sorts the record's keys and writes every float anew. The
records of one log have few layouts (the same names, in the same order) and many values that do not
change (``lr``, ``t`` within a read, a constant metric): the sorted layout with its keys written out is
kept per layout and a float's text per value (at most ``MEMO_MAX`` of each). A record with anything but
``str`` keys and ``int``/``float`` values goes through ``json`` itself.
"""

import json
from json.encoder import encode_basestring_ascii
from typing import Any, Dict, Optional, Tuple

from remote.metrics.logpatterns import MEMO_MAX
from remote.metrics.metricrecord import MetricRecord

_JSON = json.JSONEncoder(sort_keys=True)
_layouts: Dict[Tuple[Any, ...], Optional[Tuple[Tuple[str, str], ...]]] = {}
_floats: Dict[float, str] = {}
_NOT_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # json's words (allow_nan)


def _layout(keys: Tuple[Any, ...]) -> Optional[Tuple[Tuple[str, str], ...]]:
    if not all(type(k) is str for k in keys):
        return None
    return tuple((k, encode_basestring_ascii(k) + ": ") for k in sorted(keys))


def record_line(rec: MetricRecord) -> str:
    keys = tuple(rec)
    lay = _layouts.get(keys, ())
    if lay == ():
        if len(_layouts) >= MEMO_MAX:
            _layouts.clear()
        lay = _layouts[keys] = _layout(keys)
    if lay is None:
        return _JSON.encode(rec)
    parts = []
    for k, head in lay:
        v = rec[k]
        kind = type(v)
        if kind is float:
            text = _floats.get(v) if v else None  # (0.0 == -0.0: neither kept)
            if text is None:
                text = float.__repr__(v)
                text = _NOT_FINITE.get(text, text)
                if v and v == v:  # (a NaN is no key: never equal to itself)
                    if len(_floats) >= MEMO_MAX:
                        _floats.clear()
                    _floats[v] = text
        elif kind is int:
            text = int.__repr__(v)
        else:
            return _JSON.encode(rec)
        parts.append(head + text)
    return "{" + ", ".join(parts) + "}"
