"""``gpujob tunnel JOB|HOST``: TensorBoard (or any port) on the instance, reachable here.

For a job, the agent starts TensorBoard on the folders holding the job's event files (its tb
folder, HF's ``ckpt/runs``, ``lightning_logs``, …: remote/view/tblogdir.py) when nothing serves the
port yet (detached; it outlives the tunnel and the job, so AutoDL's custom-service URL keeps
working; ``gpujob tunnel JOB --stop`` or ``gc`` ends it). The forward is re-established after the
link drops: a probe command every few seconds notices a dead connection, then we
reconnect with backoff and listen again on the same local port.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from typing import Any, Callable

from gpujob.backoff import backoff
from gpujob.config.hosts import LOCAL, Host
from gpujob.errors import ConnectError, GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.transport.agent import Agent, connect_agent
from gpujob.usecases.jobs.ops import alive, link_probe


def free_local_port(start: int, tries: int = 200) -> int:
    """``start`` if nothing listens there on 127.0.0.1, else the next free port above it."""
    for port in range(start, min(65536, start + tries)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise GpujobError(f"no free local port in {start}..{start + tries - 1}", "pass another one: --local-port N")


def ensure_tensorboard(agent: Agent, job: str, port: int) -> dict[str, Any]:
    """TensorBoard serving the job's event folders on ``port`` on the host (started if needed)."""
    return agent.call("tb", ["--job", job, "--port", str(port)], timeout=120)


def install_tensorboard(agent: Agent, job: str) -> JSONObject:
    """pip-install TensorBoard into gpujob's tools environment on the host (``<root>/tools/tensorboard``)."""
    return agent.call("tb", ["--job", job, "--install"], timeout=1200)


def stop_tensorboard(agent: Agent, job: str) -> JSONObject:
    """Stop the TensorBoard a tunnel started for ``job`` (it outlives the tunnel otherwise)."""
    return agent.call("tb", ["--job", job, "--stop"])


def run_tunnel(host: Host, remote_port: int, local_port: int | None, job: str | None = None,
               on_ready: Callable[[dict[str, Any]], None] | None = None,
               on_event: Callable[[str], None] | None = None, retries: int = 1000, install: bool = False,
               stop: threading.Event | None = None) -> None:
    """Forward a local port to ``remote_port`` on ``host`` until interrupted (Ctrl-C) or ``stop`` is set."""
    stop = stop or threading.Event()
    say = on_event or (lambda msg: sys.stderr.write(msg + "\n"))
    agent = connect_agent(host)
    info: dict[str, Any] = {"host": host.name, "remote_port": remote_port}
    if job and install:
        say(f"installing TensorBoard into gpujob's tools environment on {host.name}…")
        info["installed"] = install_tensorboard(agent, job)
    if job:
        tb = ensure_tensorboard(agent, job, remote_port)
        tb.setdefault("job_id", job)
        info.update(job_id=tb["job_id"], tensorboard=tb, autodl_url=tb.get("autodl_url"))
        if tb.get("port") and tb["port"] != remote_port:  # the asked-for port serves something else
            taken = tb.get("port_taken") or {}
            what = f"another log folder ({taken['serves']})" if taken.get("serves") else "something that is not TensorBoard"
            if taken:
                info["note"] = (f"port {remote_port} on {host.name} serves {what}; started {tb['job_id']}'s own "
                                f"TensorBoard on port {tb['port']}")
            else:
                info["note"] = f"{tb['job_id']}'s TensorBoard already serves on port {tb['port']} on {host.name}"
            remote_port = info["remote_port"] = int(tb["port"])
        if tb.get("note"):  # no event files yet: where the agent looked, what it serves
            info["note"] = "; ".join(filter(None, [info.get("note"), tb["note"]]))
    else:
        p = agent.call("port", ["--port", str(remote_port)])
        if not p.get("listening"):
            agent.close()
            raise GpujobError(f"nothing listens on port {remote_port} on {host.name}",
                              "start the server there first (e.g. jupyter lab --port 8888 --no-browser), "
                              "or give a job to get its TensorBoard: gpujob tunnel JOB")
        info["autodl_url"] = p.get("autodl_url")
    want = local_port or remote_port
    port = want if host.kind == LOCAL else free_local_port(want)
    fwd = agent.t.forward(remote_port, port)
    info.update(local_port=fwd.local_port, url=f"http://127.0.0.1:{fwd.local_port}/")
    if local_port and fwd.local_port != local_port:
        info["note"] = "; ".join(filter(None, [info.get("note"), f"port {local_port} was taken; using {fwd.local_port}"]))
    if on_ready:
        on_ready(info)
    failures = 0
    try:
        while not stop.wait(min(5.0, link_probe())):
            if agent.host.kind == LOCAL or alive(agent):
                continue
            say(f"the link to {host.name} dropped; reconnecting…")
            fwd.close()
            agent.t.reset()
            while True:
                failures += 1
                if failures > retries:
                    raise ConnectError(f"could not reconnect to {host.name}", "check the network; run gpujob tunnel again")
                time.sleep(backoff(failures, 1.0, 30.0))
                try:
                    agent = connect_agent(host)
                    fwd = _listen_again(agent, remote_port, info["local_port"])
                except (GpujobError, OSError) as e:
                    say(f"  still down ({str(e).splitlines()[0]})")
                    continue
                failures = 0
                say(f"reconnected: {info['url']}")
                break
    finally:
        fwd.close()
        agent.close()


def _listen_again(agent: Agent, remote_port: int, local_port: int) -> Any:
    deadline = time.time() + 10
    while True:
        try:
            return agent.t.forward(remote_port, local_port)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
