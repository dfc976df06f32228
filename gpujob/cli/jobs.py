"""Commands over jobs: the arguments go to gpujob.api, its result to gpujob.ui (or to stdout as JSON).

submit, status, ls, tail, tunnel, plot, stop, resume, pull, move, guard, cost, exec.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import Any

from gpujob import exitcodes
from gpujob.bundle import import_remote
from gpujob.cli.common import client, command_after, show
from gpujob.errors import GpujobError, HostError
from gpujob.exitcodes import CONNECT, INTERRUPTED, USAGE
from gpujob.usecases.jobs.stoppolicy import STOP_WAIT, stop_policy


def cmd_submit(args: argparse.Namespace) -> int:
    from gpujob.api import PlacementInterrupted
    from gpujob.ui.jobs import submitted
    from gpujob.ui.progress import transfer_bar

    wait = duration_flag("--wait-gpus", args.wait_gpus, "e.g. --wait-gpus 2h; nothing was submitted")
    from gpujob.cli import pools

    instance = pools.take_instance(args, wait) if args.pool else None  # docs/pools.md
    with pools.given_back_on_failure(args, instance), client(None) as c:
        # the bar ends (and leaves the screen) with the upload: left live under the log that
        # follows, it was drawn again around every line
        with transfer_bar("sync", not args.json) as bar:
            try:
                job = c.submit(args.job_file, set=args.set, host=instance or args.host,
                               wait_gpus=None if instance else wait, progress=bar, note=_note(args), force=args.force,
                               on_host=bar and (lambda name: bar.describe(f"sync → {name}")))
            except PlacementInterrupted:
                print("stopped waiting for GPUs; nothing was submitted", file=sys.stderr)
                raise
        if instance:
            pools.bind_job(instance, job.id)
        show(args, job.submitted, submitted)
        return _follow(job, say=not job.submitted.nodes) if args.follow else 0


def duration_flag(flag: str, value: str | None, remedy: str) -> float | None:
    parse_duration = import_remote("core.protocol").parse_duration

    try:
        return parse_duration(value) if value else None
    except ValueError as e:
        raise GpujobError(f"{flag}: {e}", remedy) from None


def _note(args: argparse.Namespace, draw: Any = None) -> Any:
    """Progress notes of a command: on stderr (or drawn by ``draw``), none with --json."""
    if args.json:
        return None
    from gpujob.ui.neutral import clean

    return draw or (lambda text: print(clean(text), file=sys.stderr))  # notes quote host-supplied names


def _copy(chunks: Iterable[bytes], log: bool = False, raw: bool = False) -> None:
    """``chunks`` to stdout; a job's ``log`` passes ``ui.neutral.TermFilter`` (OSC/DCS always
    stripped; other escapes kept only with ``raw`` on a terminal)."""
    from gpujob.ui.neutral import TermFilter

    out = sys.stdout.buffer
    f = TermFilter(raw and sys.stdout.isatty()) if log else None
    try:
        for chunk in chunks:
            out.write(f.feed(chunk) if f else chunk)
            out.flush()
    finally:
        if f:
            out.write(f.flush())
            out.flush()


def _follow(job: Any, say: bool) -> int:
    """``submit -f``: the log until the job ends (Ctrl-C detaches), then its outcome."""
    from gpujob.exitcodes import for_state

    try:
        _copy(job.logs(follow=True, lines=0), log=True)
    except KeyboardInterrupt:
        if say:
            sys.stderr.write(f"\ndetached; {job.ref} keeps running on {job.host}\n")
        return 130
    st = job.record()
    if say:
        sys.stderr.write(f"{st.job_id}: {st.state or None}\n")
    return for_state(st.state)


def _draw_status(st: Any) -> None:
    from gpujob.ui.jobs import status  # the drawing's modules: status --json never imports them

    status(st)


def cmd_status(args: argparse.Namespace) -> int:
    from gpujob.exitcodes import for_state

    if args.job is None:
        if args.exit_code:  # the list has no one outcome: exit 0 would read as "succeeded"
            raise GpujobError("status --exit-code reports one job's outcome: no JOB was given",
                              "gpujob status JOB --exit-code (gpujob ls lists the jobs)")
        return _watch_ls(args) if args.watch else cmd_ls(args)
    with client(args.host) as c:
        job = c.job(args.job)
        if args.watch and not args.json and not job.nodes:
            from gpujob.ui.live import live_status

            live_status(job.status, args.interval)
            return 0
        st = job.status()
        show(args, st, _draw_status)
        return for_state(st.state) if args.exit_code else 0


def _draw_jobs(listed: Any) -> None:
    from gpujob.ui.jobs import job_list  # the drawing's modules: ls --json never imports them

    job_list(listed)


def cmd_ls(args: argparse.Namespace) -> int:
    if getattr(args, "watch", False) and not args.json:
        return _watch_ls(args)
    with client(args.host) as c:
        listed = c.jobs(all=getattr(args, "all", False), last_known=True)
        show(args, listed, _draw_jobs)
        from gpujob.usecases.disks.warn import check

        check(note=lambda text: print(text, file=sys.stderr), quick=True)  # a powered-off host's disk: docs/power.md
        return CONNECT if listed.errors and all(j.unreachable for j in listed.jobs) else 0  # no host answered


def _watch_ls(args: argparse.Namespace) -> int:
    from gpujob.ui.live import live_table

    with client(args.host) as c:  # one connection per host, one command per refresh
        live_table(lambda: c.jobs(all=getattr(args, "all", False), last_known=True), args.interval)  # a host away: last known
    return 0


def _link_note(text: str) -> None:
    """``tail -f``'s word on its link (stderr: stdout is the log): lost and reconnecting, then back. The
    reason quotes the link's error, which may carry what the host sent: through the one sanitiser."""
    from gpujob.ui.neutral import clean

    print(f"gpujob: {clean(text)}", file=sys.stderr, flush=True)


