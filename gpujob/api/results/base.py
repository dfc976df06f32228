"""What every result is: a use case's document with typed, frozen fields read from it."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, cast

from gpujob.bundle import import_remote
from gpujob.jsontypes import JSONObject

# the job states a job does not leave by itself
TERMINAL = import_remote("core.protocol").TERMINAL

R = TypeVar("R", bound="Result")

# the fields that hold a list of records, and the result class (module, name) of each record
_ITEMS: dict[tuple[str, str], tuple[str, str]] = {("JobList", "jobs"): ("jobs", "JobSummary"),
                                                  ("CostReport", "jobs"): ("costs", "JobCost")}


def _key(f: Any) -> str:
    return f.metadata.get("key", f.name)


@dataclass(frozen=True)
class Result:
    """A use case's document with typed fields over it."""

    doc: Mapping[str, object] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls: type[R], doc: Mapping[str, object]) -> R:
        """The result over ``doc`` (which it keeps as is); a field whose key is absent keeps its default."""
        values = {f.name: _convert(f.name, doc[_key(f)], cls) for f in fields(cls) if f.name != "doc" and _key(f) in doc}
        return cls(doc=doc, **values)

    def to_json(self) -> JSONObject:
        """The ``--json`` document of the command (a copy: changing it changes nothing here)."""
        return cast(JSONObject, copy.deepcopy(self.doc))  # a use case's document: JSON all through


def _convert(name: str, value: Any, cls: type) -> Any:
    """Lists of records become lists of their result class (``JobList.jobs``, ``CostReport.jobs``)."""
    where = _ITEMS.get((cls.__name__, name))
    if not where or not isinstance(value, list):
        return value
    item = getattr(importlib.import_module(f"gpujob.api.results.{where[0]}"), where[1])
    return [item.from_json(v) for v in value]
