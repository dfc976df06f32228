"""Placement: ``host: [a, b, c]`` (or ``--host a,b,c``) submits to the first host that answers
and has the job's GPUs free now; ``--wait-gpus`` polls them (with backoff, up to a bound)
until one frees up. "Free" is what the host's agent would allocate: a GPU no live job of
ours holds (gpus.lock's bookkeeping) whose memory use is below ``GPUJOB_GPU_FREE_MIB``, with
no job of ours already waiting in that host's queue.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from gpujob.backoff import delays
from gpujob.bundle import import_remote
from gpujob.config.hosts import Host, HostStore
from gpujob.errors import GpujobError
from gpujob.transport.agent import Agent, connect_agent

Note = Callable[[str], None]


@dataclass
class Skip:
    host: str
    why: str


def wanted(gpus: Any) -> int:
    """GPUs the job needs free: 0 (none asked, or ``auto``: the CPU where there is none), N, or -1
    (all of the host's)."""
    if gpus in (None, 0, "0", "auto"):
        return 0
    return -1 if gpus == "all" else int(gpus)


def cannot_fit(doc: dict[str, Any], need: int) -> str:
    """'' when the host of the ``gpus`` verb's answer ``doc`` has ``need`` GPUs at all (free or
    busy), else the reason: a CPU host, or fewer GPUs than asked (``gpus: all`` on a CPU host is
    no GPU, not zero of them)."""
    if need == 0:
        return ""
    gpus = doc.get("gpus")
    if gpus is None and doc.get("smi_error"):  # an nvidia-smi that fails: GPUs gone, no CPU host
        return f"has no working GPU now ({str(doc['smi_error'])[:300]}; started without its GPUs, or the driver is gone)"
    if gpus is None:
        return "is a CPU host (no nvidia-smi)"
    n = len(gpus) if need == -1 else need
    if n > len(gpus) or not gpus:
        return f"has {len(gpus)} GPU(s), the job asks for {n or 'all'}"
    return ""


def why_not(doc: dict[str, Any], need: int) -> str:
    """'' when the ``gpus`` verb's answer ``doc`` has ``need`` GPUs free now, else the reason."""
    if need == 0:
        return ""
    gpus = doc.get("gpus") or []
    never = cannot_fit(doc, need)
    if never:
        return never
    held = {str(k) for k in (doc.get("held") or {})}
    limit = import_remote("host.gpus").FREE_MEM_MIB
    free = [g for g in gpus if str(g.get("index")) not in held and (g.get("mem_used") or 0) < limit]
    n = len(gpus) if need == -1 else need
    if doc.get("queue"):
        return f"{len(doc['queue'])} job(s) already wait for its GPUs"
    if len(free) < n:
        return f"{len(gpus) - len(free)} of {len(gpus)} GPU(s) busy ({len(held)} held by our jobs)"
    return ""


def check_capacity(host: Host, agent: Agent, need: int, cpu_ok: bool = False) -> None:
    """Refuse, before anything is sent, a job asking for more GPUs than ``host`` has at all (a
    busy host is fine: the job queues). One rule on every host, the laptop's ``local`` too:
    ``gpus: auto`` is what runs on a CPU host, and ``cpu_ok`` (``launcher: torchrun``: N CPU processes there).
    A Slurm host's login node has no GPUs of its own: the agent checks the partition's (remote/slurm/submit.py)."""
    if need == 0 or host.slurm:
        return
    doc = agent.call("gpus", _prefix_args(host), timeout=60)
    if cpu_ok and doc.get("gpus") is None and not doc.get("smi_error"):
        return  # launcher: torchrun on a CPU host starts N CPU processes (the agent's rule, remote/host/gpus.py wanted)
    why = cannot_fit(doc, need)
    if why:
        raise GpujobError(f"{host.name} {why}: the job cannot run there; nothing was submitted",
                          "submit to a host with the GPUs (--host a,b tries each in turn; --wait-gpus 2h with several "
                          "waits for one to free up), or lower gpus: (gpus: auto uses the GPUs where there are some and the CPU "
                          "where there is none; gpus: 0 runs on the CPU)")


def _prefix_args(host: Host) -> list[str]:
    """The host profile's PATH prefix: where its jobs find nvidia-smi, so the check looks there too."""
    prefix = host.env.get("GPUJOB_PATH_PREFIX")
    return ["--path-prefix", prefix] if prefix else []


def probe(host: Host, need: int, note: Note = lambda s: None) -> tuple[Agent | None, str]:
    """(agent, '') when ``host`` answers and fits now, else (None, why). A host the profile can
    power on is switched on first (a refused power-on, after its ``power.wait``, is a why)."""
    from gpujob.usecases.power.commands import PowerError
    from gpujob.usecases.power.wake import ensure_on

    try:
        host = ensure_on(host, note=note)
    except PowerError as e:
        return None, e.cause
    try:
        agent = connect_agent(host)
        doc = agent.call("gpus", _prefix_args(host), timeout=60) if need and not host.slurm else {}
    except GpujobError as e:
        return None, f"does not answer ({str(e).splitlines()[0]})"
    why = why_not(doc, need) if not host.slurm else ""  # Slurm places the job: it waits in Slurm's queue
    if why:
        agent.close()
        return None, why
    return agent, ""


def healthy(host: Host) -> bool:
    """False when the host's last preflight (``doctor --bench``) warned about its GPUs or disk."""
    return not (host.bench or {}).get("warnings")


def place(names: Sequence[str | None], gpus: Any, *, wait: float | None = None, note: Note = lambda s: None
          ) -> tuple[Host, Agent, list[Skip]]:
    """The first of ``names`` that answers with the GPUs free; with ``wait`` seconds, poll
    them all (backoff from GPUJOB_PLACE_POLL, default 10 s, to 5 min) until one fits."""
    store = HostStore()
    hosts = [store.get(n) for n in names]  # an unknown profile fails before anything is sent
    hosts.sort(key=lambda h: not healthy(h))  # a host whose preflight found a slow or faulty GPU goes last
    need = wanted(gpus)
    waits = delays(float(os.environ.get("GPUJOB_PLACE_POLL", "10")), 300.0)
    deadline = time.monotonic() + (wait or 0)
    while True:
        skipped: list[Skip] = []
        for h in hosts:
            agent, why = probe(h, need, note)
            if agent is not None:
                return h, agent, skipped
            skipped.append(Skip(h.name, why))
            note(f"skipped {h.name}: {why}")
        left = deadline - time.monotonic()
        if wait is None or left <= 0:
            raise GpujobError(
                "no host has the job's GPUs free now: " + "; ".join(f"{s.host}: {s.why}" for s in skipped),
                "gpujob submit --wait-gpus waits for the first to free up, or add hosts to host:" if wait is None
                else "wait longer (--wait-gpus 12h) or add hosts; nothing was submitted")
        delay = min(next(waits), left)
        note(f"waiting {delay:.0f} s for GPUs (Ctrl-C: nothing is submitted)")
        time.sleep(delay)