def cmd_tail(args: argparse.Namespace) -> int:
    from gpujob.exitcodes import for_state

    with client(args.host) as c:
        job = c.job(args.job)
        _copy(job.logs(follow=args.follow, lines=args.lines, since=getattr(args, "since", None),
                       grep=getattr(args, "grep", None), as_json=getattr(args, "json", False), node=args.node,
                       on_link=_link_note),
              log=True, raw=getattr(args, "raw", False))
        return for_state(job.record().state) if args.follow else 0  # the log ended with the job: its outcome


def cmd_tunnel(args: argparse.Namespace) -> int:
    from gpujob.ui.jobs import tensorboard_stopped, tunnel_ready

    with client(args.host) as c:
        if args.target in {h.name for h in c.hosts.all()} | {"local"} and not args.host:  # a port of a host
            if args.stop:
                raise HostError("--stop takes a job: it stops the TensorBoard gpujob started for that job",
                                "gpujob tunnel JOB --stop")
            tunnel = c.tunnel(args.remote_port or 6006, args.local_port, host=args.target)
        elif args.stop:
            ended = c.job(args.target).stop_tensorboard()
            return show(args, ended, tensorboard_stopped) or (exitcodes.NOT_FINISHED if ended.running else 0)
        else:
            tunnel = c.job(args.target).tunnel(args.remote_port or 6006, args.local_port, install=args.install)
        try:
            with tunnel as info:
                show(args, info, tunnel_ready)
                sys.stdout.flush()
                tunnel.wait()
        except KeyboardInterrupt:  # docs/cli.md: 130; what stays up is said
            left = f" (its TensorBoard keeps running on the host: gpujob tunnel {args.target} --stop ends it)" \
                if not args.host and args.target not in {h.name for h in c.hosts.all()} | {"local"} else ""
            print(f"tunnel closed{left}", file=sys.stderr)
            return INTERRUPTED
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from gpujob.ui.jobs import plotted
    from gpujob.ui.plot import plot_series

    with client(args.host) as c:
        return show(args, c.job(args.job).plot(args.output, plot_series), plotted)


