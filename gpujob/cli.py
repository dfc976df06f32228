"""``gpujob`` command line: argument parsing and dispatch, nothing else.

Heavy modules (paramiko, rich, httpx) are imported inside the commands that use them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, NoReturn

from gpujob import __version__
from gpujob.errors import GpujobError, HostError

Handler = Callable[[argparse.Namespace], int]


# ---- shared helpers ----------------------------------------------------------------------
def _store() -> Any:
    from gpujob.hosts import HostStore

    return HostStore()


def _agent(host_name: str | None) -> Any:
    from gpujob.agent import connect_agent

    return connect_agent(_store().get(host_name))


def _host_for_job(args: argparse.Namespace) -> str | None:
    if getattr(args, "host", None):
        return args.host
    from gpujob import index

    return index.host_of(args.job) if getattr(args, "job", None) else None


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@contextlib.contextmanager
def _transfer_bar(description: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar (bytes, rate, ETA) on a terminal; yields its update callback, or None."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), transient=True)
    task = bar.add_task(description, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def _job_ref(text: str) -> str:
    """argparse type of a JOB argument: an id, an id's unique part, a job name, or last/@."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9@_][A-Za-z0-9@._-]{0,127}", text):  # "_": a host name (tunnel HOST)
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r} is not a job: give a job id, the end of one, or a job name (gpujob ls lists them)")
    return text


def _number(kind: Callable[[str], float], lo: float, hi: float) -> Callable[[str], Any]:
    """argparse type of a number from ``lo`` to ``hi`` (nan and inf refused)."""
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not lo <= v <= hi:  # false for nan too
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is out of range: expected {lo:g} to {hi:g}")
        return v

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


_PORT = _number(int, 1, 65535)
_PRICE = _number(float, 0, 1e6)


def _url(text: str) -> str:
    """argparse type of a mirror's address: an http(s) URL, or "" (clears)."""
    from urllib.parse import urlsplit

    try:
        ok = not text or (urlsplit(text).scheme in ("http", "https") and bool(urlsplit(text).hostname))
    except ValueError:
        ok = False
    if not ok or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not an http(s) URL, e.g. https://hf-mirror.com ('' clears)")
    return text


def _address(text: str) -> str:
    """argparse type of ``--private-address``: a host name or IP address, or "" (clears)."""
    from gpujob.hosts import check_address

    try:
        return check_address(text) if text else text
    except GpujobError as e:
        raise argparse.ArgumentTypeError(e.cause) from None


def _regex(text: str) -> str:
    """argparse type of ``--grep``: a pattern Python's ``re`` compiles."""
    import re

    try:
        re.compile(text.encode("utf-8", "surrogateescape"))  # as tail's filter compiles it
    except (re.error, OverflowError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a valid regular expression: {e} "
                                         "(Python syntax; escape ( [ * + ? with a backslash)") from None
    return text


# ---- jobs --------------------------------------------------------------------------------
def cmd_submit(args: argparse.Namespace) -> int:
    from gpujob import index
    from gpujob.spec import load_spec
    from gpujob.submit import submit

    spec = load_spec(args.job_file, args.set)
    if spec.nodes and not args.host:
        return _submit_nodes(args, spec)
    names = args.host.split(",") if args.host else (spec.hosts or [spec.host])
    if len(names) > 1 or args.wait_gpus:  # placement: the first host with the GPUs free
        host, agent, skipped = _place(names, spec, args)
    else:
        from gpujob.agent import connect_agent

        host, skipped = _store().get(names[0]), []
        agent = connect_agent(host)
    with _transfer_bar(f"sync → {host.name}", not args.json) as progress_cb:
        res = submit(agent, spec, host, progress_cb)
    res["skipped"] = [vars(s) for s in skipped]
    index.record(res["job_id"], host.name, spec.name, **_resubmit_fields(spec, args))
    if args.json:
        from gpujob.ui import print_json

        print_json(res)
    else:
        from gpujob.ui import console

        s = res["sync"]
        c = console()
        c.print(f"[bold]{res['job_id']}[/] submitted to [cyan]{host.name}[/] ({res['state']}); "
                f"synced {s['files_sent']} file(s), {s['bytes_sent'] / 1e6:.1f} MB, {s['unchanged']} unchanged")
        c.print(f"  follow: gpujob tail {res['job_id']} -f    status: gpujob status {res['job_id']}")
    if args.follow:
        return _follow(host.name, res["job_id"])
    return 0


