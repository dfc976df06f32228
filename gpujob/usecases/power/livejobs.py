"""What a power-off of a host would cut: its jobs that run or wait there, and what each would lose.

``host off`` asks the host's agent before running ``power.off``: a job running, restarting or queued
there makes it refuse (naming the job, with ``stop --after-checkpoint`` and ``--force`` as the ways
on); ``--force`` goes on and says what each job loses (the steps since its last complete checkpoint).
A host that cannot be asked is powered off only when its ``power.state`` says it is off already, or
with ``--force``.
"""

from __future__ import annotations

import time
from typing import Any

from gpujob.bundle import import_remote
from gpujob.config.hosts import Host
from gpujob.errors import ConnectError, GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView
from gpujob.usecases.power import commands
from gpujob.usecases.power.commands import PowerError

ACTIVE: tuple[str, ...] = import_remote("core.protocol").ACTIVE


class JobsWouldBeCut(GpujobError):
    """A power-off refused: jobs run or wait on the host."""


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def at_stake(doc: JSONObject) -> JSONObject:
    """One live job (its ``status`` record): its step, its newest complete checkpoint, the steps since."""
    st = JobView(doc)
    metrics = st.last_metrics if isinstance(st.last_metrics, dict) else {}
    step = _num(metrics.get("step"))
    ckpts = [c for c in st.checkpoints or [] if isinstance(c, dict) and c.get("complete")]
    last = ckpts[-1] if ckpts else None
    ck_step = _num(last.get("step")) if last else None
    lost = int(step - ck_step) if step is not None and ck_step is not None and step >= ck_step else None
    return {"job_id": str(st.job_id or "?"), "state": str(st.state or "?"),
            "step": int(step) if step is not None else None,
            "checkpoint": str(last.get("name")) if last else None,
            "checkpoint_step": int(ck_step) if ck_step is not None else None,
            "checkpoint_at": _num(last.get("mtime")) if last else None, "steps_lost": lost}


def loses(j: JSONObject, now: float | None = None) -> str:
    """``J (running, step 150): loses the steps since checkpoint-120, saved 7 min ago (30 so far)``."""
    where = f"{j['job_id']} ({j['state']}" + (f", step {j['step']}" if j.get("step") is not None else "") + ")"
    if j["state"] == "queued":
        return f"{where}: waits there; it would not start"
    if not j.get("checkpoint"):
        return f"{where}: has no complete checkpoint: everything it did is lost"
    ago = ""
    if isinstance(at := j.get("checkpoint_at"), (int, float)) and at:  # at_stake's: a float or None
        mins = max(0, int(((now or time.time()) - at) // 60))
        ago = f", saved {mins} min ago" if mins else ", saved under a minute ago"
    n = j.get("steps_lost")
    return f"{where}: loses the steps since {j['checkpoint']}{ago}" + (f" ({n} so far)" if n is not None else "")


def live_on(host: Host) -> list[JSONObject]:
    """The jobs running, restarting or queued on ``host`` (its agent asked), each as ``at_stake``;
    ConnectError when it cannot be asked."""
    from gpujob.transport.agent import connect_agent
    from gpujob.usecases.jobs import ops as jobs

    agent = connect_agent(host)
    try:
        out = []
        for j in jobs.ls(agent):
            if JobView(j).state in ACTIVE:
                try:
                    j = jobs.status(agent, str(JobView(j).job_id))
                except GpujobError:
                    pass  # ended or removed meanwhile: the list's record says enough
                if JobView(j).state in ACTIVE:
                    out.append(at_stake(j))
        return out
    finally:
        agent.close()


def _already_off(host: Host) -> bool:
    if not (host.power or {}).get("state"):
        return False
    try:
        return commands.state(host, commands.QUICK_STATE_S) == "off"
    except PowerError:
        return False


def guard_off(host: Host, force: bool, note: Any = None) -> list[JSONObject]:
    """Before ``host off``: the live jobs a forced off cuts (each told through ``note``); refuses
    (``JobsWouldBeCut``, ``ConnectError``) without ``force`` when there are some or it cannot tell."""
    say = note or (lambda s: None)
    try:
        live = live_on(host)
    except ConnectError as e:
        if _already_off(host):
            return []
        if not force:
            raise ConnectError(f"{host.name} was not powered off: whether a job runs there cannot be asked ({e.cause})",
                               f"{e.remedy + '; ' if e.remedy else ''}gpujob host off {host.name} --force powers it "
                               "off without asking (a job running there loses the steps since its last checkpoint)"
                               ) from None
        say(f"{host.name}: forced: whether a job runs there could not be asked ({e.cause})")
        return []
    if live and not force:
        first = live[0]["job_id"]
        raise JobsWouldBeCut(
            f"{host.name} was not powered off: {len(live)} job(s) run or wait there: "
            + "; ".join(loses(j) for j in live),
            f"gpujob stop {first} --after-checkpoint saves it and stops it, then gpujob host off {host.name}; "
            f"gpujob host off {host.name} --force powers it off now")
    for j in live:
        say(f"{host.name}: forced: {loses(j)}")
    return live
