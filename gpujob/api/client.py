"""gpujob as a library: a ``Client`` holds the host connections, a ``Job`` is one job on them.

    with gpujob.Client() as c:
        job = c.submit("job.yaml", host="local")
        print(job.wait().state)

Every method is one use case (gpujob.usecases) and returns a result from gpujob.api.results,
whose ``to_json()`` is what the matching command prints with ``--json``. Nothing here draws.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypedDict

from gpujob.api import results as r
from gpujob.api.background import LogPump, Tunnel, close_agent
from gpujob.bundle import import_remote
from gpujob.errors import ConnectError, GpujobError, JobNotFound
from gpujob.jsontypes import JSONObject

if TYPE_CHECKING:
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.spec import JobSpec
    from gpujob.transport.agent import Agent

Note = Callable[[str], None]
Progress = Callable[[int, int], None]
STOP_WAIT: float = import_remote("core.spec").STOP_WAIT  # s a stop (and a move's stop) waits for the job to end


class Resubmit(TypedDict, total=False):
    """What ``move`` needs to send a job again, kept in the job index: its job file, overrides and mirror."""

    job_file: str
    set: list[str]
    mirror: Mapping[str, object]


class PlacementInterrupted(KeyboardInterrupt):
    """Ctrl-C while waiting for a host with the GPUs free: nothing was submitted."""


def _connect(host: Host) -> Agent:
    from gpujob.transport.agent import connect_agent

    return connect_agent(host)


class Client:
    """The hosts and their agent connections: opened on first use, closed by ``close()`` or the ``with`` block.

    ``host`` pins every call to one host profile (what ``--host`` does); without it a job is
    looked up in this laptop's job index, a submit goes where the job file says (else
    ``local``) and ``jobs()`` lists every host that has received jobs.
    """

    def __init__(self, host: str | None = None) -> None:
        self.host = host
        self._agents: dict[str, Agent] = {}
        self._store: HostStore | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection this client opened (a job on a host runs on regardless)."""
        for name in list(self._agents):
            self.drop(name)

    @property
    def hosts(self) -> HostStore:
        """The host profiles (``gpujob host ls``); ``local`` is always there."""
        if self._store is None:
            from gpujob.config.hosts import HostStore

            self._store = HostStore()
        return self._store

    def agent(self, host: str | None = None) -> Agent:
        """The agent of ``host`` (default: the client's, else ``local``), connected once and kept."""
        h = self.hosts.get(host or self.host)
        if h.name not in self._agents:
            t0 = time.monotonic()
            try:
                self._agents[h.name] = _connect(h)
            except ConnectError as e:
                from gpujob.usecases.power.manual import off_error

                # "powered off; meter off at T", asked within what is left of a quick command's budget
                raise (off_error(h, self.hosts, e, time.monotonic() - t0) or e) from None
        return self._agents[h.name]

    def drop(self, host: str | None = None) -> None:
        """Close the kept connection to ``host`` (e.g. a dead one after a network change); the next call opens one."""
        name = self.hosts.get(host or self.host).name
        agent = self._agents.pop(name, None)
        if agent is not None:
            try:
                close_agent(agent)
            except OSError:
                pass

    def _wake(self, host: Host, wait: float | None, note: Note | None) -> Host:
        """``host``, powered on first when its profile can switch it on and it is off (docs/power.md)."""
        from gpujob.usecases.power.wake import can_switch, ensure_on

        if not can_switch(host):
            return host
        host = ensure_on(host, wait=wait, note=note, store=self.hosts)
        self.drop(host.name)  # a connection kept from before the power-on is dead
        return host

    def _keep(self, agent: Agent) -> None:
        old = self._agents.get(agent.host.name)
        if old is not None and old is not agent:
            close_agent(old)
        self._agents[agent.host.name] = agent

    # ---- jobs --------------------------------------------------------------------------------
    def job(self, ref: str, host: str | None = None) -> Job:
        """A job by id, id prefix or name (nothing is asked of its host yet)."""
        return Job(self, ref, host or self.host)

    def jobs(self, all: bool = False, host: str | None = None, last_known: bool = False) -> r.JobList:
        """Running and queued jobs and the newest finished ones (``all``: every job), of one host or all.

        Over several hosts, one that cannot be reached is listed in ``errors``; alone, its error is raised.
        ``last_known``: a host that cannot be reached lists its jobs as this laptop last knew them
        (marked ``unreachable``, with ``last_seen``) and is in ``errors``, even alone.
        """
        from gpujob.usecases.experiments.record import observe
        from gpujob.usecases.jobs import ops as jobs
        from gpujob.usecases.jobs.lastknown import last_known as lastknown
        from gpujob.usecases.jobs.watch import whole

        names = self._host_names(host)
        out: list[JSONObject] = []
        errors: dict[str, str] = {}
        older: list[int] = []
        seen: set[tuple[str, str]] = set()
        for name in names:
            try:
                agent = self.agent(name)
                listed = jobs.ls(agent, everything=all, older=older)
                for j in listed:
                    j.setdefault("host", name)
                    j["host"] = j["host"] or name
                listed = jobs.once_each(listed, seen)  # another profile of the same instance listed them
                out += listed
                observe(listed, name, whole(agent))  # a job seen ended: its final metrics and whole curve
            except GpujobError as e:
                known = lastknown(name, e.cause, all) if last_known else []
                if len(names) == 1 and not known:
                    raise
                out += known
                errors[name] = str(e)
        return r.JobList.from_json({"jobs": out, "errors": errors, "older": sum(older)})

    def _host_names(self, host: str | None) -> list[str]:
        from gpujob.config import index

        host = host or self.host
        return [host] if host else (index.hosts() or ["local"])

    def submit(self, job: str | Path | JobSpec | None = None, set: Iterable[str] = (), host: str | None = None,
               wait_gpus: float | None = None, progress: Progress | None = None, note: Note | None = None,
               on_host: Note | None = None, force: bool = False, link: Mapping[str, object] | None = None,
               expect_code: str | None = None) -> Job:
        """Sync the code and data of a job file (or a loaded ``JobSpec``) and start it under the host's agent.

        Returns the new ``Job``; what the submit did (``submit --json``) is its ``submitted``.

        ``set``: ``KEY=VALUE`` overrides. ``host``: a profile, or ``a,b,c`` (the first that answers
        with the GPUs free); default: the job's ``host:``. ``wait_gpus``: seconds to wait for free
        GPUs. ``progress(done, total)`` follows the upload; ``on_host(name)`` is told where it goes
        before the upload starts; ``note`` gets placement messages. ``force``: upload a workdir
        that is the home folder or huge (keys and credentials are never sent). ``link``: the run's
        parent, sweep and trial in the run ledger (``rerun``, ``sweep``). ``expect_code``: the hash the
        host's copy of the code must have (``rerun``), else no job is created.
        """
        from gpujob.config import index
        from gpujob.config.spec import JobSpec, load_spec
        from gpujob.usecases.experiments.record import code_of, record_submit
        from gpujob.usecases.launch.submit import submit
        from gpujob.usecases.secrets import check_home

        overrides = list(set)
        spec = job if isinstance(job, JobSpec) else load_spec(job, overrides)
        check_home(spec, force)  # before any host is reached
        host = host or self.host
        if spec.nodes and not host:
            return self._submit_nodes(spec, on_host)
        code = code_of(spec)  # what is about to be sent, before an edit during the upload can change it
        names: Sequence[str | None] = host.split(",") if host else (spec.hosts or [spec.host])  # None: this machine
        if len(names) > 1 or wait_gpus is not None:  # placement: the first host with the GPUs free
            from gpujob.usecases.launch.placement import place

            try:
                target, agent, skipped = place(names, spec.gpus, wait=wait_gpus, note=note or (lambda s: None))
            except KeyboardInterrupt:
                raise PlacementInterrupted() from None
            self._keep(agent)
        else:
            from gpujob.usecases.launch.placement import check_capacity, wanted

            target, skipped = self._wake(self.hosts.get(names[0]), wait_gpus, note), []
            agent = self.agent(target.name)
            check_capacity(target, agent, wanted(spec.gpus), cpu_ok=spec.launcher == "torchrun")
        from gpujob.usecases.hosts.preflight import before_submit

        warnings = before_submit(agent, target, note)
        if on_host:
            on_host(target.name)
        res = submit(agent, spec, target, progress, force=force, expect_code=expect_code)
        res["skipped"] = [vars(s) for s in skipped]
        if warnings:
            res["host_warnings"] = warnings
        src = Path(spec.source)  # what ``move`` needs to send the job again: its job file and overrides
        again: Resubmit = {"job_file": str(src.resolve()), "set": overrides} if src.is_file() else {}
        if spec.checkpoint_mirror:  # pull --from mirror and move read it with the host gone (no secret in it)
            again["mirror"] = spec.checkpoint_mirror
        index.record(res["job_id"], target.name, spec.name, **again)
        record_submit(res, spec, code, again.get("job_file"), overrides, **(link or {}),  # the price: the spend counts it
                      price_per_hour=target.price_per_hour, currency=target.currency)
        return Job(self, res["job_id"], target.name, r.SubmitResult.from_json(res))

    def _submit_nodes(self, spec: JobSpec, on_host: Note | None) -> Job:
        from gpujob.config import index
        from gpujob.usecases.launch.nodes import submit_nodes

        hosts = [self.hosts.get(n) for n in spec.nodes]
        if on_host:
            on_host(",".join(h.name for h in hosts))
        res = submit_nodes(spec, hosts)
        index.record(res["job_id"], res["host"], spec.name)
        return Job(self, res["job_id"], res["host"], r.SubmitResult.from_json(res))

    # ---- experiments (the run ledger, docs/experiments.md) -------------------------------------
    def runs(self, name: str | None = None, where: Iterable[str] = (), sort: str | None = None, limit: int = 50,
             sweep: str | None = None) -> r.RunList:
        """The runs this laptop submitted, on any host, kept after ``rm``/``gc``: ``where`` filters
        (``"lr<1e-3"``), ``sort`` orders by a metric or parameter (best first), ``limit`` 0: all."""
        from gpujob.usecases.experiments.runs import runs

        return r.RunList.from_json(runs(name, list(where), sort, limit, sweep))

    def compare(self, *refs: str, plot: str | Path | None = None,
                draw: Callable[..., Any] | None = None) -> r.Comparison:
        """Runs side by side: what differs (parameters, code, environment), metrics, curves.
        ``plot``: also draw the curves overlaid to that PNG with ``draw`` (the CLI's: gpujob.ui.experiments)."""
        from gpujob.usecases.experiments.runs import compare, unseen

        for job_id, host in unseen(list(refs)):  # a run never looked at since it ended: its curves, once
            try:
                self.job(job_id, host).status()
            except GpujobError:
                pass  # removed from its host, or the host is away: the ledger's figures stand
        doc = compare(list(refs))
        if plot is not None and draw is not None:
            draw(doc, Path(plot))
            doc["plot"] = str(plot)
        return r.Comparison.from_json(doc)

    def rerun(self, ref: str, set: Iterable[str] = (), host: str | None = None, progress: Progress | None = None,
              on_host: Note | None = None) -> Job:
        """Run ``ref`` again with the same code (restored when it changed since) and ``set``'s changes
        (``lr=1e-4``: a run-line argument; a job-file key: an override), linked to it in the ledger.
        The new ``Job``'s ``submitted`` is a ``RerunResult``."""
        from gpujob.usecases.experiments.rerun import plan

        p = plan(ref, list(set))
        job = self.submit(p["job_file"], set=p["set"], host=host or self.host or p["host"], progress=progress,
                          on_host=on_host, link={"parent": p["parent"]}, expect_code=p["expect_code"])
        doc = {**(job.submitted.to_json() if job.submitted else {}), "parent": p["parent"],
               "code_hash": p["code_hash"], "restored": p["restored"]}
        job.submitted = r.RerunResult.from_json(doc)
        return job

    def sweep(self, job: str | Path, set: Iterable[str] = (), hosts: str | None = None, name: str | None = None,
              note: Note | None = None, **limits: Any) -> r.SweepReport:
        """Run the job file's ``sweep:`` (Optuna: grid, random or TPE, with pruning) to its end:
        trials through each host's GPU queue, at most ``parallel`` at once, within ``budget`` /
        ``max_gpu_hours`` (``limits`` override the file's). Blocks; a sweep left midway goes on
        with ``sweep_resume``."""
        from gpujob.usecases.experiments.sweep import start_sweep

        return r.SweepReport.from_json(start_sweep(_SweepRunner(self), str(job), list(set), hosts, name, note, limits))

    def sweep_resume(self, name: str, note: Note | None = None, storage: str | None = None) -> r.SweepReport:
        """Drive the sweep ``name`` again (its running trials kept) to its end. ``storage``: the lab's
        shared Optuna storage it is in (default: the one this laptop noted, else its own)."""
        from gpujob.usecases.experiments.sweep import resume_sweep

        return r.SweepReport.from_json(resume_sweep(_SweepRunner(self), name, note, storage))

    def sweep_status(self, name: str, storage: str | None = None) -> r.SweepReport:
        """The sweep's trials, their states and values, the best so far (from the ledger and the study:
        no host is asked; a shared study shows every laptop's trials)."""
        from gpujob.usecases.experiments.sweep import sweep_status

        return r.SweepReport.from_json(sweep_status(name, storage))

    def sweep_insight(self, name: str) -> JSONObject:
        """The sweep's study as the dashboard draws it: Optuna's optimisation history, each completed
        trial's parameters (parallel coordinates) and ``optuna.importance.get_param_importances``."""
        from gpujob.usecases.experiments.insight import sweep_insight

        return sweep_insight(name)

    # ---- hosts -------------------------------------------------------------------------------
    def exec(self, argv: str | list[str], host: str | None = None, on_output: Callable[[bytes], None] | None = None
             ) -> r.ExecResult:
        """Run a command on a host in the environment its jobs get: a string (or a list of one) is a
        shell line, a list of several is quoted word by word.

        Its output (stdout and stderr in order) goes to ``on_output`` as it comes, else into ``output``;
        what the host's login files printed is ``login_output``, never mixed into it.
        """
        from gpujob.usecases.hosts.shell import command_text, run_exec

        if isinstance(argv, str):  # a string is one shell line, never a list of its letters
            argv = [argv]

        h = self.hosts.get(host or self.host)
        chunks: list[bytes] = []
        rc, login = run_exec(h, argv, on_output or chunks.append)
        return r.ExecResult.from_json({"host": h.name, "command": command_text(argv), "exit_code": rc,
                                     "output": b"".join(chunks).decode("utf-8", "replace"), "login_output": login})

    def cost(self, host: str | None = None) -> r.CostReport:
        """What the jobs have cost (elapsed × price_per_hour), per job, per host and per currency."""
        from gpujob.usecases.jobs.cost import summarize
        from gpujob.usecases.jobs.watch import whole

        host = host or self.host
        if host:
            self.hosts.get(host)  # an unknown host is an error here, not a row of the report
        return r.CostReport.from_json(summarize(self._host_names(host), self.agent, every_host=not host, whole=whole))

    def tunnel(self, remote_port: int, local_port: int | None = None, host: str | None = None,
               on_event: Note | None = None) -> Tunnel:
        """Any port of a host on a local port: ``with client.tunnel(8888) as info: info.url``."""
        from gpujob.usecases.jobs.tunnel import run_tunnel

        h = self.hosts.get(host or self.host)
        return Tunnel(lambda ready, stop: run_tunnel(h, remote_port, local_port, None, ready, on_event, stop=stop))

    def guard(self, refs: list[str], interval: float = 30.0, once: bool = False, note: Note | None = None
              ) -> r.GuardReport:
        """Watch jobs; move one whose host stays away longer than its ``retry.move_after`` (docs/move.md)."""
        from gpujob.usecases.relocate.guard import guard

        return r.GuardReport.from_json({"outcomes": guard(refs, interval, once, note or (lambda s: None))})


