"""``gpujob host on|off|state NAME``: the power commands by hand, each answer as a document."""

from __future__ import annotations

import time
from typing import Any, Callable

from gpujob.config.hosts import HostStore
from gpujob.usecases.power import commands
from gpujob.usecases.power.wake import ensure_on, power_off


def host_on(name: str, wait: float | None = None, note: Callable[[str], None] | None = None) -> dict[str, Any]:
    store = HostStore()
    host = store.get(name)
    commands.command(host, "on")  # no power.on: say so, rather than "already on"
    t0 = time.monotonic()
    host = ensure_on(host, wait=wait, note=note, store=store)
    return {"host": host.name, "state": "on", "address": host.address, "seconds": round(time.monotonic() - t0, 1)}


def host_off(name: str, note: Callable[[str], None] | None = None) -> dict[str, Any]:
    return power_off(HostStore().get(name), note)


def host_state(name: str) -> dict[str, Any]:
    host = HostStore().get(name)
    return {"host": host.name, "state": commands.state(host), "address": host.address,
            "powered_on_at": host.powered_on_at}
