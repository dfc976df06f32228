"""Commands over hosts: host add/set/ls/rm/trust/disconnect, doctor, agent-log, notify test, ssh."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpujob.cli.common import agent_for, command_after, esc, host_store
from gpujob.errors import GpujobError, HostError


def cmd_agent_log(args: argparse.Namespace) -> int:
    from gpujob.ui.output import print_json

    doc = agent_for(args.host).call("agentlog", ["--lines", str(args.lines)])
    if args.json:
        print_json(doc)
    else:
        sys.stdout.write("".join(line + "\n" for line in doc["lines"]) or f"(nothing in {doc['path']})\n")
    return 0


# ---- hosts -------------------------------------------------------------------------------
def cmd_host_add(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json
    from gpujob.usecases.hostsetup import add_host

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    host = add_host(args.name, args.ssh, password=password, root=args.root, preset=args.preset,
                    price=args.price, identity=args.identity, check=not args.no_check, force=args.force)
    note = None
    if any(getattr(args, k) is not None for k in ("shutdown_command", "private_address", "network_turbo", "hf_endpoint",
                                                  "pip_index_url", "data_disk", "tensorboard_port", "idle_shutdown")):
        note = _apply_host_settings(host, args)
        host_store().save(host)
    if args.json:
        print_json({"name": host.name, **host.to_dict()})
    else:
        console().print(f"host [bold]{host.name}[/] = {host.address} (preset {host.preset}, root {host.remote_root})")
        if note:
            print(note)
    return 0


def _apply_host_settings(host: Any, args: argparse.Namespace) -> str | None:
    """Apply ``host_setting_args`` to a profile (not saved); the idle-shutdown note, if any."""
    if getattr(args, "private_address", None) is not None:
        host.private_address = args.private_address or None
    if args.shutdown_command is not None:
        host.shutdown_command = args.shutdown_command or None
    for attr in ("network_turbo", "hf_endpoint", "pip_index_url", "data_disk", "tensorboard_port"):  # "" clears
        val = getattr(args, attr, None)
        if val is not None:
            setattr(host, attr, {"true": True, "false": None}.get(val, val) if attr == "network_turbo" else (val or None))
    note = None
    if getattr(args, "idle_shutdown", None) is not None:
        note = _idle_shutdown(host, args.idle_shutdown)
        off = args.idle_shutdown.strip().lower() in ("0", "off", "none", "")
        host.idle_shutdown = None if off else args.idle_shutdown  # the instance revives its watcher after a reboot
    return note


def cmd_host_set(args: argparse.Namespace) -> int:
    from gpujob.config.hosts import parse_ssh_target

    store = host_store()
    host = store.get(args.name)
    if host.kind == "local":
        raise HostError("'local' is built in", "set GPUJOB_LOCAL_ROOT to move its root")
    if args.ssh:
        for k, v in parse_ssh_target(args.ssh).items():
            setattr(host, k, v)
    for attr in ("root", "preset", "identity"):
        val = getattr(args, attr)
        if val is not None:
            setattr(host, "identity_file" if attr == "identity" else attr, val)
    if args.price is not None:
        host.price_per_hour = args.price
    note = _apply_host_settings(host, args)
    store.save(host)
    if args.json:
        from gpujob.ui.output import print_json

        print_json({"name": host.name, **host.to_dict()})
    else:
        print(f"host {host.name} = {host.address}")
        if note:
            print(note)
    return 0


def _idle_shutdown(host: Any, text: str) -> str:
    """Install (``0``/``off``: remove) the instance's idle watcher: power off after N idle minutes."""
    import json

    from gpujob.config.durations import parse_duration

    try:
        minutes = 0.0 if text.strip().lower() in ("0", "off", "none", "") else parse_duration(text) / 60.0
    except ValueError as e:
        raise GpujobError(f"--idle-shutdown: {e}", "e.g. --idle-shutdown 30m (or off)") from None
    if minutes and not host.shutdown_command:
        raise HostError(f"host {host.name} has no shutdown command", f"set one: gpujob host set {host.name} --shutdown-command CMD")
    res = agent_for(host.name).call("idle_shutdown", ["--minutes", repr(minutes)],
                                 input=json.dumps({"command": host.shutdown_command}).encode())
    if minutes:
        return f"idle shutdown on {host.name}: after {text} with no job and no SSH session (watcher pid {res.get('pid')})"
    return f"idle shutdown on {host.name}: off"


