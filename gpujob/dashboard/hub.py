"""What the dashboard knows, fetched once however many tabs look: one poller per host, one watcher per open job.

Every host has one poller thread that lists its jobs (one agent call, ``Client.jobs``) every
``interval`` seconds (counted in ``HostConn.calls``), and bumps ``Hub.version`` when the list changed; a job page's
details come from one ``JobWatcher`` per job, alive while some tab asked within the last
``linger`` seconds. The server's event streams only compare versions (in memory): a tab
never causes an agent call of its own. All host calls go through ``gpujob.Client``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, TypedDict

from gpujob.backoff import backoff
from gpujob.dashboard.disks import DiskWatch
from gpujob.dashboard.rows import SPARK_POINTS, Row, gpu_use, loss_key, row
from gpujob.errors import ConnectError, GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView, views
from gpujob.ui.mirror import mark_mirror
from gpujob.usecases.disks.countdown import Release


def _said(e: GpujobError) -> str:
    return f"{e.cause} ({e.remedy})" if e.remedy else e.cause


class Listing(TypedDict):
    """``Hub.rows``: the jobs page's table, the hosts that did not answer, the version it is of."""

    jobs: list[Row]
    errors: dict[str, str]
    hosts: list[str]
    version: int
    disks: dict[str, Release]  # powered-off hosts: the platform's release countdown (dashboard/disks.py)


class Snapshot(TypedDict):
    """``JobWatcher.snapshot``: a job page's status document, its table row, the watcher's error."""

    job: JSONObject | None
    row: Row | None
    error: str | None
    version: int


def _steady(jobs: list[JSONObject]) -> list[JSONObject]:
    """The records less what changes on every look (the agent's clock, a running job's heartbeat)."""
    return [{k: v for k, v in j.items() if k not in ("now", "heartbeat")} for j in jobs]


class HostConn:
    """One host's kept connection: a ``Client`` pinned to it, used by one thread at a time."""

    def __init__(self, name: str, make_client: Callable[[str], Any]) -> None:
        self.name = name
        self.client = make_client(name)
        self.lock = threading.Lock()
        self.calls = 0

    def call(self, fn: Callable[[Any], Any]) -> Any:
        with self.lock:
            self.calls += 1
            try:
                return fn(self.client)
            except ConnectError:
                self.client.drop(self.name)  # a dead connection: the next call opens another
                raise


