"""The laptop's typed reads of the status document take their fields from its one declaration
(remote/view/statusdoc.py): every field of ``JobSummary``/``JobStatus`` and of ``JobView`` is declared,
of the declared kind, and ``JobView`` reads every declared field."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpujob.api.results.jobs import JobStatus, JobSummary
from gpujob.transport.jobview import DECLARED, BillingView, Field, JobView, ProgressView, WatchView

KIND_OF = {"str": "text", "int": "integer", "float": "number", "bool": "flag", "dict": "object", "JSONObject": "object",
           "list": "list"}


def _kind(annotation: Any) -> str:
    """``dict[str, Any] | None`` → object: the annotation's outer type, as the declaration names it."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return KIND_OF.get(text.replace(" | None", "").split("[", 1)[0], text)


def test_the_result_classes_hold_declared_fields_of_their_kind() -> None:
    for cls in (JobSummary, JobStatus):
        for f in dataclasses.fields(cls):
            if f.name == "doc":
                continue
            declared = DECLARED.BY_NAME.get(f.name)
            assert declared, f"{cls.__name__}.{f.name} is not a declared status field (remote/view/statusdoc.py)"
            assert _kind(f.type) == declared.kind, f"{cls.__name__}.{f.name}: {f.type} where {declared.kind} is declared"
            assert cls is JobStatus or declared.ls, f"JobSummary.{f.name}: ls rows do not carry it"


def test_the_views_read_every_declared_field_as_its_kind() -> None:
    for view, declared in ((JobView, DECLARED.FIELDS), (BillingView, DECLARED.BILLING), (WatchView, DECLARED.WATCH),
                           (ProgressView, DECLARED.PROGRESS)):
        fields = {k: v for k, v in vars(view).items() if isinstance(v, Field)}
        assert list(fields) == [f.name for f in declared]
        kinds = {f.name: f.kind for f in declared}
        for name, f in fields.items():
            assert _kind(f.kind) == kinds[name], f"{view.__name__}.{name}: {f.kind} where {kinds[name]}"
    v = JobView({"state": "running", "attempt": 2, "exit_code": None})
    assert (v.state, v.attempt, v.exit_code, v.reason) == ("running", 2, None, None)
    assert "exit_code" in v and "reason" not in v
