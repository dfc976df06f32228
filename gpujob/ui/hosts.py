"""What the host commands print: the profile list, a changed profile, the platform found, the idle watcher,
the kept connection and key, ``ssh --print``, the agent's log."""

from __future__ import annotations

import sys
from typing import Any

from gpujob.ui.output import console


def host_list(hosts: list[Any]) -> None:
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for col in ("NAME", "ADDRESS", "PRESET", "ROOT", "PRICE/H"):
        t.add_column(col)
    for h in hosts:
        t.add_row(h.name, h.address, h.preset, h.remote_root, f"{h.price_per_hour} {h.currency}" if h.price_per_hour else "-")
    console().print(t)


def added(change: Any) -> None:
    h = change.host
    console().print(f"host [bold]{h.name}[/] = {h.address} (preset {h.preset}, root {h.remote_root})")
    _idle(change.idle)


def changed(change: Any) -> None:
    said = {True: " (reached)", False: " (saved without trying it: --no-check)"}.get(getattr(change, "tried", None), "")
    print(f"host {change.host.name} = {change.host.address}{said}")
    _idle(change.idle)


def _idle(idle: Any) -> None:
    if idle is None:
        return
    if idle.minutes:
        print(f"idle shutdown on {idle.host}: after {idle.text} with no job and no SSH session (watcher pid {idle.pid})")
    else:
        print(f"idle shutdown on {idle.host}: off")


def detected(host: Any, found: dict[str, str]) -> None:
    """What ``host add`` found the instance to be (on stderr: ``--json`` keeps stdout)."""
    from gpujob.config.hosts import PRESETS

    if host.preset == "generic":
        return
    p = PRESETS[host.preset]
    where = f" (region {host.region})" if host.region else ""
    print(f"detected {host.preset}{where}: preset {host.preset} — root {host.root or p['root']}, shutdown "
          f"{p['shutdown_command'] or 'off'}, TensorBoard port {p['tensorboard_port']}, caches under the root"
          + ("; /etc/network_turbo exists (gpujob host set NAME --network-turbo true to use it)"
             if found.get("network_turbo") else "")
          + f"; change with gpujob host set {host.name} --preset ...", file=sys.stderr)


def removed(doc: dict[str, Any]) -> None:
    print(f"removed host {doc['removed']}")


def disconnected(doc: dict[str, Any]) -> None:
    name = doc["host"]
    print(f"closed the kept connection to {name}" if doc["closed"] else f"no connection to {name} was kept open")


def trusted(doc: dict[str, Any]) -> None:
    print(f"trusted the current host key of {doc['trusted']} ({doc['address']})")


def ssh_plan(plan: dict[str, Any]) -> None:
    """``ssh --print``: the entry gpujob keeps in the ssh config, then the command it would run."""
    from gpujob.usecases.shell import join

    if plan["block"]:
        print(f"# in {plan['ssh_config']}:\n{plan['block']}")
    print(join(plan["argv"]))


def agent_log(doc: dict[str, Any]) -> None:
    sys.stdout.write("".join(line + "\n" for line in doc["lines"]) or f"(nothing in {doc['path']})\n")