def _place(names: list[str], spec: Any, args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    from gpujob.durations import parse_duration
    from gpujob.placement import place

    def note(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr)

    try:
        wait = parse_duration(args.wait_gpus) if args.wait_gpus else None
    except ValueError as e:
        raise GpujobError(f"--wait-gpus: {e}", "e.g. --wait-gpus 2h; nothing was submitted") from None
    try:
        return place(names, spec.gpus, wait=wait, note=note)
    except KeyboardInterrupt:
        print("stopped waiting for GPUs; nothing was submitted", file=sys.stderr)
        raise


def _resubmit_fields(spec: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What ``gpujob move`` needs to send the job again: its job file and ``--set`` overrides."""
    src = Path(spec.source)
    return {"job_file": str(src.resolve()), "set": list(args.set)} if src.is_file() else {}


def _submit_nodes(args: argparse.Namespace, spec: Any) -> int:
    from gpujob import index
    from gpujob.nodes import submit_nodes

    store = _store()
    hosts = [store.get(n) for n in spec.nodes]
    res = submit_nodes(spec, hosts)
    index.record(res["job_id"], res["host"], spec.name)
    if args.json:
        from gpujob.ui import print_json

        print_json(res)
    else:
        print(f"{res['job_id']} submitted to {len(hosts)} nodes: {res['host']}")
        print(f"  follow: gpujob tail {res['job_id']} -f    status: gpujob status {res['job_id']}")
    if args.follow:
        return cmd_tail(argparse.Namespace(job=res["job_id"], host=None, follow=True, lines=0, node=None))
    return 0


def _node_hosts(args: argparse.Namespace) -> list[Any] | None:
    """The hosts of a job over several nodes (from the local index), else None."""
    name = _host_for_job(args)
    if not name or "," not in name:
        return None
    store = _store()
    return [store.get(n) for n in name.split(",")]


def _follow(host_name: str | None, job: str) -> int:
    from gpujob import jobs
    from gpujob.agent import connect_agent

    host = _store().get(host_name)
    out = sys.stdout.buffer
    current: list[Any] = []

    def reconnect() -> Any:
        for a in current:
            a.t.close()
        current[:] = [connect_agent(host)]
        return current[0]

    def write(b: bytes) -> None:
        out.write(b)
        out.flush()

    try:
        jobs.follow_logs(reconnect, job, write, lines=0)
    except KeyboardInterrupt:
        sys.stderr.write(f"\ndetached; {job} keeps running on {host.name}\n")
        return 130
    st = jobs.status(current[0] if current else reconnect(), job)
    sys.stderr.write(f"{st['job_id']}: {st.get('state')}\n")
    from gpujob.exitcodes import for_state

    return for_state(st.get("state"))


def cmd_status(args: argparse.Namespace) -> int:
    from gpujob import jobs
    from gpujob.ui import console, job_panel, print_json

    if args.job is None:
        if getattr(args, "watch", False):
            return _watch_ls(args)
        return cmd_ls(args)
    nodes = _node_hosts(args)
    if nodes:
        from gpujob.nodes import aggregate, on_nodes

        st = aggregate(args.job, nodes, on_nodes(nodes, lambda a: jobs.status(a, args.job)))
    else:
        from gpujob import watch

        agent = _agent(_host_for_job(args))
        if getattr(args, "watch", False) and not args.json:
            st = watch.live(agent, args.job, args.interval)
            return 0
        st = watch.fetch(agent, args.job)
    if args.json:
        print_json(st)
    else:
        console().print(job_panel(st))
        _disk_warning([st])
    if getattr(args, "exit_code", False):
        from gpujob.exitcodes import for_state

        return for_state(st.get("state"))
    return 0


def _disk_warning(jobs: list[dict[str, Any]]) -> None:
    """A full or nearly full disk on the instance: how much is free and what to delete (stderr)."""
    for advice in dict.fromkeys((j.get("disk") or {}).get("advice") for j in jobs):
        if advice:
            print(f"warning: {advice}", file=sys.stderr)


def cmd_ls(args: argparse.Namespace) -> int:
    from gpujob import index, jobs
    from gpujob.ui import console, jobs_table, print_json

    names = [args.host] if getattr(args, "host", None) else (index.hosts() or ["local"])
    out: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    older: list[int] = []
    for name in names:
        try:
            for j in jobs.ls(_agent(name), everything=getattr(args, "all", False), older=older):
                j.setdefault("host", name)
                j["host"] = j["host"] or name
                out.append(j)
        except GpujobError as e:
            if len(names) == 1:
                raise
            errors[name] = str(e)
    if args.json:
        print_json({"jobs": out, "errors": errors, "older": sum(older)})
        return 0
    c = console()
    c.print(jobs_table(out) if out else "no jobs yet: gpujob submit job.yaml")
    if sum(older):
        c.print(f"[dim]{sum(older)} older finished job(s) not shown: gpujob ls --all[/]")
    for name, e in errors.items():
        c.print(f"[yellow]{name}[/]: {_esc(e)}")
    _disk_warning(out)
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from gpujob import jobs
    from gpujob.agent import connect_agent

    out = sys.stdout.buffer

    def write(b: bytes) -> None:
        out.write(b)
        out.flush()

    nodes = _node_hosts(args)
    if nodes and getattr(args, "node", None) is None:
        import threading

        from gpujob.nodes import PrefixWriter

        pw = PrefixWriter(write)
        threads = [
            threading.Thread(target=jobs.follow_logs, args=(lambda h=h: connect_agent(h), args.job, pw.for_node(r)),
                             kwargs={"lines": args.lines, "follow": args.follow}, daemon=True)
            for r, h in enumerate(nodes)
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            return 130
        if args.follow:
            from gpujob.exitcodes import for_state
            from gpujob.nodes import aggregate, on_nodes

            return for_state(aggregate(args.job, nodes, on_nodes(nodes, lambda a: jobs.status(a, args.job))).get("state"))
        return 0
    if nodes and args.node >= len(nodes):
        raise GpujobError(f"--node {args.node}: {args.job} runs on {len(nodes)} nodes (0 to {len(nodes) - 1})",
                          f"gpujob tail {args.job} --node 0")
    host = nodes[args.node] if nodes else _store().get(_host_for_job(args))
    grep, as_json, since = getattr(args, "grep", None), getattr(args, "json", False), _since(getattr(args, "since", None))
    flt = jobs.LineFilter(write, grep, as_json) if grep or as_json else None
    try:
        jobs.follow_logs(lambda: connect_agent(host), args.job, flt or write, lines=None if since is not None else args.lines,
                         follow=args.follow, since=since, on_start=flt.start if flt else None)
    except KeyboardInterrupt:
        return 130
    finally:
        if flt:
            flt.flush()
    if args.follow:  # the log ended with the job: exit with its outcome
        from gpujob.exitcodes import for_state

        return for_state(jobs.status(connect_agent(host), args.job).get("state"))
    return 0


def _since(value: str | None) -> float | None:
    """``--since``: a duration before now (10m, 2h) as a negative number, or a date as epoch seconds."""
    if not value:
        return None
    from gpujob.durations import parse_duration

    try:
        return -max(parse_duration(value), 0.001)
    except ValueError:
        pass
    from datetime import datetime

    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise GpujobError(f"--since {value!r} is neither a duration nor a date",
                          "write 10m, 2h, 1d or a local time like 2026-11-30T09:30") from None


def _watch_ls(args: argparse.Namespace) -> int:
    from gpujob import index, jobs
    from gpujob.watch import live_table

    names = [args.host] if getattr(args, "host", None) else (index.hosts() or ["local"])
    agents = {n: _agent(n) for n in names}  # one connection per host, one command per refresh

    def fetch_all() -> list[dict[str, Any]]:
        out = []
        for name, agent in agents.items():
            for j in jobs.ls(agent):
                j["host"] = j.get("host") or name
                out.append(j)
        return out

    live_table(fetch_all, args.interval)
    return 0


def cmd_tunnel(args: argparse.Namespace) -> int:
    from gpujob.tunnel import run_tunnel
    from gpujob.ui import console, print_json

    store = _store()
    names = {h.name for h in store.all()} | {"local"}
    job = None if args.target in names and not args.host else args.target
    host = store.get(args.target if job is None else _host_for_job(argparse.Namespace(job=job, host=args.host)))
    remote_port = args.remote_port or 6006
    if args.stop:
        if job is None:
            raise HostError("--stop takes a job: it stops the TensorBoard gpujob started for that job",
                            "gpujob tunnel JOB --stop")
        from gpujob.agent import connect_agent

        res = connect_agent(host).call("tb", ["--job", job, "--stop"])
        if args.json:
            print_json(res)
        else:
            print(f"stopped TensorBoard of {res['job_id']} (pid {res['pid']})" if res["stopped"]
                  else f"no TensorBoard of {res['job_id']} was running")
        return 0

    def ready(info: dict[str, Any]) -> None:
        if args.json:
            print_json(info)
            sys.stdout.flush()
            return
        c = console()
        if info.get("note"):
            c.print(f"[yellow]{info['note']}[/]")
        what = f"TensorBoard of {info['job_id']}" if job else f"port {remote_port} of {host.name}"
        c.print(f"{what}: [bold]{info['url']}[/]   (Ctrl-C to stop the tunnel)")
        via = (info.get("tensorboard") or {}).get("via")
        if via:
            c.print(f"[dim]served by {_esc(via['path'])} ({_TB_VIA.get(via['kind'], via['kind'])})[/]")
        if info.get("autodl_url"):
            c.print(f"AutoDL custom service: {info['autodl_url']}")

    try:
        run_tunnel(host, remote_port, args.local_port, job, ready, install=args.install)
    except KeyboardInterrupt:
        return 0
    return 0


_TB_VIA = {"job": "the job's python", "host": "the host's PATH", "tools": "gpujob's tools environment"}


def cmd_plot(args: argparse.Namespace) -> int:
    from gpujob.plot import plot_job
    from gpujob.ui import console, print_json

    res = plot_job(_agent(_host_for_job(args)), args.job, Path(args.output or f"{args.job}.png"))
    if args.json:
        print_json(res)
    else:
        console().print(f"{res['job_id']}: {', '.join(res['keys'])} → {res['path']}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from gpujob import jobs
    from gpujob.ui import console, print_json

    nodes = _node_hosts(args)
    if nodes:
        from gpujob.nodes import aggregate, on_nodes

        st = aggregate(args.job, nodes, on_nodes(nodes, lambda a: jobs.stop(a, args.job, wait=args.wait)))
    else:
        st = jobs.stop(_agent(_host_for_job(args)), args.job, wait=args.wait)
    if args.json:
        print_json(st)
    else:
        console().print(f"{st['job_id']}: {st.get('state')}")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from gpujob import index, jobs
    from gpujob.ui import console, print_json

    known = index.host_of(args.job)
    if args.host and known and args.host != known and "," not in known:  # another host: the job moves there
        return cmd_move(argparse.Namespace(**{**vars(args), "to": args.host, "job_file": None, "wait": 600.0}))

    res = jobs.resume(_agent(_host_for_job(args)), args.job)
    if args.json:
        print_json(res)
    else:
        console().print(f"{res['job_id']}: resumed (was {res.get('previous')})")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    from gpujob.pull import pull
    from gpujob.ui import console, print_json

    what = "latest" if args.latest else "best" if args.best is not None else "all"
    metric = args.best or None
    nodes = _node_hosts(args)  # a job over several nodes: rank 0's node (the checkpoints are shared)
    agent = _agent(nodes[0].name) if nodes else _agent(_host_for_job(args))
    with _transfer_bar(f"pull {args.job}", not args.json) as progress_cb:
        res = pull(agent, args.job, Path(args.dest), what, metric, args.include, progress_cb)
    # the agent learns the files are here: a job waiting with autostop.pull_before_shutdown powers off now
    agent.call("pulled", ["--job", res["job_id"]])
    for link in res.get("skipped") or []:
        print(f"warning: symlink {link} not kept: it leads outside {res['dest']}", file=sys.stderr)
    from gpujob import index

    index.record_pull(res["job_id"], str(Path(args.dest).resolve()))
    if args.json:
        print_json(res)
    else:
        sel = f" ({res['selected']})" if res.get("selected") else ""
        console().print(f"{res['job_id']}{sel}: {res['files']} file(s), {res['bytes'] / 1e6:.1f} MB fetched, "
                        f"{res['unchanged']} already here → {res['dest']}")
    return 0


def cmd_move(args: argparse.Namespace) -> int:
    from gpujob.move import move
    from gpujob.ui import console, print_json

    def note(text: str) -> None:
        if not args.json:
            console().print(_esc(text))

    with _transfer_bar(f"move {args.job} → {args.to}", not args.json) as progress_cb:
        res = move(args.job, args.to, job_file=args.job_file, stop_wait=args.wait, progress=progress_cb, note=note)
    if args.json:
        print_json(res)
        return 0
    c = console()
    ck = f" from {res['checkpoint']}" if res.get("checkpoint") else " (checkpoint on shared storage)" \
        if res["source"] == "shared" else " from scratch (no complete checkpoint)"
    c.print(f"[bold]{res['job_id']}[/] moved {res['from']} → [cyan]{res['to']}[/] ({res['state']}){_esc(ck)}; "
            f"{res['files']} file(s), {res['bytes'] / 1e6:.1f} MB from {res['source']}")
    if not res["old_marked"]:
        c.print(f"  {_esc(res['from'])} did not answer: the job there is not marked moved; do not resume it there")
    c.print(f"  follow: gpujob tail {res['job_id']} -f")
    return 0


def cmd_guard(args: argparse.Namespace) -> int:
    from gpujob.guard import guard
    from gpujob.ui import console, print_json

    def note(text: str) -> None:
        if not args.json:
            console().print(_esc(text))

    outcomes = guard(args.jobs, args.interval, args.once, note)
    if args.json:
        print_json({"outcomes": outcomes})
    for o in outcomes if not args.json else []:
        what = f"moved to {o['move']['to']}" if o["action"] == "moved" else o.get("why") or o.get("state")
        console().print(_esc(f"{o['job_id']}: {what}"))
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    from gpujob import index
    from gpujob.cost import render, summarize
    from gpujob.ui import console, print_json

    if args.host:
        _store().get(args.host)  # an unknown host is an error here, not a row of the table
    names = [args.host] if args.host else (index.hosts() or ["local"])
    doc = summarize(names, _agent)
    if args.json:
        print_json(doc)
        return 0
    c = console()
    c.print(render(doc) if doc["jobs"] else "no jobs yet")
    for name, e in doc["errors"].items():
        c.print(f"[yellow]{name}[/]: {_esc(e)}")
    return 0


def cmd_agent_log(args: argparse.Namespace) -> int:
    from gpujob.ui import print_json

    doc = _agent(args.host).call("agentlog", ["--lines", str(args.lines)])
    if args.json:
        print_json(doc)
    else:
        sys.stdout.write("".join(line + "\n" for line in doc["lines"]) or f"(nothing in {doc['path']})\n")
    return 0


# ---- hosts -------------------------------------------------------------------------------
def cmd_host_add(args: argparse.Namespace) -> int:
    from gpujob.hostsetup import add_host
    from gpujob.ui import console, print_json

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    host = add_host(args.name, args.ssh, password=password, root=args.root, preset=args.preset,
                    price=args.price, identity=args.identity, check=not args.no_check, force=args.force)
    note = None
    if any(getattr(args, k) is not None for k in ("shutdown_command", "private_address", "network_turbo", "hf_endpoint",
                                                  "pip_index_url", "data_disk", "tensorboard_port", "idle_shutdown")):
        note = _apply_host_settings(host, args)
        _store().save(host)
    if args.json:
        print_json({"name": host.name, **host.to_dict()})
    else:
        console().print(f"host [bold]{host.name}[/] = {host.address} (preset {host.preset}, root {host.remote_root})")
        if note:
            print(note)
    return 0


def _apply_host_settings(host: Any, args: argparse.Namespace) -> str | None:
    """Apply ``_host_setting_args`` to a profile (not saved); the idle-shutdown note, if any."""
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
    from gpujob.hosts import parse_ssh_target

    store = _store()
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
        from gpujob.ui import print_json

        print_json({"name": host.name, **host.to_dict()})
    else:
        print(f"host {host.name} = {host.address}")
        if note:
            print(note)
    return 0


def _idle_shutdown(host: Any, text: str) -> str:
    """Install (``0``/``off``: remove) the instance's idle watcher: power off after N idle minutes."""
    import json

    from gpujob.durations import parse_duration

    try:
        minutes = 0.0 if text.strip().lower() in ("0", "off", "none", "") else parse_duration(text) / 60.0
    except ValueError as e:
        raise GpujobError(f"--idle-shutdown: {e}", "e.g. --idle-shutdown 30m (or off)") from None
    if minutes and not host.shutdown_command:
        raise HostError(f"host {host.name} has no shutdown command", f"set one: gpujob host set {host.name} --shutdown-command CMD")
    res = _agent(host.name).call("idle_shutdown", ["--minutes", repr(minutes)],
                                 input=json.dumps({"command": host.shutdown_command}).encode())
    if minutes:
        return f"idle shutdown on {host.name}: after {text} with no job and no SSH session (watcher pid {res.get('pid')})"
    return f"idle shutdown on {host.name}: off"


def cmd_notify_test(args: argparse.Namespace) -> int:
    from gpujob.bundle import import_remote
    from gpujob.notify_test import format_outcomes, notify_test, secrets_from_env
    from gpujob.spec import load_spec

    spec = load_spec(args.job_file)
    if not (spec.notify or {}).get("channels"):
        raise GpujobError(f"{spec.source} has no notify channels", "add notify: {channels: [...]} (see docs/notifications.md)")
    secrets = secrets_from_env(import_remote("notify").secret_names(spec.notify))
    outcomes = notify_test(spec.notify, secrets, job_name=spec.name)
    if args.json:
        from gpujob.ui import print_json

        print_json(outcomes)
    else:
        for line in format_outcomes(outcomes):
            print(line)
    return 0 if all(o.get("ok") for o in outcomes) else 1


def cmd_host_ls(args: argparse.Namespace) -> int:
    from gpujob.ui import console, print_json

    hosts = _store().all()
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
    from gpujob import mux

    store = _store()
    host = store.get(args.name)
    store.remove(args.name)
    if host.kind != "local":
        mux.disconnect(host)  # a kept connection to it closes too
    if args.json:
        from gpujob.ui import print_json

        print_json({"removed": args.name})
    else:
        print(f"removed host {args.name}")
    return 0


def cmd_host_disconnect(args: argparse.Namespace) -> int:
    from gpujob import mux

    host = _store().get(args.name)
    closed = host.kind != "local" and mux.disconnect(host)
    if args.json:
        from gpujob.ui import print_json

        print_json({"host": host.name, "closed": closed})
    else:
        print(f"closed the kept connection to {host.name}" if closed else f"no connection to {host.name} was kept open")
    return 0


def cmd_host_trust(args: argparse.Namespace) -> int:
    from gpujob import mux
    from gpujob.transport.ssh import forget_host_key, open_client

    host = _store().get(args.name)
    mux.disconnect(host)  # a kept connection still talks to the old key's server
    forget_host_key(host)
    open_client(host).close()  # records the key offered now
    if args.json:
        from gpujob.ui import print_json

        print_json({"trusted": host.name, "address": host.address})
    else:
        print(f"trusted the current host key of {host.name} ({host.address})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gpujob.doctor import run_doctor
    from gpujob.ui import print_json

    host = _store().get(args.host)
    from gpujob.agent import connect_agent

    rep = run_doctor(connect_agent(host), host, args.torch_timeout)
    if args.json:
        print_json(rep)
    else:
        from gpujob.ui import console

        c = console()
        c.print(f"[bold]{host.name}[/] ({host.address}, preset {host.preset}, root {rep.get('root')})")
        colors = {"ok": "green", "warn": "yellow", "error": "red"}
        for ch in rep["checks"]:
            mark = {"ok": "✓", "warn": "!", "error": "✗"}[ch["level"]]
            c.print(f"[{colors[ch['level']]}]{mark} {ch['name']:<14}[/] {_esc(ch['message'])}")
            if ch["remedy"] and ch["level"] != "ok":
                c.print(f"  [dim]→ {_esc(ch['remedy'])}[/]")
    return 0


# ---- templates and data ------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    from gpujob.init import init_template, list_templates
    from gpujob.ui import print_json

    if args.list:
        items = list_templates()
        if args.json:
            print_json(items)
        else:
            for t in items:
                print(f"{t['name']:<12} {t['description']}")
        return 0
    written = init_template(args.template, Path(args.dir), force=args.force)
    if args.json:
        print_json({"template": args.template, "files": [str(p) for p in written]})
    else:
        for p in written:
            print(f"wrote {p}")
        print(f"next: gpujob submit {Path(args.dir) / 'job.yaml'} --follow")
    return 0


def cmd_data_check(args: argparse.Namespace) -> int:
    from gpujob.datacheck import check_jsonl, format_report
    from gpujob.ui import print_json

    rep = check_jsonl(args.file, text_field=args.text_field, label_field=args.label_field)
    if args.json:
        print_json(rep.to_json())
    else:
        print(format_report(rep))
    return 0 if rep.ok else 1


# ---- a command or a shell on a host -----------------------------------------------------
def _command_after(args: argparse.Namespace, flags: tuple[str, ...], valued: tuple[str, ...] = ()) -> list[str]:
    """The words after HOST: our own options up to ``--`` (or the first other word) set, the rest is the command."""
    rest = list(args.cmd)
    while rest and (rest[0] in flags or rest[0] in valued):
        opt = rest.pop(0)
        if opt in valued:
            if not rest:
                raise GpujobError(f"{opt} needs a value", f"e.g. {opt} ~/.ssh/config")
            setattr(args, opt.lstrip("-").replace("-", "_"), rest.pop(0))
        else:
            setattr(args, opt.lstrip("-"), True)
    return rest[1:] if rest[:1] == ["--"] else rest


def cmd_exec(args: argparse.Namespace) -> int:
    from gpujob.shell import command_text, run_exec

    host = _store().get(args.host)
    argv = _command_after(args, ("--json",))
    if args.json:
        chunks: list[bytes] = []
        rc = run_exec(host, argv, chunks.append)
        from gpujob.ui import print_json

        print_json({"host": host.name, "command": command_text(argv), "exit_code": rc,
                    "output": b"".join(chunks).decode("utf-8", "replace")})
        return rc
    out = sys.stdout.buffer

    def write(b: bytes) -> None:
        out.write(b)
        out.flush()

    return run_exec(host, argv, write)


def cmd_ssh(args: argparse.Namespace) -> int:
    from gpujob import shell

    host = _store().get(args.host)
    command = _command_after(args, ("--json", "--print"), ("--ssh-config",))
    plan = shell.ssh_plan(host, _store().all(), command, args.ssh_config)
    if args.print:
        if args.json:
            from gpujob.ui import print_json

            print_json({"host": host.name, **plan})
        else:
            if plan["block"]:
                print(f"# in {plan['ssh_config']}:\n{plan['block']}")
            print(shell.join(plan["argv"]))
        return 0
    shell.hand_over(plan)
    return 0  # not reached: OpenSSH (or the local shell) replaced this process


# ---- disk: rm and gc ---------------------------------------------------------------------
def cmd_rm(args: argparse.Namespace) -> int:
    from gpujob import index
    from gpujob.cleanup import human_bytes, remove_jobs

    res = remove_jobs(args.jobs, _agent, lambda ref: args.host or index.host_of(ref), args.force)
    if args.json:
        from gpujob.ui import print_json

        print_json({"removed": res})
    else:
        for r in res:
            how = "stopped and removed" if r["stopped"] else "removed"
            print(f"{r['job_id']}: {how} on {r['host']} ({human_bytes(r['bytes'])} freed)")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from gpujob.cleanup import collect, human_bytes
    from gpujob.durations import parse_duration

    try:
        older = parse_duration(args.older_than)
    except ValueError as e:
        raise GpujobError(f"--older-than: {e}", "e.g. --older-than 7d (or 12h, 30m)") from None
    doc = collect(_agent(args.host), older, args.dry_run, args.checkpoints_only)
    if args.json:
        from gpujob.ui import print_json

        print_json(doc)
        return 0
    verb = "would free" if args.dry_run else "freed"
    for it in doc["items"]:
        what = f"{it['kind']} {it.get('job_id') or it['path']}"
        print(f"{human_bytes(it['bytes']):>9}  {what}")
    print(f"{doc['host']}: {verb} {human_bytes(doc['bytes'])} in {len(doc['items'])} item(s); "
          f"{len(doc['busy'])} queued/running job(s) and agent {doc['agent']} kept"
          + ("   (run without --dry-run to remove)" if args.dry_run and doc["items"] else ""))
    return 0


# ---- shell completion --------------------------------------------------------------------
def cmd_completion(args: argparse.Namespace) -> int:
    from gpujob import completion

    if args.words:
        items = completion.words(args.words)
        if args.json:
            import json

            print(json.dumps(items))
        else:
            sys.stdout.write("".join(w + "\n" for w in items))
        return 0
    if not args.shell:
        raise GpujobError("which shell?", "gpujob completion bash|zsh|fish (see README: Shell completion)")
    text = completion.script(args.shell, build_parser())
    if args.json:
        import json

        print(json.dumps({"shell": args.shell, "script": text}))
    else:
        sys.stdout.write(text)
    return 0


# ---- parser ------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse with a usage error in two lines (the cause, then where the usage is), not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n  → {self.prog} --help shows the usage\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gpujob", description="Run training jobs on rented GPU instances over SSH (or on this machine: host 'local').")
    p.add_argument("--version", action="version", version=f"gpujob {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Handler, help: str, parent: Any = sub) -> argparse.ArgumentParser:
        sp = parent.add_parser(name, help=help, description=help)
        sp.set_defaults(fn=fn)
        sp.add_argument("--json", action="store_true", help="print JSON (schema: docs/json.md)")
        return sp

    s = add("submit", cmd_submit, "sync code and data, start the job under the agent")
    s.add_argument("job_file", nargs="?", help="job YAML (default ./job.yaml)")
    s.add_argument("--host", help="host profile, or a,b,c: the first that answers with the GPUs free "
                   "(default: the job's host:, else local)")
    s.add_argument("--wait-gpus", nargs="?", const="6h", metavar="DURATION",
                   help="no host has the GPUs free: wait (poll with backoff) up to DURATION (default 6h)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key, e.g. retry.max_restarts=3")
    s.add_argument("-f", "--follow", action="store_true", help="follow the log; Ctrl-C detaches, the job goes on")

    s = add("status", cmd_status, "a job's state, metrics and diagnosis (no JOB: the job list)")
    s.add_argument("job", nargs="?", type=_job_ref)
    s.add_argument("--host")
    s.add_argument("-w", "--watch", action="store_true", help="refresh in place (one remote command per refresh)")
    s.add_argument("--interval", type=_number(float, 0.1, 3600), default=2.0, help="seconds between refreshes with -w")
    s.add_argument("--exit-code", action="store_true",
                   help="exit with the job's outcome: 0 succeeded, 1 failed, 4 stopped, 5 autostopped, 6 lost, "
                        "7 not finished (docs/cli.md)")
    s = add("ls", cmd_ls, "list jobs (one remote command per host)")
    s.add_argument("--host")
    s.add_argument("--all", action="store_true", help="every job, not only running ones and the newest 30 finished")
    s = add("tail", cmd_tail, "print a job's output; -f follows and survives sleep and network drops")
    s.add_argument("job", type=_job_ref)
    s.add_argument("--host")
    s.add_argument("-f", "--follow", action="store_true")
    s.add_argument("-n", "--lines", type=_number(int, 0, 10**9), default=20)
    s.add_argument("--since", help="start at lines written in the last 10m/2h/1d, or since a date (docs/json.md)")
    s.add_argument("--grep", metavar="REGEX", type=_regex, help="only lines matching REGEX (Python syntax)")
    s.add_argument("--node", type=_number(int, 0, 1023), help="one node of a job over several (default: all, prefixed)")
    s = add("stop", cmd_stop, "stop a job (its code may checkpoint first); no process of it remains")
    s.add_argument("job", type=_job_ref)
    s.add_argument("--host")
    s.add_argument("--wait", type=_number(float, 0, 86400), default=600, help="seconds to wait for the job to end")
    s = add("resume", cmd_resume, "restart a lost, stopped or failed job from its newest complete checkpoint")
    s.add_argument("job", type=_job_ref)
    s.add_argument("--host")
    s = add("move", cmd_move, "continue a job on another host from its newest complete checkpoint (same id, history)")
    s.add_argument("job", type=_job_ref)
    s.add_argument("--to", required=True, metavar="HOST", help="the host profile it goes on on (a,b,c: the first "
                   "with the job's GPUs free)")
    s.add_argument("--job-file", help="the job file (default: the one it was submitted from)")
    s.add_argument("--wait", type=_number(float, 0, 86400), default=600, help="seconds to wait for it to stop on the old host")
    s = add("guard", cmd_guard, "watch jobs; move one whose host stays away longer than its retry.move_after")
    s.add_argument("jobs", nargs="+", metavar="JOB", type=_job_ref)
    s.add_argument("--interval", type=_number(float, 0.1, 86400), default=30.0, help="seconds between looks (default 30)")
    s.add_argument("--once", action="store_true", help="one look at each job (for cron); the time away adds up")
    s = add("cost", cmd_cost, "what jobs have cost (elapsed x price_per_hour), per job and per host")
    s.add_argument("--host", help="one host (default: every host with jobs)")
    s = add("agent-log", cmd_agent_log, "the last lines of the agent's own log on a host (its errors)")
    s.add_argument("host", nargs="?", help="host profile (default local)")
    s.add_argument("-n", "--lines", type=_number(int, 0, 10**6), default=50)
    s = add("tunnel", cmd_tunnel, "TensorBoard of a job (or any port of a host) on a local port, until Ctrl-C")
    s.add_argument("target", metavar="JOB|HOST", type=_job_ref)
    s.add_argument("--host", help="the job's host (default: where it was submitted)")
    s.add_argument("--remote-port", type=_PORT, default=6006, help="port on the instance (default 6006: TensorBoard)")
    s.add_argument("--local-port", type=_PORT, help="local port (default: the remote one, or the next free)")
    s.add_argument("--stop", action="store_true", help="stop the TensorBoard that gpujob tunnel started for JOB")
    s.add_argument("--install", action="store_true", help="first pip-install TensorBoard into gpujob's tools environment "
                   "on the host (<root>/tools/tensorboard; the host's pip_index_url and network_turbo apply)")
    s = add("plot", cmd_plot, "draw a job's loss and metric curves to a PNG (needs matplotlib)")
    s.add_argument("job", type=_job_ref)
    s.add_argument("-o", "--output", help="the PNG (default JOB.png)")
    s.add_argument("--host")
    s = add("pull", cmd_pull, "copy a job's checkpoints and logs here")
    s.add_argument("job", type=_job_ref)
    s.add_argument("dest", nargs="?", default="gpujob-pulls")
    s.add_argument("--host")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--latest", action="store_true",
                   help="only the newest complete checkpoint of any kind (and the logs)")
    g.add_argument("--best", nargs="?", const="", metavar="METRIC",
                   help="only the best checkpoint: trainer_state.json's best_model_checkpoint, or by METRIC "
                        "in the names (val_loss=0.12.ckpt) or the metric history (loss-like names: lowest wins)")
    g.add_argument("--all", action="store_true", help="every checkpoint (the default)")
    s.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="only paths (relative to the job folder) matching GLOB; repeatable")

    s = add("doctor", cmd_doctor, "check a host in one round trip: Python, torch/CUDA, GPUs, disks, network, agent")
    s.add_argument("host", nargs="?", help="host profile (default local)")
    s.add_argument("--torch-timeout", type=_number(float, 1, 3600), default=60.0, help="seconds to wait for 'import torch'")

    s = add("exec", cmd_exec, "run one command on a host in the environment jobs get there; exits with its code")
    s.add_argument("host", metavar="HOST")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command (one argument: a shell line)")
    s = add("ssh", cmd_ssh, "an interactive shell on a host (OpenSSH with gpujob's key; a Host gpujob-NAME entry "
            "in ~/.ssh/config)")
    s.add_argument("host", metavar="HOST")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="run this instead of a shell")
    s.add_argument("--print", action="store_true", help="show the ssh command and config entry; run nothing")
    s.add_argument("--ssh-config", metavar="PATH", help="the ssh_config to keep the entry in (default ~/.ssh/config)")
    s = add("rm", cmd_rm, "remove jobs' folders on their hosts and their local index entries (not a running job)")
    s.add_argument("jobs", nargs="+", metavar="JOB", type=_job_ref)
    s.add_argument("--host", help="the jobs' host (default: where each was submitted)")
    s.add_argument("--force", action="store_true", help="stop a queued or running job first, then remove it")
    s = add("gc", cmd_gc, "free a host's disk: old finished jobs, unused environments, stale agents and projects")
    s.add_argument("host", nargs="?", help="host profile (default local)")
    s.add_argument("--older-than", default="7d", metavar="DURATION", help="finished (or last used) before this long ago "
                   "(default 7d)")
    s.add_argument("--dry-run", action="store_true", help="list what would go and the bytes it frees; remove nothing")
    s.add_argument("--checkpoints-only", action="store_true", help="of old finished jobs remove the checkpoints only "
                   "(logs and metrics stay)")
    s = add("completion", cmd_completion, "print a shell completion script: eval \"$(gpujob completion bash)\"")
    s.add_argument("shell", nargs="?", choices=["bash", "zsh", "fish"])
    s.add_argument("--words", choices=["hosts", "jobs"], help="print host names or job ids, one a line (what the script calls)")

    np_ = sub.add_parser("notify", help="notifications", description="notifications")
    nsub = np_.add_subparsers(dest="notify_command", metavar="ACTION", required=True)
    s = add("test", cmd_notify_test, "send a test message to each notify channel of a job file, from here", nsub)
    s.add_argument("job_file", nargs="?", help="job YAML (default ./job.yaml)")

    s = add("init", cmd_init, "write a job (job.yaml, training script, requirements, sample data) from a template")
    s.add_argument("dir", nargs="?", default=".")
    s.add_argument("-t", "--template", default="causal-lm", help="causal-lm, seq-cls or custom (see --list)")
    s.add_argument("--list", action="store_true", help="describe each template")
    s.add_argument("--force", action="store_true", help="overwrite existing files")
    dp = sub.add_parser("data", help="check data before uploading it", description="check data before uploading it")
    dsub = dp.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    s = add("check", cmd_data_check, "lint a jsonl file: parse errors, missing fields, empty texts, duplicates, stats", dsub)
    s.add_argument("file")
    s.add_argument("--text-field", default="text")
    s.add_argument("--label-field", default=None)

    hp = sub.add_parser("host", help="manage host profiles", description="manage host profiles")
    hsub = hp.add_subparsers(dest="host_command", metavar="ACTION", required=True)
    s = add("add", cmd_host_add, "add a host from its login line (asks the password once, installs a key)", hsub)
    s.add_argument("name")
    s.add_argument("--ssh", required=True, help='the login line, e.g. "ssh -p 41234 root@connect.westb.seetacloud.com"')
    s.add_argument("--password-stdin", action="store_true", help="read the password from stdin (never stored)")
    s.add_argument("--root", help="gpujob's folder on the instance")
    s.add_argument("--preset", choices=["generic", "autodl", "vast", "runpod"])
    s.add_argument("--price", type=_PRICE, help="price per hour, for cost tracking")
    s.add_argument("--identity", help="an existing private key to use instead of gpujob's own")
    s.add_argument("--no-check", action="store_true", help="save without connecting")
    s.add_argument("--force", action="store_true", help="replace an existing profile")
    _host_setting_args(s)
    s = add("set", cmd_host_set, "change a host profile (a new login line after a restart)", hsub)
    s.add_argument("name")
    s.add_argument("--ssh")
    s.add_argument("--root")
    s.add_argument("--preset", choices=["generic", "autodl", "vast", "runpod"])
    s.add_argument("--price", type=_PRICE)
    s.add_argument("--identity")
    _host_setting_args(s)
    add("ls", cmd_host_ls, "list host profiles", hsub)
    s = add("rm", cmd_host_rm, "remove a host profile", hsub)
    s.add_argument("name")
    s = add("trust", cmd_host_trust, "accept a host's new key (after an image change)", hsub)
    s.add_argument("name")
    s = add("disconnect", cmd_host_disconnect, "close the connection kept open to a host between commands", hsub)
    s.add_argument("name")
    return p


def _host_setting_args(s: argparse.ArgumentParser) -> None:
    """The settings ``host add`` and ``host set`` both take."""
    s.add_argument("--shutdown-command")
    s.add_argument("--private-address", type=_address, help="the address other nodes reach this host at (several-node jobs)")
    s.add_argument("--network-turbo", choices=["true", "false", "setup", "run"], help="source /etc/network_turbo (AutoDL)")
    s.add_argument("--hf-endpoint", type=_url, help="e.g. https://hf-mirror.com ('' clears)")
    s.add_argument("--pip-index-url", type=_url, help="pip's index for setup ('' clears)")
    s.add_argument("--data-disk", help="the fast data disk (default: the preset's)")
    s.add_argument("--tensorboard-port", type=_PORT)
    s.add_argument("--idle-shutdown", metavar="DURATION", help="power the instance off after this long with no job "
                   "and no SSH session, e.g. 30m (off: never); a watcher on the instance checks")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 0
    as_json = getattr(args, "json", False)
    try:
        return args.fn(args)
    except GpujobError as e:
        from gpujob.ui import error

        error(e, as_json)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os._exit(0)
    except Exception as e:  # noqa: BLE001 - one paragraph, not a traceback; GPUJOB_DEBUG=1 shows it
        if os.environ.get("GPUJOB_DEBUG"):
            raise
        from gpujob.errors import unexpected
        from gpujob.ui import error

        err = unexpected(e)
        error(err, as_json)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
