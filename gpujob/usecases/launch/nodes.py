"""Jobs over several instances (``nodes:``): one job id, one agent per node, torchrun between them.

Code and data go to every node in parallel; each node's agent runs the same torchrun
command with its node rank and the first node as the c10d rendezvous endpoint. Every
command (status, stop, tail, pull) treats the nodes as one job.
"""

from __future__ import annotations

import random
import string
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from gpujob.bundle import import_remote
from gpujob.config.hosts import Host
from gpujob.config.spec import JobSpec
from gpujob.errors import GpujobError
from gpujob.transport.agent import Agent, connect_agent
from gpujob.usecases.launch.nodeinfo import NodeInfo

ORDER: tuple[str, ...] = import_remote("core.protocol").WORST_FIRST  # a multi-node job shows its worst node's state


def new_job_id(name: str) -> str:
    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
    return f"{name[:40]}-{time.strftime('%m%d%H%M')}-{suffix}"


def node_info(hosts: list[Host], rank: int, job_id: str) -> NodeInfo:
    addrs = [h.private_address or h.hostname for h in hosts]
    return {"rank": rank, "num_nodes": len(hosts), "addrs": addrs, "master_addr": addrs[0], "port": 29400,
            "rdzv_id": job_id, "hosts": [h.name for h in hosts]}


def submit_nodes(spec: JobSpec, hosts: list[Host], progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Sync and start the job on every node at once; if one node fails, stop the others."""
    from gpujob.usecases.launch.submit import submit

    job_id = new_job_id(spec.name)
    results: dict[int, Any] = {}

    def one(rank: int) -> dict[str, Any]:
        agent = connect_agent(hosts[rank])
        try:
            return submit(agent, spec, hosts[rank], None, job_id=job_id, node=node_info(hosts, rank, job_id))
        finally:
            agent.close()

    with ThreadPoolExecutor(len(hosts)) as pool:
        futures = {rank: pool.submit(one, rank) for rank in range(len(hosts))}
        errors = []
        for rank, fut in futures.items():
            try:
                results[rank] = fut.result()
            except GpujobError as e:
                errors.append((rank, e))
    if errors:
        for rank in results:
            try:
                agent = connect_agent(hosts[rank])
                agent.call("stop", ["--job", job_id, "--wait", "60"])
            except GpujobError:
                pass
        rank, err = errors[0]
        raise GpujobError(f"node {rank} ({hosts[rank].name}) could not start the job: {err.cause}",
                          err.remedy or "fix that node and submit again; the other nodes were stopped")
    return {"job_id": job_id, "host": ",".join(h.name for h in hosts), "state": results[0]["state"],
            "nodes": [{"rank": r, "host": hosts[r].name, **results[r]} for r in sorted(results)],
            "sync": results[0]["sync"]}


def on_nodes(hosts: list[Host], fn: Callable[[Agent], Any]) -> list[Any]:
    """Run ``fn`` against every node's agent in parallel; errors come back as values."""

    def one(h: Host) -> Any:
        try:
            agent = connect_agent(h)
        except GpujobError as e:
            return e
        try:
            return fn(agent)
        except GpujobError as e:
            return e
        finally:
            agent.close()

    with ThreadPoolExecutor(len(hosts)) as pool:
        return list(pool.map(one, hosts))


def aggregate(job_id: str, hosts: list[Host], per_node: list[Any]) -> dict[str, Any]:
    """One status for the job: the most serious node state wins; every node listed."""
    nodes = []
    for rank, (h, st) in enumerate(zip(hosts, per_node)):
        if isinstance(st, GpujobError):
            nodes.append({"rank": rank, "host": h.name, "state": "unreachable", "error": st.cause})
        else:
            nodes.append({"rank": rank, "host": h.name, **st})
    states = [n["state"] for n in nodes]
    known = [s for s in states if s in ORDER]
    state = min(known, key=ORDER.index) if known else "unreachable"
    first = next((n for n in nodes if "job_id" in n), {})
    return {**first, "job_id": job_id, "host": ",".join(h.name for h in hosts), "state": state, "nodes": nodes}


class PrefixWriter:
    """Writes whole lines from several nodes, each prefixed ``[node K] ``, never mixing two lines."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self.write = write
        self.lock = threading.Lock()
        self.partial: dict[int, bytes] = {}

    def for_node(self, rank: int) -> Callable[[bytes], None]:
        def w(data: bytes) -> None:
            buf = self.partial.get(rank, b"") + data
            *lines, rest = buf.split(b"\n")
            self.partial[rank] = rest
            if lines:
                with self.lock:
                    self.write(b"".join(f"[node {rank}] ".encode() + ln + b"\n" for ln in lines))

        return w
