"""Commands over hosts: host add/set/ls/rm/trust/disconnect, doctor, agent-log, notify test, ssh."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpujob import exitcodes
from gpujob.cli.common import agent_for, command_after, host_store


def cmd_agent_log(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.doctor import agent_log

    show(agent_log(agent_for(args.host), args.lines), args.json, ui.agent_log)
    return 0


# ---- hosts -------------------------------------------------------------------------------
def _settings(args: argparse.Namespace) -> dict[str, str | None]:
    from gpujob.usecases.hosts.add import SETTINGS

    # argparse gives these as the texts typed (or None: not given); host add/set parse them
    return {k: getattr(args, k, None) for k in SETTINGS}


def cmd_host_add(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.add import add_host, profile

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    change = add_host(args.name, args.ssh, password=password, root=args.root, preset=args.preset, price=args.price,
                      identity=args.identity, check=not args.no_check, force=args.force, settings=_settings(args),
                      on_detect=ui.detected)
    ui.same_instance(change)
    show(profile(change.host), args.json, lambda _: ui.added(change))
    return 0


def cmd_host_set(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.add import profile, update_host

    change = update_host(args.name, ssh_line=args.ssh, root=args.root, preset=args.preset, identity=args.identity,
                         price=args.price, settings=_settings(args), check=not args.no_check)
    show(profile(change.host), args.json, lambda _: ui.changed(change))
    return 0


def cmd_notify_test(args: argparse.Namespace) -> int:
    from gpujob.ui.output import show
    from gpujob.ui.report import notify_outcomes
    from gpujob.usecases.notify.send import notify_test_job

    outcomes = notify_test_job(args.job_file)
    show(outcomes, args.json, notify_outcomes)
    if not args.json and any("is not set (environment or secrets file)" in str(o.get("error")) for o in outcomes):
        from gpujob.usecases.secrets.file import default_secrets_file

        print(f"  → export each such NAME in this shell, or put NAME=value lines in {default_secrets_file()} (chmod 600)",
              file=sys.stderr)
    return 0 if all(o.get("ok") for o in outcomes) else 1


def cmd_host_ls(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.disks.warn import check, countdowns
    from gpujob.usecases.hosts.add import profile
    from gpujob.usecases.hosts.rekey import on_shared_key

    store = host_store()
    hosts, shared, releases = store.all(), on_shared_key(store), countdowns(holdings=True)

    def draw(_: object) -> None:
        ui.host_list(hosts, releases)
        ui.shared_key_note(shared)
        ui.release_notes(releases)

    show([{**profile(h), **({"shared_key": True} if h.name in shared else {}),
           **({"release": releases[h.name]} if h.name in releases else {})} for h in hosts], args.json, draw)
    check(note=lambda text: print(text, file=sys.stderr), quick=True)  # the 3- and 1-day warnings, when due
    return 0


def cmd_host_rekey(args: argparse.Namespace) -> int:
    from gpujob.errors import GpujobError, Interrupted
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.rekey import rekey_all, rekey_host

    if bool(args.name) == bool(args.all):
        raise GpujobError("name one host or pass --all", "gpujob host rekey NAME, or gpujob host rekey --all")
    try:
        done = rekey_all() if args.all else [rekey_host(args.name)]
    except KeyboardInterrupt as e:  # between hosts, or before or after one (a rekey holds Ctrl-C back while it runs)
        if isinstance(e, Interrupted):
            raise
        raise Interrupted("interrupted: no rekey was under way (each host is rekeyed whole or not at all); every "
                          "profile logs in with the key its host holds",
                          "gpujob host ls names the profiles still on the shared key: gpujob host rekey "
                          + (args.name or "--all") + " again for those") from None
    show(done if args.all else done[0], args.json, lambda _: ui.rekeyed(done))
    if any("error" in d for d in done):
        return 3  # each such host was left as it was
    return 0 if all(d["old_key_refused"] or d["kept_for"] for d in done) else 1


def cmd_host_rm(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.connection import remove_host

    show(remove_host(args.name), args.json, ui.removed)
    return 0


def cmd_host_disconnect(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.connection import disconnect_host

    show(disconnect_host(args.name), args.json, ui.disconnected)
    return 0


def cmd_host_trust(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.connection import trust_host

    show(trust_host(args.name), args.json, ui.trusted)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gpujob.ui.doctor import bench_report, doctor_report
    from gpujob.ui.output import show
    from gpujob.usecases.hosts.doctor import doctor_host

    if args.bench:
        from gpujob.usecases.hosts.preflight import bench_host

        host, rep = bench_host(args.host)
        show(rep, args.json, lambda r: bench_report(host, r))
        return 1 if rep.get("warnings") else 0
    host, rep = doctor_host(args.host, args.torch_timeout, args.job)
    show(rep, args.json, lambda r: doctor_report(host, r))
    return 1 if any(c["level"] == "error" for c in rep["checks"]) else 0  # docs/cli.md: a ✗ line is no success


def cmd_ssh(args: argparse.Namespace) -> int:
    from gpujob.usecases.hosts import shell

    host = host_store().get(args.host)
    command = command_after(args, ("--json", "--print"), ("--ssh-config",))
    plan = shell.ssh_plan_for(host, command, args.ssh_config)
    if not args.print:
        shell.hand_over(plan)  # not returning: OpenSSH (or the local shell) replaces this process
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show

    show(plan, args.json, ui.ssh_plan)
    return 0


# ---- power -------------------------------------------------------------------------------
def _power_note(args: argparse.Namespace) -> Any:
    return None if args.json else (lambda text: print(text, file=sys.stderr))


def cmd_host_on(args: argparse.Namespace) -> int:
    from gpujob.cli.jobs import duration_flag
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.power.manual import host_on

    wait = duration_flag("--wait", args.wait, "e.g. --wait 30m")
    show(host_on(args.name, wait, _power_note(args)), args.json, ui.power_answer)
    return 0


def cmd_host_off(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.power.manual import host_off

    doc = host_off(args.name, _power_note(args), args.force)
    show(doc, args.json, ui.power_answer)
    if doc["state"] == "off":
        return 0
    # not seen off: the meter may still run, so the exit status must not say it stopped
    if doc["state"] == "unknown":
        why, then = ("it has no power.state command to confirm it",
                     f"gpujob host set {args.name} --power-state CMD lets gpujob confirm it (docs/power.md)")
    else:
        why, then = (f"its power.state still says {doc['state']!r} after {doc['seconds']:.0f} s",
                     f"gpujob host state {args.name} asks again, gpujob host off {args.name} tries again")
    print(f"{args.name}: power.off ran, but the host is not known to be off: {why}\n"
          f"  → check the provider's console (the meter may still run); {then}", file=sys.stderr)
    return exitcodes.NOT_FINISHED


def cmd_host_state(args: argparse.Namespace) -> int:
    from gpujob.ui import hosts as ui
    from gpujob.ui.output import show
    from gpujob.usecases.power.manual import host_state

    show(host_state(args.name), args.json, ui.power_answer)
    return 0
