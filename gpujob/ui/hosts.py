"""What the host commands print: the profile list, a changed profile, the platform found, the idle watcher,
the kept connection and key, ``ssh --print``, the agent's log."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpujob.jsontypes import JSONObject
from gpujob.ui.output import console

if TYPE_CHECKING:
    from gpujob.usecases.hosts.shell import SshPlan


def host_list(hosts: list[Any], releases: Mapping[str, Any] | None = None) -> None:
    from gpujob.ui.plaintable import Col, table

    # the name and the address (its port!) are what the next command needs: they stay; the root
    # shortens in its middle, the rest give way whole
    cols = [Col("NAME", "name"), Col("ADDRESS"), Col("PRESET", rank=4), Col("ROOT", "name", 5), Col("PRICE/H", rank=2),
            Col("POWER", rank=3), Col("PREFLIGHT", rank=1), Col("RELEASED IN", rank=1, hide_empty=True)]
    rows = [[h.name, h.address, h.preset, h.remote_root, f"{h.price_per_hour} {h.currency}" if h.price_per_hour else "-",
             "on/off" if h.power.get("on") else "-", preflight_cell(h.bench), release_cell((releases or {}).get(h.name))]
            for h in hosts]
    sys.stdout.write(table(cols, rows))


def release_cell(rel: Mapping[str, Any] | None) -> str:
    """A powered-off host's countdown to its platform's release (``off, 12 days``); ``-`` for the others."""
    if not rel:
        return "-"
    return "off, bad released_after" if rel.get("error") else f"off, {rel['left']}"


def release_notes(releases: Mapping[str, Any]) -> None:
    """Under ``host ls``: each powered-off host within 3 days of its release, its checkpoints only there."""
    for name, rel in releases.items():
        if rel.get("error"):
            print(f"! {rel['error']}", file=sys.stderr)
        elif rel["left_s"] <= 3 * 86400:
            only = rel.get("only_there") or []
            what = (f"{len(only)} job(s) with checkpoints only there: gpujob pull JOB --latest after gpujob host on "
                    f"{name} (host ls --json lists them)" if only else "no checkpoint known to be only there")
            when = f"in {rel['left']}" if rel["left_s"] > 0 else "already (it may be gone)"
            print(f"! {name} is powered off: its platform releases it and wipes its disk {when}; {what}", file=sys.stderr)


def preflight_cell(bench: JSONObject | None) -> str:
    """The last preflight in a few words: its warnings counted, else the first GPU's bf16 share of its rating."""
    if not bench:
        return "-"
    # its shape (a list of warnings, a list of GPU objects) checked when kept and when read back (config/hostdata.py)
    warnings, gpus = bench.get("warnings"), bench.get("gpus")
    if isinstance(warnings, list) and warnings:  # plain text: the table is plaintable's, which draws no markup
        return f"{len(warnings)} warning(s)"
    g = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else {}
    pct = g.get("bf16_pct")
    return f"ok, bf16 {float(pct):g} %" if isinstance(pct, (int, float, str)) else "ok"


def added(change: Any) -> None:
    h = change.host
    console().print(f"host [bold]{h.name}[/] = {h.address} (preset {h.preset}, root {h.remote_root})")
    _idle(change.idle)
    if h.preset in ("autodl", "vast", "runpod") and not h.power:
        print(f"to let gpujob switch it on and off from here: the {h.preset} recipe in docs/power.md "
              f"(gpujob host set {h.name} --power-on ... --power-off ... --power-state ... --power-address ...)")


def same_instance(change: Any) -> None:
    """``host add`` of an instance another profile already reaches (on stderr: ``--json`` keeps stdout)."""
    for other in getattr(change, "same_as", None) or []:
        print(f"warning: {change.host.name} reaches the same instance as profile {other} (same host key, same root "
              f"{change.host.remote_root}): its jobs are listed once, under one of them. If its login changed, keep "
              f"one: gpujob host set {other} --ssh \"...\" and gpujob host rm {change.host.name}, or gpujob host rm {other}",
              file=sys.stderr)


