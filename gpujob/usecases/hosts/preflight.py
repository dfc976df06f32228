"""The preflight of a rented host (``gpujob doctor HOST --bench``, remote/host/bench.py): run once per new
host and after each power-on, its figures kept in the host profile (``host ls --json``: ``bench``),
its warnings repeated at every submit to that host."""

from __future__ import annotations

import os
from typing import Any, Callable

from gpujob.config.hosts import LOCAL, Host, HostStore
from gpujob.jsontypes import JSONObject
from gpujob.transport.agent import Agent

BUDGET_S = 40.0  # the GPU steps' share of the minute a preflight may take


def run_bench(agent: Agent, host: Host, store: HostStore | None = None, budget: float = BUDGET_S) -> JSONObject:
    """The agent's ``bench`` document, kept in the profile (not for ``local``, which has none)."""
    args = ["--budget", str(budget)]
    if host.data_disk_path:
        args += ["--data-disk", host.data_disk_path]
    prefix = host.env.get("GPUJOB_PATH_PREFIX") or (os.environ.get("PATH", "") if host.kind == LOCAL else "")
    if prefix:
        args += ["--path-prefix", prefix]
    rep = agent.call("bench", args, timeout=budget + 120)  # shape and size checked as it arrives (replies.py)
    rep["host"] = host.name
    if host.kind != LOCAL:
        from gpujob.config.hostdata import admit

        host.bench = admit("bench", host.name, {k: v for k, v in rep.items() if k not in ("host", "python")})
        (store or HostStore()).save(host)
    return rep


def bench_host(name: str | None) -> tuple[Host, dict[str, Any]]:
    from gpujob.transport.agent import connect_agent

    host = HostStore().get(name)
    return host, run_bench(connect_agent(host), host)


def due(host: Host) -> bool:
    """A host never measured, or powered on since its last measure (``GPUJOB_PREFLIGHT=0``: never). A Slurm
    host's login node is not where jobs run: its figures would mislead (doctor checks the cluster instead)."""
    if host.kind == LOCAL or host.slurm or os.environ.get("GPUJOB_PREFLIGHT", "1") == "0":
        return False
    return host.bench is None or (host.powered_on_at or 0) > float(host.bench.get("at") or 0)


def before_submit(agent: Agent, host: Host, note: Callable[[str], None] | None) -> list[str]:
    """Run the preflight when it is due; the warnings of the host's last one (each also told to ``note``)."""
    if due(host):
        store = HostStore()
        with store.first_use(host.name, "preflight"):  # ten submits at once: one measures, the rest wait
            now = store.get(host.name, checked=False)
            if due(now):
                if note:
                    note(f"preflight of {host.name} (once per new host or power-on; GPUJOB_PREFLIGHT=0 skips it)")
                run_bench(agent, host, store)
            else:  # measured while this one waited: its figures
                host.bench = now.bench
    warnings = list((host.bench or {}).get("warnings") or [])
    for w in warnings:
        if note:
            note(f"warning: {host.name}: {w} (gpujob doctor {host.name} --bench)")
    return warnings
