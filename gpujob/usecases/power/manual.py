"""``gpujob host on|off|state NAME``: the power commands by hand, each answer as a document."""

from __future__ import annotations

import time
from typing import Callable

from gpujob.config.hosts import Host, HostStore
from gpujob.errors import ConnectError
from gpujob.jsontypes import JSONObject
from gpujob.usecases.power import commands
from gpujob.usecases.power.commands import PowerError
from gpujob.usecases.power.wake import ensure_on, power_off, seen_on


def host_on(name: str, wait: float | None = None, note: Callable[[str], None] | None = None) -> JSONObject:
    store = HostStore()
    host = store.get(name)
    commands.command(host, "on")  # no power.on: say so, rather than "already on"
    t0 = time.monotonic()
    host = ensure_on(host, wait=wait, note=note, store=store)
    return {"host": host.name, "state": "on", "address": host.address, "seconds": round(time.monotonic() - t0, 1)}


def host_off(name: str, note: Callable[[str], None] | None = None, force: bool = False) -> JSONObject:
    """``host off``: refused while a job runs or waits there (``force``: powered off anyway, saying what
    each job loses: ``cut`` in the answer)."""
    from gpujob.usecases.power.livejobs import guard_off

    store = HostStore()
    host = store.get(name)
    commands.command(host, "off")  # no power.off: say so before asking the host anything
    cut = guard_off(host, force, note)
    doc = power_off(host, note)
    doc["cut"] = cut
    if doc["state"] == "off":
        doc["meter_off_at"] = seen_off(store.get(name), store)
    return doc


def host_state(name: str) -> JSONObject:
    store = HostStore()
    host = store.get(name)
    state = commands.state(host)
    if state == "on":
        seen_on(host, store)
    return {"host": host.name, "state": state, "address": host.address, "powered_on_at": host.powered_on_at,
            "meter_off_at": seen_off(host, store) if state == "off" else None}


def seen_off(host: Host, store: HostStore) -> float:
    """When this laptop first found ``host`` off since it was last powered on (kept in the profile)."""
    if not host.powered_off_at or (host.powered_on_at or 0) > host.powered_off_at:
        host.powered_off_at = time.time()
        store.save(host)
    return host.powered_off_at


def off_error(host: Host, store: HostStore, e: ConnectError, spent: float = 0.0) -> ConnectError | None:
    """For a host that does not answer (``e``, after ``spent`` s of trying): a ConnectError saying it is
    powered off (its ``state`` command says so), with when the meter stopped; ``e`` with what the state
    command did when it did not tell (it hung, failed); None when there is no state command to ask.
    This runs on the way of quick commands (status, ls: ``QUICK_BUDGET_S``), so the state gets at most
    ``QUICK_STATE_S`` of what is left of that budget (at least 1 s)."""
    if not (host.power or {}).get("state"):
        return None
    limit = max(1.0, min(commands.QUICK_STATE_S, commands.QUICK_BUDGET_S - spent))
    try:
        if commands.state(host, limit) != "off":
            return None
    except PowerError as pe:  # hung (ended) or failed: say so, never wait it out here
        return ConnectError(f"{e.cause}; whether it is powered off is not known: {pe.cause}",
                            f"{e.remedy + '; ' if e.remedy else ''}gpujob host state {host.name} asks again "
                            f"with {commands.COMMAND_TIMEOUT_S:.0f} s (run the power.state command by hand to see "
                            "where it hangs)")
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seen_off(host, store)))
    return ConnectError(f"{host.name} is powered off (its power.state says so); meter off at {at}",
                        f"gpujob host on {host.name} switches it on; gpujob resume JOB powers it on and resumes the job")