def cmd_stop(args: argparse.Namespace) -> int:
    from gpujob.ui.jobs import stopped

    max_wait = duration_flag("--max-wait", args.max_wait, "e.g. --max-wait 20m") if args.after_checkpoint else None
    wait, after = stop_policy(args.wait, args.after_checkpoint, max_wait)
    with client(args.host) as c:
        try:
            st = c.job(args.job).stop(wait=wait, after_checkpoint=after)
        except KeyboardInterrupt:  # exit 130 said nothing: the stop may be under way there, or not sent
            raise _interrupted("stop", args.job) from None
    show(args, st, stopped)
    # "stopped" only when verified: a job still stopping, or a process of it still running, is not
    return 0 if st.stopped_for_certain else exitcodes.NOT_FINISHED


def cmd_resume(args: argparse.Namespace) -> int:
    from gpujob.api.results import MoveResult
    from gpujob.ui.jobs import moved, resumed

    with client(args.host) as c:
        job = c.job(args.job)
        if job.resume_moves:  # another host: the job moves there
            return cmd_move(argparse.Namespace(**{**vars(args), "to": args.host, "job_file": None, "wait": STOP_WAIT}))
        try:
            res = job.resume(note=_note(args))  # the notes: a powered-off host's start, a job made again
        except KeyboardInterrupt:
            raise _interrupted("resume", args.job) from None
        # a job its host lost (rm, a re-imaged instance) is made again there from its checkpoints: a move
        return show(args, res, moved if isinstance(res, MoveResult) else resumed)


def _interrupted(verb: str, ref: str) -> Exception:
    """Ctrl-C during a verb that changes a job on its host: whether the host did it is unknown here."""
    from gpujob.errors import Interrupted

    goes_on = "the job's supervisor goes on ending it" if verb == "stop" else "the job starts there"
    return Interrupted(f"{verb} interrupted: the {verb} may already have reached the host ({goes_on}), or not",
                       f"gpujob status {ref} shows where the job stands; gpujob {verb} {ref} again if it did not")


def _best_took_dest(args: argparse.Namespace) -> None:
    """``pull JOB --best ./out``: --best's optional METRIC took the folder meant as DEST ("no best (by ./out)")."""
    b = args.best
    if b and args.dest == "gpujob-pulls" and (b.startswith((".", "/", "~")) or os.path.isdir(b)):
        args.dest, args.best = b, ""


def cmd_pull(args: argparse.Namespace) -> int:
    from gpujob.ui.jobs import pull_warnings, pulled
    from gpujob.ui.progress import transfer_bar

    _best_took_dest(args)
    if args.follow is not None:
        from gpujob.ui.jobs import note

        with client(args.host) as c:
            res = c.job(args.job).follow(args.dest, args.follow, note=_note(args, note))
    else:
        with client(args.host) as c, transfer_bar(f"pull {args.job}", not args.json) as bar:
            res = c.job(args.job).pull(args.dest, latest=args.latest, best=args.best, include=args.include,
                                       progress=bar, write_wait=args.write_wait, note=_note(args), source=args.source)
    pull_warnings(res)
    rc = show(args, res, pulled)
    return rc or (0 if res.complete else USAGE)  # a file left out (being written, a refused name) is no success


def cmd_move(args: argparse.Namespace) -> int:
    from gpujob.ui.jobs import moved, note
    from gpujob.ui.progress import transfer_bar

    with client(None) as c, transfer_bar(f"move {args.job} → {args.to}", not args.json) as bar:
        res = c.job(args.job).move(args.to, job_file=args.job_file, wait=args.wait, progress=bar,
                                   note=_note(args, note))
    return show(args, res, moved)