def cmd_notify_test(args: argparse.Namespace) -> int:
    from gpujob.bundle import import_remote
    from gpujob.config.spec import load_spec
    from gpujob.usecases.notifycheck import format_outcomes, notify_test, secrets_from_env

    spec = load_spec(args.job_file)
    if not (spec.notify or {}).get("channels"):
        raise GpujobError(f"{spec.source} has no notify channels", "add notify: {channels: [...]} (see docs/notifications.md)")
    secrets = secrets_from_env(import_remote("notify").secret_names(spec.notify))
    outcomes = notify_test(spec.notify, secrets, job_name=spec.name)
    if args.json:
        from gpujob.ui.output import print_json

        print_json(outcomes)
    else:
        for line in format_outcomes(outcomes):
            print(line)
    return 0 if all(o.get("ok") for o in outcomes) else 1


def cmd_host_ls(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json

    hosts = host_store().all()
    if args.json:
        print_json([{"name": h.name, **h.to_dict()} for h in hosts])
        return 0
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for col in ("NAME", "ADDRESS", "PRESET", "ROOT", "PRICE/H"):
        t.add_column(col)
    for h in hosts:
        t.add_row(h.name, h.address, h.preset, h.remote_root, f"{h.price_per_hour} {h.currency}" if h.price_per_hour else "-")
    console().print(t)
    return 0


def cmd_host_rm(args: argparse.Namespace) -> int:
    from gpujob.transport import mux

    store = host_store()
    host = store.get(args.name)
    store.remove(args.name)
    if host.kind != "local":
        mux.disconnect(host)  # a kept connection to it closes too
    if args.json:
        from gpujob.ui.output import print_json

        print_json({"removed": args.name})
    else:
        print(f"removed host {args.name}")
    return 0


def cmd_host_disconnect(args: argparse.Namespace) -> int:
    from gpujob.transport import mux

    host = host_store().get(args.name)
    closed = host.kind != "local" and mux.disconnect(host)
    if args.json:
        from gpujob.ui.output import print_json

        print_json({"host": host.name, "closed": closed})
    else:
        print(f"closed the kept connection to {host.name}" if closed else f"no connection to {host.name} was kept open")
    return 0


def cmd_host_trust(args: argparse.Namespace) -> int:
    from gpujob.transport import mux
    from gpujob.transport.ssh import forget_host_key, open_client

    host = host_store().get(args.name)
    mux.disconnect(host)  # a kept connection still talks to the old key's server
    forget_host_key(host)
    open_client(host).close()  # records the key offered now
    if args.json:
        from gpujob.ui.output import print_json

        print_json({"trusted": host.name, "address": host.address})
    else:
        print(f"trusted the current host key of {host.name} ({host.address})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gpujob.ui.output import print_json
    from gpujob.usecases.doctor import run_doctor

    host = host_store().get(args.host)
    from gpujob.transport.agent import connect_agent

    rep = run_doctor(connect_agent(host), host, args.torch_timeout)
    if args.json:
        print_json(rep)
    else:
        from gpujob.ui.output import console

        c = console()
        c.print(f"[bold]{host.name}[/] ({host.address}, preset {host.preset}, root {rep.get('root')})")
        colors = {"ok": "green", "warn": "yellow", "error": "red"}
        for ch in rep["checks"]:
            mark = {"ok": "✓", "warn": "!", "error": "✗"}[ch["level"]]
            c.print(f"[{colors[ch['level']]}]{mark} {ch['name']:<14}[/] {esc(ch['message'])}")
            if ch["remedy"] and ch["level"] != "ok":
                c.print(f"  [dim]→ {esc(ch['remedy'])}[/]")
    return 0


def cmd_ssh(args: argparse.Namespace) -> int:
    from gpujob.usecases import shell

    host = host_store().get(args.host)
    command = command_after(args, ("--json", "--print"), ("--ssh-config",))
    plan = shell.ssh_plan(host, host_store().all(), command, args.ssh_config)
    if args.print:
        if args.json:
            from gpujob.ui.output import print_json

            print_json({"host": host.name, **plan})
        else:
            if plan["block"]:
                print(f"# in {plan['ssh_config']}:\n{plan['block']}")
            print(shell.join(plan["argv"]))
        return 0
    shell.hand_over(plan)
    return 0  # not reached: OpenSSH (or the local shell) replaced this process
