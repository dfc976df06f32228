"""The status document a reader gets is declared once (remote/view/statusdoc.py): the real
``describe`` and ``watch`` of real jobs write no key it does not declare, each of its declared kind,
and an ``ls`` row only the fields declared for ``ls``."""

from __future__ import annotations

import time
from pathlib import Path

from remote.core.layout import Root
from remote.view import status, statusdoc, watch
from tests.helpers import EXAMPLE, remote_root, submit, wait_state, write_job


def _as_declared(doc: dict, detail: bool) -> None:
    assert statusdoc.undeclared(doc) == []
    if not detail:
        assert [k for k in doc if not statusdoc.BY_NAME[k].ls] == [], "detail-only fields in an ls row"
    assert statusdoc.undeclared(doc.get("billing") or {}, statusdoc.BILLING) == []


def test_describe_writes_only_declared_fields_of_their_kind(tmp_path: Path) -> None:
    root = Root(str(remote_root(tmp_path, "local")))
    ran = submit("local", EXAMPLE)["job_id"]
    seen: set[str] = set()
    for _ in range(120):  # each state it passes through, and its end
        row = status.describe(root, ran)
        _as_declared(row, detail=False)
        _as_declared(status.describe(root, ran, detail=True), detail=True)
        seen.add(row["state"])
        if row["state"] in ("succeeded", "failed"):
            break
        time.sleep(0.5)
    assert "succeeded" in seen
    w = watch.watch(root, ran)
    assert statusdoc.undeclared(w, statusdoc.WATCH) == []
    assert statusdoc.undeclared(w["progress"], statusdoc.PROGRESS) == []
    _as_declared(w["job"], detail=True)
    failed = submit("local", write_job(tmp_path, "bad", "print('x')\nraise SystemExit(3)\n", "python main.py"))["job_id"]
    wait_state("local", failed, ("failed",))
    detail = status.describe(root, failed, detail=True)
    assert {"diagnosis", "log_tail", "checkpoints", "spec"} <= set(detail)
    _as_declared(detail, detail=True)
    _as_declared(status.describe(root, failed), detail=False)


def test_every_field_has_a_known_kind_and_a_meaning() -> None:
    for fields in (statusdoc.FIELDS, statusdoc.WATCH, statusdoc.BILLING, statusdoc.PROGRESS):
        names = [f.name for f in fields]
        assert len(names) == len(set(names))
        assert all(f.kind in statusdoc.KINDS and f.meaning for f in fields)
    assert statusdoc.undeclared({"state": 3, "x": 1, "gpus_held": 1, "attempt": True, "now": None}) == [
        "'state' is int where text is declared", "'x' is not declared",
        "'gpus_held' is int where flag is declared", "'attempt' is bool where integer is declared"]
