"""Power a host on before work is sent to it: state, on (retried while the provider has no GPU
free), wait until the state says on, read the new address, then SSH with backoff. Every step
is told with the seconds since the start; the profile keeps the new address and the time."""

from __future__ import annotations

import os
import time
from typing import Callable

from gpujob.backoff import delays
from gpujob.bundle import import_remote
from gpujob.config.hosts import Host, HostStore
from gpujob.errors import ConnectError, HostKeyChanged
from gpujob.usecases.power import commands
from gpujob.usecases.power.commands import PowerError, StockOut

Note = Callable[[str], None]


def _seconds(host: Host, key: str, default: str) -> float:
    parse = import_remote("core.protocol").parse_duration
    text = (host.power or {}).get(key) or default
    try:
        return parse(text)
    except ValueError as e:
        raise PowerError(f"power.{key} of {host.name}: {e}", f"gpujob host set {host.name} --power-{key.replace('_', '-')} 10m") from None


def _poll() -> float:
    return float(os.environ.get("GPUJOB_POWER_POLL", "2"))


def can_switch(host: Host) -> bool:
    return bool((host.power or {}).get("on"))


def ensure_on(host: Host, *, wait: float | None = None, note: Note | None = None, store: HostStore | None = None) -> Host:
    """``host``, on and answering over SSH (its profile updated when it moved); unchanged when it has
    no ``power.on``. ``wait``: seconds to keep retrying a power-on refused for lack of GPUs (default
    the profile's ``power.wait``, else 10 min); then ``StockOut``."""
    if not can_switch(host):
        return host
    say = note or (lambda s: None)
    t0 = time.monotonic()

    def step(text: str) -> None:
        say(f"[{time.monotonic() - t0:5.1f} s] {host.name}: {text}")

    now = commands.state(host) if host.power.get("state") else ("on" if _answers(host) else "off")
    step(f"state {now}")
    if now == "on":
        if host.power.get("address") and host.power.get("state") and not _answers(host):
            _readdress(host)  # switched on elsewhere (the console) and its login moved: follow it
            step(f"address {host.address}")
            _until_ssh(host, t0 + _seconds(host, "boot_timeout", "10m"), step)
            (store or HostStore()).save(host)
        seen_on(host, store or HostStore())
        return host
    if now == "off":
        _power_on(host, wait if wait is not None else _seconds(host, "wait", "10m"), step)
    boot = _seconds(host, "boot_timeout", "10m")
    if host.power.get("state"):
        _until_on(host, t0 + boot, step)
    if host.power.get("address"):
        moved = _readdress(host)
        step(f"address {host.address}" + (" (new)" if moved else " (unchanged)"))
    _until_ssh(host, t0 + boot, step)
    host.powered_on_at, host.powered_off_at = time.time(), None
    (store or HostStore()).save(host)
    step("answers over SSH")
    return host


def seen_on(host: Host, store: HostStore) -> None:
    """``host`` was found on (switched on elsewhere: the console): no longer powered off, so its
    platform's release countdown (docs/power.md) stops."""
    if host.powered_off_at and (host.powered_on_at or 0) <= host.powered_off_at:
        host.powered_off_at = None
        store.save(host)


def _power_on(host: Host, wait: float, step: Note) -> None:
    deadline = time.monotonic() + wait
    waits = delays(float(os.environ.get("GPUJOB_POWER_RETRY", "10")), 120.0)
    while True:
        try:
            commands.switch(host, "on")
            step("power on accepted")
            return
        except StockOut as e:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StockOut(f"{host.name}: no GPU free to power it on for {wait:.0f} s ({e.cause.split('(', 1)[-1].rstrip(')')})",
                               "wait longer (--wait-gpus 1h), or add another host to host: (a list falls over)") from None
            pause = min(next(waits), left)
            step(f"no GPU free; trying again in {pause:.3g} s")
            time.sleep(pause)


def _until_on(host: Host, deadline: float, step: Note) -> None:
    last = ""
    while True:
        now = commands.state(host)
        if now != last:
            step(f"state {now}")
            last = now
        if now == "on":
            return
        if time.monotonic() >= deadline:
            raise PowerError(f"{host.name} was powered on but its state stayed {now!r}",
                             f"look at the provider's console; gpujob host state {host.name} asks again "
                             "(power.boot_timeout waits longer)")
        time.sleep(_poll())


def _readdress(host: Host) -> bool:
    """Apply the ``address`` command's answer; True when the login changed (the kept connection is closed)."""
    fields = commands.address(host)
    before = host.address
    for k, v in fields.items():
        if k in ("hostname", "port", "user"):  # where to log in; never which key (a provider's API printed the line)
            setattr(host, k, v)
    if host.address != before:
        from gpujob.transport import mux

        mux.disconnect(host)
        return True
    return False


def _answers(host: Host) -> bool:
    from gpujob.transport.ssh import open_client

    try:
        open_client(host, retries=1).close()
        return True
    except HostKeyChanged:
        raise
    except ConnectError:
        return False


def _until_ssh(host: Host, deadline: float, step: Note) -> None:
    """SSH with backoff: an instance reported running may not accept logins for a while."""
    waits = delays(_poll() / 2, 15.0)
    tries = 0
    while not _answers(host):
        tries += 1
        if time.monotonic() >= deadline:
            raise ConnectError(f"{host.name} is powered on but {host.address} does not accept SSH",
                               f"look at the provider's console; gpujob host set {host.name} --ssh \"...\" if the "
                               "login changed")
        if tries == 1:
            step(f"waiting for SSH at {host.address}")
        time.sleep(min(next(waits), max(0.0, deadline - time.monotonic())))


def power_off(host: Host, note: Note | None = None, wait: float | None = None) -> dict:
    """``host off``: run ``off``, then (with a state command) wait for the state to say off, up to
    ``wait`` seconds (default the profile's ``power.boot_timeout``, else 5 min)."""
    say = note or (lambda s: None)
    t0 = time.time()
    commands.switch(host, "off")
    say(f"[{time.time() - t0:5.1f} s] {host.name}: power off accepted")
    state = None
    if host.power.get("state"):
        deadline = time.monotonic() + (wait if wait is not None else _seconds(host, "boot_timeout", "5m"))
        said = None
        while (state := commands.state(host)) != "off" and time.monotonic() < deadline:
            if state != said:  # each new answer once: a wait of minutes is not silent
                say(f"[{time.time() - t0:5.1f} s] {host.name}: state {state}; waiting for off")
                said = state
            time.sleep(_poll())
    from gpujob.transport import mux

    mux.disconnect(host)
    return {"host": host.name, "state": state or "unknown", "seconds": round(time.time() - t0, 1)}