class Hub:
    """The pollers, watchers and the version the event streams wait on."""

    def __init__(self, hosts: list[str], interval: float = 3.0, make_client: Callable[[str], Any] | None = None,
                 linger: float = 20.0) -> None:
        if make_client is None:
            from gpujob.api import Client

            make_client = Client
        self.interval, self.linger = interval, linger
        self.conns = {h: HostConn(h, make_client) for h in hosts}
        self.version = 0
        self.changed = threading.Condition()
        self.jobs: dict[str, list[JSONObject]] = {h: [] for h in hosts}
        self.errors: dict[str, str] = {}
        self.history: dict[str, deque[float]] = {}
        self.gpu: dict[str, float] = {}
        self._stamps: dict[str, tuple[Any, Any]] = {}
        self.watchers: dict[str, JobWatcher] = {}
        self.stopped = threading.Event()
        self.wake = {h: threading.Event() for h in hosts}  # poke(): list this host now (after a button)
        self._lock = threading.Lock()
        self.pollers = [threading.Thread(target=self._poll, args=(h,), daemon=True, name=f"poll-{h}") for h in hosts]
        self.disks = DiskWatch(self.bump, self.stopped)

    def start(self) -> Hub:
        for t in self.pollers:
            t.start()
        self.disks.start()
        return self

    def close(self) -> None:
        self.stopped.set()
        for ev in [*self.wake.values(), *(w.wake for w in self.watchers.values())]:
            ev.set()
        with self.changed:
            self.changed.notify_all()
        for c in self.conns.values():
            held = c.lock.acquire(timeout=2)  # a call stuck on a dead link must not hold up the exit
            try:
                c.client.close()
            except Exception:  # noqa: BLE001 - leaving anyway; the jobs run on
                pass
            finally:
                if held:
                    c.lock.release()

    def bump(self) -> None:
        with self.changed:
            self.version += 1
            self.changed.notify_all()

    def wait_change(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen`` (or after ``timeout``): called from a worker thread."""
        with self.changed:
            self.changed.wait_for(lambda: self.version != seen or self.stopped.is_set(), timeout)
            return self.version

    # ---- the jobs list ------------------------------------------------------------------------
    def _poll(self, host: str) -> None:
        conn, failures = self.conns[host], 0
        while not self.stopped.is_set():
            try:
                listed = conn.call(lambda c: c.jobs(all=True, host=host))
                jobs, err, failures = [j.to_json() for j in listed.jobs], None, 0
            except GpujobError as e:
                jobs, err = self.jobs.get(host, []), _said(e)
            except Exception as e:  # noqa: BLE001 - a poller never dies: the page shows why the host is stale
                jobs, err = self.jobs.get(host, []), f"{type(e).__name__}: {e}"
            if err:
                failures += 1
            self._take(host, jobs, err)
            # a host that does not answer (powered off, a stale profile) is asked less and less often, up to 1/min
            self.wake[host].wait(backoff(failures, self.interval, 60.0) if failures else self.interval)
            self.wake[host].clear()

    def poke(self, host: str, job_id: str | None = None) -> None:
        """Look at ``host`` (and that job) again now rather than at the next interval: a button changed it."""
        if host in self.wake:
            self.wake[host].set()
        w = self.watchers.get(f"{host}/{job_id}")
        if w is not None:
            w.wake.set()

    def _take(self, host: str, jobs: list[JSONObject], err: str | None) -> None:
        with self._lock:
            for j in jobs:
                v = JobView(j)
                j["host"] = v.host or host
                m = v.last_metrics or {}
                lk = loss_key(m)
                key = f"{v.host}/{v.job_id}"
                hist = self.history.setdefault(key, deque(maxlen=SPARK_POINTS))
                stamp = (m.get("step"), m.get("t"))  # a new metric line, not the same one seen again
                if lk and isinstance(m.get(lk), (int, float)) and self._stamps.get(key) != stamp:
                    hist.append(float(m[lk]))
                    self._stamps[key] = stamp
            changed = _steady(jobs) != _steady(self.jobs.get(host) or []) or err != self.errors.get(host)
            self.jobs[host] = jobs
            if err:
                self.errors[host] = err
            else:
                self.errors.pop(host, None)
        if changed:
            self.bump()

    def rows(self) -> Listing:
        """Every job of every host as table rows, and the hosts that did not answer."""
        with self._lock:
            # each job once: two host profiles of one instance (its root's id) both list it
            listed: dict[tuple[Any, Any], JobView] = {}
            for host in self.jobs:
                for v in views(self.jobs[host]):
                    listed.setdefault((v.instance or f"host:{v.host}", v.job_id), v)
            out = [row(v.doc, list(self.history.get(f"{v.host}/{v.job_id}", [])), self.gpu.get(f"{v.host}/{v.job_id}"))
                   for v in listed.values()]
            return {"jobs": out, "errors": dict(self.errors), "hosts": list(self.conns), "version": self.version,
                    "disks": dict(self.disks.shown)}

    def row_of(self, host: str, job_id: str) -> Row | None:
        """The job's row in the latest listing (its ETA and cost from the agent's estimate)."""
        with self._lock:
            for j in self.jobs.get(host, []):
                if JobView(j).job_id == job_id:
                    return row(j, list(self.history.get(f"{host}/{job_id}", [])), self.gpu.get(f"{host}/{job_id}"))
        return None

    def calls(self) -> dict[str, int]:
        return {h: c.calls for h, c in self.conns.items()}

    # ---- one job ------------------------------------------------------------------------------
    def watch(self, host: str, job_id: str) -> JobWatcher:
        """The job's watcher (started if none runs); each call keeps it alive ``linger`` seconds more."""
        key = f"{host}/{job_id}"
        with self._lock:
            w = self.watchers.get(key)
            if w is None or not w.alive():
                w = self.watchers[key] = JobWatcher(self, host, job_id)
                w.start()
            w.touched = time.monotonic()
            return w

    def conn(self, host: str) -> HostConn:
        if host not in self.conns:
            raise GpujobError(f"unknown host {host!r} in this dashboard (it shows {', '.join(self.conns)})",
                              "restart gpujob ui after gpujob host add")
        return self.conns[host]


def mark_pulled(doc: JSONObject) -> JSONObject:
    """Each checkpoint's copy on this laptop (``gpujob pull`` or the page's button put it there), if any."""
    from pathlib import Path

    from gpujob.config import index

    v = JobView(doc)
    dests = index.pulls_of(str(v.job_id or ""))
    for ck in v.checkpoints or []:
        here = [Path(d) / str(v.job_id) / "ckpt" / str(ck.get("name")) for d in dests]
        ck["pulled"] = next((str(p) for p in here if p.is_dir()), None)
    return doc


class JobWatcher:
    """One job's ``status`` (curves, checkpoints, attempts, cost), fetched every interval while a tab looks."""

    def __init__(self, hub: Hub, host: str, job_id: str) -> None:
        self.hub, self.host, self.job_id = hub, host, job_id
        self.doc: JSONObject | None = None
        self.error: str | None = None
        self.touched = time.monotonic()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{host}/{job_id}")

    def start(self) -> None:
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def _run(self) -> None:
        conn = self.hub.conn(self.host)
        finished_once = False
        doc: JSONObject | None
        while not self.hub.stopped.is_set() and time.monotonic() - self.touched < self.hub.linger:
            try:
                st = conn.call(lambda c: c.job(self.job_id, host=self.host).status())
                doc, err = mark_mirror(mark_pulled(st.to_json())), None
                finished_once = st.finished
            except GpujobError as e:
                doc, err = self.doc, _said(e)
            except Exception as e:  # noqa: BLE001 - shown on the page, the watcher goes on
                doc, err = self.doc, f"{type(e).__name__}: {e}"
            if doc != self.doc or err != self.error:
                self.doc, self.error = doc, err
                g = gpu_use(JobView(doc or {}).gpu)
                if g is not None:
                    self.hub.gpu[f"{self.host}/{self.job_id}"] = g
                self.hub.bump()
            # a finished job changes no more: look again only now and then (a resume restarts it)
            self.wake.wait(self.hub.interval * (5 if finished_once else 1))
            self.wake.clear()

    def snapshot(self) -> Snapshot:
        resolved = JobView(self.doc or {}).job_id or self.job_id
        return {"job": self.doc, "row": self.hub.row_of(self.host, resolved), "error": self.error,
                "version": self.hub.version}
