"""Commands over jobs: submit, status, ls, tail, tunnel, plot, stop, resume, pull, move, guard, cost, exec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpujob.cli.common import agent_for, command_after, esc, host_for_job, host_store, transfer_bar
from gpujob.errors import GpujobError, HostError


# ---- jobs --------------------------------------------------------------------------------
def cmd_submit(args: argparse.Namespace) -> int:
    from gpujob.config import index
    from gpujob.config.spec import load_spec
    from gpujob.usecases.submit import submit

    spec = load_spec(args.job_file, args.set)
    if spec.nodes and not args.host:
        return _submit_nodes(args, spec)
    names = args.host.split(",") if args.host else (spec.hosts or [spec.host])
    if len(names) > 1 or args.wait_gpus:  # placement: the first host with the GPUs free
        host, agent, skipped = _place(names, spec, args)
    else:
        from gpujob.transport.agent import connect_agent

        host, skipped = host_store().get(names[0]), []
        agent = connect_agent(host)
    with transfer_bar(f"sync → {host.name}", not args.json) as progress_cb:
        res = submit(agent, spec, host, progress_cb)
    res["skipped"] = [vars(s) for s in skipped]
    index.record(res["job_id"], host.name, spec.name, **_resubmit_fields(spec, args))
    if args.json:
        from gpujob.ui.output import print_json

        print_json(res)
    else:
        from gpujob.ui.output import console

        s = res["sync"]
        c = console()
        c.print(f"[bold]{res['job_id']}[/] submitted to [cyan]{host.name}[/] ({res['state']}); "
                f"synced {s['files_sent']} file(s), {s['bytes_sent'] / 1e6:.1f} MB, {s['unchanged']} unchanged")
        c.print(f"  follow: gpujob tail {res['job_id']} -f    status: gpujob status {res['job_id']}")
    if args.follow:
        return _follow(host.name, res["job_id"])
    return 0


def _place(names: list[str], spec: Any, args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    from gpujob.config.durations import parse_duration
    from gpujob.usecases.placement import place

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
    from gpujob.config import index
    from gpujob.usecases.nodes import submit_nodes

    store = host_store()
    hosts = [store.get(n) for n in spec.nodes]
    res = submit_nodes(spec, hosts)
    index.record(res["job_id"], res["host"], spec.name)
    if args.json:
        from gpujob.ui.output import print_json

        print_json(res)
    else:
        print(f"{res['job_id']} submitted to {len(hosts)} nodes: {res['host']}")
        print(f"  follow: gpujob tail {res['job_id']} -f    status: gpujob status {res['job_id']}")
    if args.follow:
        return cmd_tail(argparse.Namespace(job=res["job_id"], host=None, follow=True, lines=0, node=None))
    return 0


def _node_hosts(args: argparse.Namespace) -> list[Any] | None:
    """The hosts of a job over several nodes (from the local index), else None."""
    name = host_for_job(args)
    if not name or "," not in name:
        return None
    store = host_store()
    return [store.get(n) for n in name.split(",")]


def _follow(host_name: str | None, job: str) -> int:
    from gpujob.transport.agent import connect_agent
    from gpujob.usecases import jobs

    host = host_store().get(host_name)
    out = sys.stdout.buffer
    current: list[Any] = []

    def reconnect() -> Any:
        for a in current:
            a.close()
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
    from gpujob.ui.jobs import job_panel
    from gpujob.ui.output import console, print_json
    from gpujob.usecases import jobs

    if args.job is None:
        if getattr(args, "watch", False):
            return _watch_ls(args)
        return cmd_ls(args)
    nodes = _node_hosts(args)
    if nodes:
        from gpujob.usecases.nodes import aggregate, on_nodes

        st = aggregate(args.job, nodes, on_nodes(nodes, lambda a: jobs.status(a, args.job)))
    else:
        from gpujob.usecases import watch

        agent = agent_for(host_for_job(args))
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
    from gpujob.config import index
    from gpujob.ui.jobs import jobs_table
    from gpujob.ui.output import console, print_json
    from gpujob.usecases import jobs

    names = [args.host] if getattr(args, "host", None) else (index.hosts() or ["local"])
    out: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    older: list[int] = []
    for name in names:
        try:
            for j in jobs.ls(agent_for(name), everything=getattr(args, "all", False), older=older):
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
        c.print(f"[yellow]{name}[/]: {esc(e)}")
    _disk_warning(out)
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from gpujob.transport.agent import connect_agent
    from gpujob.usecases import jobs

    out = sys.stdout.buffer

    def write(b: bytes) -> None:
        out.write(b)
        out.flush()

    nodes = _node_hosts(args)
    if nodes and getattr(args, "node", None) is None:
        import threading

        from gpujob.usecases.nodes import PrefixWriter

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
            from gpujob.usecases.nodes import aggregate, on_nodes

            return for_state(aggregate(args.job, nodes, on_nodes(nodes, lambda a: jobs.status(a, args.job))).get("state"))
        return 0
    if nodes and args.node >= len(nodes):
        raise GpujobError(f"--node {args.node}: {args.job} runs on {len(nodes)} nodes (0 to {len(nodes) - 1})",
                          f"gpujob tail {args.job} --node 0")
    host = nodes[args.node] if nodes else host_store().get(host_for_job(args))
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
    from gpujob.config.durations import parse_duration

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
    from gpujob.config import index
    from gpujob.usecases import jobs
    from gpujob.usecases.watch import live_table

    names = [args.host] if getattr(args, "host", None) else (index.hosts() or ["local"])
    agents = {n: agent_for(n) for n in names}  # one connection per host, one command per refresh

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
    from gpujob.ui.output import console, print_json
    from gpujob.usecases.tunnel import run_tunnel

    store = host_store()
    names = {h.name for h in store.all()} | {"local"}
    job = None if args.target in names and not args.host else args.target
    host = store.get(args.target if job is None else host_for_job(argparse.Namespace(job=job, host=args.host)))
    remote_port = args.remote_port or 6006
    if args.stop:
        if job is None:
            raise HostError("--stop takes a job: it stops the TensorBoard gpujob started for that job",
                            "gpujob tunnel JOB --stop")
        from gpujob.transport.agent import connect_agent

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
            c.print(f"[dim]served by {esc(via['path'])} ({_TB_VIA.get(via['kind'], via['kind'])})[/]")
        if info.get("autodl_url"):
            c.print(f"AutoDL custom service: {info['autodl_url']}")

    try:
        run_tunnel(host, remote_port, args.local_port, job, ready, install=args.install)
    except KeyboardInterrupt:
        return 0
    return 0


_TB_VIA = {"job": "the job's python", "host": "the host's PATH", "tools": "gpujob's tools environment"}


def cmd_plot(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json
    from gpujob.ui.plot import plot_series
    from gpujob.usecases.plot import plot_job

    res = plot_job(agent_for(host_for_job(args)), args.job, Path(args.output or f"{args.job}.png"), plot_series)
    if args.json:
        print_json(res)
    else:
        console().print(f"{res['job_id']}: {', '.join(res['keys'])} → {res['path']}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json
    from gpujob.usecases import jobs

    nodes = _node_hosts(args)
    if nodes:
        from gpujob.usecases.nodes import aggregate, on_nodes

        st = aggregate(args.job, nodes, on_nodes(nodes, lambda a: jobs.stop(a, args.job, wait=args.wait)))
    else:
        st = jobs.stop(agent_for(host_for_job(args)), args.job, wait=args.wait)
    if args.json:
        print_json(st)
    else:
        console().print(f"{st['job_id']}: {st.get('state')}")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from gpujob.config import index
    from gpujob.ui.output import console, print_json
    from gpujob.usecases import jobs

    known = index.host_of(args.job)
    if args.host and known and args.host != known and "," not in known:  # another host: the job moves there
        return cmd_move(argparse.Namespace(**{**vars(args), "to": args.host, "job_file": None, "wait": 600.0}))

    res = jobs.resume(agent_for(host_for_job(args)), args.job)
    if args.json:
        print_json(res)
    else:
        console().print(f"{res['job_id']}: resumed (was {res.get('previous')})")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json
    from gpujob.usecases.pull import pull

    what = "latest" if args.latest else "best" if args.best is not None else "all"
    metric = args.best or None
    nodes = _node_hosts(args)  # a job over several nodes: rank 0's node (the checkpoints are shared)
    agent = agent_for(nodes[0].name) if nodes else agent_for(host_for_job(args))
    with transfer_bar(f"pull {args.job}", not args.json) as progress_cb:
        res = pull(agent, args.job, Path(args.dest), what, metric, args.include, progress_cb)
    # the agent learns the files are here: a job waiting with autostop.pull_before_shutdown powers off now
    agent.call("pulled", ["--job", res["job_id"]])
    for link in res.get("skipped") or []:
        print(f"warning: symlink {link} not kept: it leads outside {res['dest']}", file=sys.stderr)
    from gpujob.config import index

    index.record_pull(res["job_id"], str(Path(args.dest).resolve()))
    if args.json:
        print_json(res)
    else:
        sel = f" ({res['selected']})" if res.get("selected") else ""
        console().print(f"{res['job_id']}{sel}: {res['files']} file(s), {res['bytes'] / 1e6:.1f} MB fetched, "
                        f"{res['unchanged']} already here → {res['dest']}")
    return 0


def cmd_move(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json
    from gpujob.usecases.move import move

    def note(text: str) -> None:
        if not args.json:
            console().print(esc(text))

    with transfer_bar(f"move {args.job} → {args.to}", not args.json) as progress_cb:
        res = move(args.job, args.to, job_file=args.job_file, stop_wait=args.wait, progress=progress_cb, note=note)
    if args.json:
        print_json(res)
        return 0
    c = console()
    ck = f" from {res['checkpoint']}" if res.get("checkpoint") else " (checkpoint on shared storage)" \
        if res["source"] == "shared" else " from scratch (no complete checkpoint)"
    c.print(f"[bold]{res['job_id']}[/] moved {res['from']} → [cyan]{res['to']}[/] ({res['state']}){esc(ck)}; "
            f"{res['files']} file(s), {res['bytes'] / 1e6:.1f} MB from {res['source']}")
    if not res["old_marked"]:
        c.print(f"  {esc(res['from'])} did not answer: the job there is not marked moved; do not resume it there")
    c.print(f"  follow: gpujob tail {res['job_id']} -f")
    return 0


def cmd_guard(args: argparse.Namespace) -> int:
    from gpujob.ui.output import console, print_json
    from gpujob.usecases.guard import guard

    def note(text: str) -> None:
        if not args.json:
            console().print(esc(text))

    outcomes = guard(args.jobs, args.interval, args.once, note)
    if args.json:
        print_json({"outcomes": outcomes})
    for o in outcomes if not args.json else []:
        what = f"moved to {o['move']['to']}" if o["action"] == "moved" else o.get("why") or o.get("state")
        console().print(esc(f"{o['job_id']}: {what}"))
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    from gpujob.config import index
    from gpujob.ui.output import console, print_json
    from gpujob.usecases.cost import render, summarize

    if args.host:
        host_store().get(args.host)  # an unknown host is an error here, not a row of the table
    names = [args.host] if args.host else (index.hosts() or ["local"])
    doc = summarize(names, agent_for)
    if args.json:
        print_json(doc)
        return 0
    c = console()
    c.print(render(doc) if doc["jobs"] else "no jobs yet")
    for name, e in doc["errors"].items():
        c.print(f"[yellow]{name}[/]: {esc(e)}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    from gpujob.usecases.shell import command_text, run_exec

    host = host_store().get(args.host)
    argv = command_after(args, ("--json",))
    if args.json:
        chunks: list[bytes] = []
        rc = run_exec(host, argv, chunks.append)
        from gpujob.ui.output import print_json

        print_json({"host": host.name, "command": command_text(argv), "exit_code": rc,
                    "output": b"".join(chunks).decode("utf-8", "replace")})
        return rc
    out = sys.stdout.buffer

    def write(b: bytes) -> None:
        out.write(b)
        out.flush()

    return run_exec(host, argv, write)