class _SweepRunner:
    """The jobs of a sweep, through this client (usecases.experiments.sweep.Runner)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def submit(self, job_file: str, sets: list[str], hosts: str | None, link: Mapping[str, object]) -> tuple[str, str]:
        job = self.client.submit(job_file, set=sets, host=hosts, link=link)
        return job.ref, job.host or ""

    def status(self, job_id: str, host: str | None) -> JSONObject:
        return self.client.job(job_id, host).status().to_json()

    def stop(self, job_id: str, host: str | None) -> None:
        self.client.job(job_id, host).stop(wait=0)

    def shutdown(self, host: str) -> str:
        h = self.client.hosts.get(host)
        if not h.shutdown_command:
            return "not powered off: the host has no shutdown_command (gpujob host set NAME --preset ...)"
        from gpujob.usecases.power.livejobs import ACTIVE

        try:
            busy = [j.job_id for j in self.client.jobs(host=host) if j.state in ACTIVE]
        except GpujobError as e:  # not known to be idle: a job there may run (or wait) still
            return f"not powered off: whether a job runs there could not be asked ({e.cause})"
        if busy:
            return f"not powered off: {busy[0]} still runs or waits there"
        try:
            return f"shutdown command ran (exit {self.client.exec([h.shutdown_command], host=host).exit_code})"
        except GpujobError as e:  # a host powering off may close the connection before the command's exit
            return f"shutdown command sent ({e})"


class Job:
    """One job, by id, id prefix or name, on its host (or its nodes)."""

    def __init__(self, client: Client, ref: str, host: str | None = None, submitted: r.SubmitResult | None = None
                 ) -> None:
        self.client, self.ref, self._host = client, ref, host
        self.submitted = submitted  # what submit did, for a job this client submitted

    def __repr__(self) -> str:
        return f"Job({self.ref!r}, host={self.host!r})"

    @property
    def id(self) -> str:
        """The job id (as given: an id prefix or a name is resolved by its host on each call)."""
        return self.ref

    @property
    def host(self) -> str | None:
        """Its host profile (``a,b`` for a job over several nodes): the one given, else the job index's."""
        if self._host:
            return self._host
        from gpujob.config import remembered

        return remembered.host_of(self.ref)  # the index's, else the run ledger's (a job rm removed)

    @property
    def nodes(self) -> list[Host] | None:
        """The hosts of a job over several nodes, else None."""
        name = self.host
        if not name or "," not in name:
            return None
        return [self.client.hosts.get(n) for n in name.split(",")]

    def _agent(self) -> Agent:
        return self.client.agent(self.host)

    def _on_nodes(self, nodes: list[Host], fn: Callable[[Agent], JSONObject]) -> dict[str, Any]:
        from gpujob.usecases.launch.nodes import aggregate, on_nodes

        return aggregate(self.ref, nodes, on_nodes(nodes, fn))

    def status(self) -> r.JobStatus:
        """State, metrics and their history, GPU use, rate, ETA, cost (``status JOB --json``)."""
        from gpujob.usecases.jobs import ops as jobs
        from gpujob.usecases.jobs import watch

        nodes = self.nodes
        if nodes:
            return r.JobStatus.from_json(self._on_nodes(nodes, lambda a: jobs.status(a, self.ref)))
        return r.JobStatus.from_json(_observed(watch.fetch(self._agent(), self.ref), self.host, self._agent()))

    def record(self) -> r.JobStatus:
        """The job record alone (one light call: state, attempt, last metrics), as ``ls`` shows it."""
        from gpujob.usecases.jobs import ops as jobs

        nodes = self.nodes
        if nodes:
            return r.JobStatus.from_json(self._on_nodes(nodes, lambda a: jobs.status(a, self.ref)))
        return r.JobStatus.from_json(_observed(jobs.status(self._agent(), self.ref), self.host, self._agent()))

    def wait(self, timeout: float | None = None, poll: float = 2.0) -> r.JobStatus:
        """Poll until the job is in a state it does not leave by itself; its full status then.

        A connection that breaks meanwhile is opened again (with backoff, up to 30 tries in a
        row). ``TimeoutError`` after ``timeout`` seconds (the job goes on).
        """
        import time

        from gpujob.errors import ConnectError, HostKeyChanged

        deadline = None if timeout is None else time.monotonic() + timeout
        failures, state = 0, "unknown"
        while True:
            try:
                rec = self.record()
                failures, state = 0, rec.state
                if rec.finished:
                    return self.status()
            except HostKeyChanged:
                raise
            except ConnectError:  # a laptop that slept: the kept connection is dead, open another next time
                failures += 1
                if failures > 30:
                    raise
                self.client.drop(self.host)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.ref} is still {state} after {timeout:g} s")
            pause = min(30.0, poll * 2 ** min(failures, 6)) if failures else poll
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))

    def logs(self, follow: bool = False, lines: int | None = 20, since: float | str | None = None,
             grep: str | None = None, as_json: bool = False, node: int | None = None, offset: int | None = None,
             cancel: threading.Event | None = None, on_link: Callable[[str], None] | None = None) -> Iterator[bytes]:
        """The job's output as byte chunks: the last ``lines`` lines (None: all), or from ``since``
        (epoch seconds, or ``10m``/``2h``/a local date); ``follow`` goes on until the job ends and
        survives dropped links and a laptop that slept (the copy resumes at the byte it reached).

        ``grep``: only lines matching this regex; ``as_json``: one ``{job_id, offset, line}``
        document per line (``tail --json``). A job over several nodes: every node's lines, each
        prefixed ``[node K] `` (``node``: only that one). ``offset``: from that byte of the log (a
        reconnect's resume point, as ``tail --json`` reports it); ``cancel``: an event that, set from
        any thread, ends the iterator within half a second (its streams are killed). ``on_link``: told
        (from the reading thread) once per outage that the link was lost and is reopened, and when it is back.
        """
        from gpujob.usecases.jobs import ops as jobs

        nodes = self.nodes
        if nodes and node is None:
            from gpujob.usecases.launch.nodes import PrefixWriter

            pump = LogPump(lambda rank: _connect(nodes[rank]), list(range(len(nodes))))
            pw = PrefixWriter(pump.write)
            return pump.run(lambda rank, reconnect: jobs.follow_logs(
                reconnect, self.ref, pw.for_node(rank), lines=lines, follow=follow, on_link=on_link))
        if nodes and node is not None and node >= len(nodes):
            raise GpujobError(f"--node {node}: {self.ref} runs on {len(nodes)} nodes (0 to {len(nodes) - 1})",
                              f"gpujob tail {self.ref} --node 0")
        host = nodes[node] if nodes and node is not None else self.client.hosts.get(self.host)
        start = since_time(since)
        pump = LogPump(_connect, [host], cancel)
        flt = jobs.LineFilter(pump.write, grep, as_json) if grep or as_json else None

        def produce(_: Any, reconnect: Callable[[], Any]) -> None:
            try:
                jobs.follow_logs(reconnect, self.ref, flt or pump.write,
                                 lines=None if start is not None or offset is not None else lines, offset=offset or 0,
                                 follow=follow, since=start, on_start=flt.start if flt else None, on_link=on_link)
            finally:
                if flt:
                    flt.flush()

        return pump.run(produce)

    def stop(self, wait: float = STOP_WAIT, after_checkpoint: float | bool | None = None) -> r.JobStatus:
        """Stop the job (its code may checkpoint first) and wait up to ``wait`` s for it to end;
        ``after_checkpoint``: first wait up to that many seconds for its next complete checkpoint
        (True: twice its usual interval between checkpoints, else 20 min).
        ``stopped_for_certain`` on the result says whether it ended with no process of it left."""
        from gpujob.usecases.jobs import ops as jobs

        nodes = self.nodes
        if nodes:
            doc = self._on_nodes(nodes, lambda a: jobs.stop(a, self.ref, wait=wait, after_checkpoint=after_checkpoint))
            # what runs on any node counts (each node's own list stays under nodes)
            doc["survivors"] = sorted({p for n in doc["nodes"] for p in n.get("survivors") or []})
            return r.JobStatus.from_json(doc)
        return r.JobStatus.from_json(_observed(jobs.stop(self._agent(), self.ref, wait=wait, after_checkpoint=after_checkpoint),
                                                   self.host, self._agent()))

    @property
    def resume_moves(self) -> bool:
        """``resume()`` moves the job: it was asked for on a host other than the one it lives on."""
        from gpujob.config import remembered

        if not self._host:
            return False
        try:
            known = remembered.host_of(self.ref)
        except GpujobError:  # matches on several hosts: --host chose this one
            return False
        return bool(known and self._host != known and "," not in known)

    def resume(self, progress: Progress | None = None, note: Note | None = None) -> r.ResumeResult | r.MoveResult:
        """Restart a lost, stopped or failed job from its newest complete checkpoint; on another
        host than its own (see ``resume_moves``) the job moves there."""
        from gpujob.usecases.jobs import ops as jobs

        if self.resume_moves:
            return self.move(self._host or "", progress=progress, note=note)
        from gpujob.usecases.hosts.preflight import before_submit

        host = self.client._wake(self.client.hosts.get(self.host), None, note)
        agent = self._agent()
        warnings = before_submit(agent, host, note)  # after a power-on, as at submit
        try:
            res = jobs.resume(agent, self.ref)
        except JobNotFound:
            from gpujob.config import remembered

            if remembered.entry_of(self.ref) is None:
                raise
            # its host no longer has it (rm, a re-imaged instance): made again there from its checkpoints
            return self.move(host.name, progress=progress, note=note)
        return r.ResumeResult.from_json({**res, "host_warnings": warnings} if warnings else res)

    def move(self, to: str, job_file: str | None = None, wait: float = STOP_WAIT, progress: Progress | None = None,
             note: Note | None = None) -> r.MoveResult:
        """Continue the job on host ``to`` (``a,b``: the first with its GPUs free) from its newest
        complete checkpoint, same id and history (docs/move.md)."""
        from gpujob.usecases.relocate.move import move

        return r.MoveResult.from_json(move(self.ref, to, job_file=job_file, stop_wait=wait, progress=progress,
                                         note=note or (lambda s: None)))

    def pull(self, dest: str | Path = "gpujob-pulls", latest: bool = False, best: str | None = None,
             include: Iterable[str] = (), progress: Progress | None = None, write_wait: float | None = None,
             note: Note | None = None, source: str = "host") -> r.PullResult:
        """Copy the job's logs and checkpoints into ``dest/<job_id>/`` (only what is missing or changed).

        ``latest``: only the newest complete checkpoint; ``best``: only the best one ("": as the
        trainer recorded it, else by that metric). A job over several nodes: from rank 0's node.
        A file the job holds open for writing is waited for (``write_wait`` seconds, default 30),
        then left out: ``held`` lists it and ``complete`` is False. ``source="mirror"``: the newest
        mirrored complete checkpoint, read from ``checkpoint.mirror`` without the host
        (docs/checkpoints.md).
        """
        from gpujob.config import index

        if source == "mirror":
            from gpujob.config import remembered
            from gpujob.usecases.sync.mirror import fetch

            entry = remembered.entry_of(self.ref)  # the run ledger remembers a job rm removed
            return r.PullResult.from_json(fetch(entry["job_id"] if entry else self.ref, Path(dest), progress))
        from gpujob.usecases.sync.pull import WRITE_WAIT, pull, tell_pulled

        nodes = self.nodes
        agent = self.client.agent(nodes[0].name) if nodes else self._agent()
        what = "latest" if latest else "best" if best is not None else "all"
        res = pull(agent, self.ref, Path(dest), what, best or None, list(include), progress,
                   WRITE_WAIT if write_wait is None else write_wait, note)
        tell_pulled(agent, res["job_id"])
        index.record_pull(res["job_id"], str(Path(dest).resolve()))
        return r.PullResult.from_json(res)

    def follow(self, dest: str | Path = "gpujob-pulls", interval: float = 30.0, progress: Progress | None = None,
               note: Note | None = None) -> r.PullResult:
        """Pull each new complete checkpoint until the job ends (``pull --follow``); a dropped link is
        waited out, and a second call into the same ``dest`` resumes."""
        from gpujob.usecases.jobs.follow import follow

        def reconnect() -> None:
            self.client.drop(self.nodes[0].name if self.nodes else self.host)

        res = follow(lambda: self.pull(dest, latest=True, progress=progress).to_json(),
                     lambda: self.status().state, reconnect, interval, note or (lambda s: None))
        return r.PullResult.from_json(res)

    def tunnel(self, remote_port: int = 6006, local_port: int | None = None, install: bool = False,
               on_event: Note | None = None) -> Tunnel:
        """The job's TensorBoard on a local port (started on the host if none serves): ``with job.tunnel() as info``."""
        from gpujob.usecases.jobs.tunnel import run_tunnel

        h = self.client.hosts.get(self.host)
        return Tunnel(lambda ready, stop: run_tunnel(h, remote_port, local_port, self.ref, ready, on_event,
                                                     install=install, stop=stop))

    def stop_tensorboard(self) -> r.TensorBoardStop:
        """Stop the TensorBoard a tunnel started for the job (it outlives tunnels otherwise)."""
        from gpujob.usecases.jobs.tunnel import stop_tensorboard

        return r.TensorBoardStop.from_json(stop_tensorboard(self._agent(), self.ref))

    def plot(self, output: str | Path | None, draw: Callable[..., list[str]]) -> r.PlotResult:
        """Draw the loss and metric curves to ``output`` (default ``<ref>.png``) with ``draw``
        (the CLI's is ``gpujob.ui.plot.plot_series``, which needs matplotlib): the api decides what
        is shown, the drawing stays in the ui."""
        from gpujob.usecases.jobs.plot import plot_job

        return r.PlotResult.from_json(plot_job(self._agent(), self.ref, Path(output or f"{self.ref}.png"), draw))


def _observed(job: JSONObject, host: str | None, agent: Agent) -> JSONObject:
    """``job``, its ledger row brought up to date on the way (the ledger outlives the host's record);
    seen ended, its final metrics and whole curve are read through ``agent`` once."""
    from gpujob.usecases.experiments.record import observe
    from gpujob.usecases.jobs.watch import whole

    observe([job], host, whole(agent))
    return job


def since_time(value: float | str | None) -> float | None:
    """``since``: a duration before now (10m, 2h) as a negative number, a date as epoch seconds, a number as is."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    from gpujob.bundle import import_remote

    parse_duration = import_remote("core.protocol").parse_duration

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