def cmd_guard(args: argparse.Namespace) -> int:
    from gpujob.ui.jobs import guarded, note

    with client(None) as c:
        return show(args, c.guard(args.jobs, args.interval, args.once, _note(args, note)), guarded)


def cmd_cost(args: argparse.Namespace) -> int:
    from typing import cast

    from gpujob.ui.cost import cost_report
    from gpujob.usecases.jobs.cost import CostSummary

    with client(args.host) as c:  # the cost use case's document (a copy of it): a CostSummary as built
        return show(args, c.cost(), lambda res: cost_report(cast(CostSummary, res.to_json())))


def _login_output_on_failure(rc: int, text: str, heading: str = "(the host's login files printed, before the "
                             "command ran:)", lines: int = 20) -> None:
    """A failed command's context: what the host's login files printed (a missing conda, a profile
    error), kept out of the command's output, shown on stderr (escapes stripped: host bytes)."""
    from gpujob.ui.neutral import clean

    tail = [clean(ln) for ln in text.splitlines() if ln.strip()][-lines:]
    if rc != 0 and tail:
        sys.stderr.write(heading + "\n" + "\n".join(tail) + "\n")


def cmd_exec(args: argparse.Namespace) -> int:
    argv = command_after(args, ("--json",), ("--host",))
    with client(args.host) as c:
        if not args.host and args.target in {h.name for h in c.hosts.all()} | {"local"}:  # a host, as before
            return _exec_on_host(c, args, argv)
        return _exec_in_job(c, args, argv)


def _terminal_copy() -> tuple[Any, Any]:
    """(write, flush) of a command's output: on a terminal colours pass, OSC/DCS strings (clipboard,
    title) never do, since a host's (or a job's file's) bytes would drive it; a pipe gets them as they are."""
    from gpujob.ui.neutral import TermFilter

    f = TermFilter(raw=True) if sys.stdout.isatty() else None
    return (lambda b: _copy([f.feed(b) if f else b])), (lambda: _copy([f.flush()]) if f else None)


def _exec_on_host(c: Any, args: argparse.Namespace, argv: list[str]) -> int:
    from gpujob.ui.output import print_json

    if not args.json:
        write, flush = _terminal_copy()
        try:
            res = c.exec(argv, host=args.target, on_output=write)
        finally:
            flush()
        _login_output_on_failure(res.exit_code, res.login_output)
        return res.exit_code
    res = c.exec(argv, host=args.target)
    print_json(res.to_json())
    return res.exit_code


def _exec_in_job(c: Any, args: argparse.Namespace, argv: list[str]) -> int:
    """``exec JOB``: where the job runs (its node on a Slurm host), in its folder and environment."""
    from gpujob.ui.output import print_json
    from gpujob.usecases.jobs import execjob

    name = execjob.job_host(args.target, args.host, None if args.host else c.job(args.target).host)
    agent = c.agent(name)
    if not argv:
        if args.json:
            raise GpujobError("exec JOB --json runs a command: an interactive shell has no JSON",
                              f"gpujob exec {args.target} --json -- CMD")
        from gpujob.usecases.hosts.shell import hand_over

        plan, _ = execjob.shell_plan(agent, c.hosts.get(name), args.target)
        c.close()  # the terminal goes to OpenSSH: gpujob's own connection is not needed
        hand_over(plan)  # not returning: ssh -t (or the local shell) replaces this process
    if args.json:
        res = execjob.run_in_job(agent, args.target, argv)
        print_json(res)
        return res["exit_code"]
    write, flush = _terminal_copy()
    try:
        res = execjob.run_in_job(agent, args.target, argv, write)
    finally:
        flush()
    _login_output_on_failure(res["exit_code"], res["login_output"], "(the host printed on stderr, apart from "
                             "the command's output:)")
    return res["exit_code"]