def changed(change: Any) -> None:
    saids: dict[bool | None, str] = {True: " (reached)", False: " (saved without trying it: --no-check)"}
    said = saids.get(getattr(change, "tried", None), "")
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
    from gpujob.ui.neutral import clean

    where = f" (region {clean(host.region)})" if host.region else ""
    print(f"detected {host.preset}{where}: preset {host.preset} — root {host.root or p['root']}, shutdown "
          f"{p['shutdown_command'] or 'off'}, TensorBoard port {p['tensorboard_port']}, caches under the root"
          + ("; /etc/network_turbo exists (gpujob host set NAME --network-turbo true to use it)"
             if found.get("network_turbo") else "")
          + f"; change with gpujob host set {host.name} --preset ...", file=sys.stderr)


def removed(doc: Mapping[str, object]) -> None:
    print(f"removed host {doc['removed']}")


def disconnected(doc: Mapping[str, object]) -> None:
    name = doc["host"]
    print(f"closed the kept connection to {name}" if doc["closed"] else f"no connection to {name} was kept open")


def rekeyed(done: list[dict[str, Any]]) -> None:
    """``host rekey``: per host, what was done and what was verified (a failure on stderr)."""
    from gpujob.ui.neutral import clean

    if not done:
        print("no profile logs in with gpujob's shared key: nothing to do")
    for d in done:
        if "error" in d:
            print(f"✗ {d['host']}: {clean(d['error'])} (left as it was)" + (f"; {clean(d['remedy'])}" if d.get("remedy") else ""),
                  file=sys.stderr)
            continue
        old = "gpujob's shared key" if d["was"] == "shared" else "its previous key"
        print(f"{d['host']} ({d['address']}): now logs in with a key of its own (verified with that key alone), "
              f"added to {clean(d['file'])}")
        if d.get("ssh_config"):
            print(f"  {d['ssh_config']}: ssh gpujob-{d['host']} offers the new key")
        if d["kept_for"]:
            print(f"  {old} stays there: profile(s) {', '.join(d['kept_for'])} log in as the same user with it; "
                  f"rekey them too: gpujob host rekey --all")
        elif d["old_key_refused"]:
            print(f"  {old}: {d['removed_lines']} line(s) removed; a login with it alone is refused now")
        elif d["old_key_refused"] is False:
            print(f"! {d['host']}: {old} still opens it after {d['removed_lines']} line(s) were removed: it is authorized "
                  "somewhere else too (another authorized_keys file, an AuthorizedKeysCommand): remove it there",
                  file=sys.stderr)
        else:
            print(f"! {d['host']}: could not check that {old} is refused now (the link failed): run gpujob host rekey "
                  f"{d['host']} again", file=sys.stderr)


def shared_key_note(names: list[str]) -> None:
    """One line under ``host ls`` while profiles still log in with the shared key."""
    if names:
        print(f"! {', '.join(names)} still log(s) in with gpujob's shared key, which every such instance accepts "
              "(one provider could log into the others): gpujob host rekey --all", file=sys.stderr)


def trusted(doc: Mapping[str, object]) -> None:
    print(f"trusted the current host key of {doc['trusted']} ({doc['address']})")


def ssh_plan(plan: SshPlan) -> None:
    """``ssh --print``: the entry gpujob keeps in the ssh config, then the command it would run."""
    from gpujob.usecases.hosts.shell import join

    if plan["block"]:
        print(f"# in {plan['ssh_config']}:\n{plan['block']}")
    print(join(plan["argv"]))


def agent_log(doc: JSONObject) -> None:
    from gpujob.ui.neutral import clean

    lines = doc["lines"]  # a list of text (replies.py checked the answer's shape)
    sys.stdout.write(clean("".join(f"{line}\n" for line in (lines if isinstance(lines, list) else []))
                           or f"(nothing in {doc['path']})\n"))


def power_answer(doc: Mapping[str, object]) -> None:
    """``host on|off|state``: the state, the address, and when the meter stopped."""
    import time

    line = f"{doc['host']}: {doc['state']}"
    if doc.get("address"):
        line += f" ({doc['address']})"
    if doc.get("seconds") is not None:
        line += f" after {doc['seconds']:.0f} s"
    off = doc.get("meter_off_at")
    if isinstance(off, (int, float)) and off:
        line += f"; meter off at {time.strftime('%H:%M:%S', time.localtime(off))}"
    print(line)
