"""What the run ledger's verbs return: runs, compare, rerun, sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpujob.api.results.actions import SubmitResult
from gpujob.api.results.base import Result
from gpujob.jsontypes import JSONObject


@dataclass(frozen=True)
class RunList(Result):
    """``runs``: the ledger's runs ({job_id, name, host, state, params, final, best, cost, ...}), best or newest first."""

    runs: list[JSONObject] = field(default_factory=list)
    total: int = 0
    shown: int = 0


@dataclass(frozen=True)
class Comparison(Result):
    """``compare``: what differs between runs (params, code, env), their metrics and curves side by side."""

    runs: list[JSONObject] = field(default_factory=list)
    params: dict[str, list[Any]] = field(default_factory=dict)
    same_params: JSONObject = field(default_factory=dict)
    code: dict[str, list[Any]] = field(default_factory=dict)
    env: dict[str, list[Any]] = field(default_factory=dict)
    final: dict[str, list[Any]] = field(default_factory=dict)
    best: dict[str, list[Any]] = field(default_factory=dict)
    series: dict[str, list[Any]] = field(default_factory=dict)
    plot: str | None = None


@dataclass(frozen=True)
class RerunResult(SubmitResult):
    """``rerun``: the submit of the new run, with its ``parent`` and the code it ran (``code_hash``, ``restored``)."""

    parent: str = ""
    code_hash: str | None = None
    restored: bool = False


@dataclass(frozen=True)
class SweepReport(Result):
    """``sweep`` / ``sweep status``: the sweep, its trials ({number, job_id, state, value, params}), the best, why it ended."""

    sweep: str = ""
    state: str = ""
    trials: list[JSONObject] = field(default_factory=list)
    best: JSONObject | None = None
    spent: JSONObject = field(default_factory=dict)
    ended: str | None = None
