"""Where a large upload's laptop time goes: cProfile in every thread (the caller, each range
channel, paramiko's transport thread), summed, over a real sshd on loopback or through the link
emulator.

    python benchmarks/sync/profile_up.py [--mb 256] [--rtt-ms 0] [--mbit 0] [--top 25] [--kept]

``--kept``: through the kept connection (the multiplexer's daemon, started and listening before
timing), as a user's second command goes; else a connection of its own, connect included.

``GPUJOB_RANGE_CHANNELS`` / ``GPUJOB_RANGE_CONNECTIONS=own`` choose the channels as in a sync;
``GPUJOB_RANGE_SERVE=0`` makes them ``range`` commands instead of connections to one server.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PROFILES: list[cProfile.Profile] = []
LOCK = threading.Lock()


def profiled(fn):
    """``fn`` run under a profiler of its own thread's, kept for the sum."""
    def run(*a, **kw):
        p = cProfile.Profile()
        with LOCK:
            PROFILES.append(p)
        p.enable()
        try:
            return fn(*a, **kw)
        finally:
            p.disable()
    return run


T0 = [0.0]
EVENTS: list[tuple[float, str]] = []


def timed(name: str, fn):
    """``fn`` with its start and end noted (the phases of one sync, printed in order)."""
    def run(*a, **kw):
        EVENTS.append((time.monotonic() - T0[0], f"{name} start ({threading.current_thread().name})"))
        try:
            return fn(*a, **kw)
        finally:
            EVENTS.append((time.monotonic() - T0[0], f"{name} end ({threading.current_thread().name})"))
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--rtt-ms", type=float, default=0.0)
    ap.add_argument("--mbit", type=float, default=0.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--kept", action="store_true", help="through the kept connection (started before timing)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpujob-prof-"))
    os.environ["GPUJOB_CONFIG_DIR"] = str(work / "config")
    os.environ["GPUJOB_NO_SSH_AGENT"] = "1"
    os.environ["GPUJOB_MUX"] = "1" if a.kept else "0"
    os.environ["GPUJOB_MUX_DIR"] = str(work / "mux")
    import paramiko
    from linkemu import LinkProcess

    from gpujob.config.hosts import Host
    from gpujob.config.keys import public_key_line
    from gpujob.config.spec import DataEntry, JobSpec
    from gpujob.transport import connect
    from gpujob.transport.agent import Agent
    from gpujob.usecases.sync import ranges
    from gpujob.usecases.sync import upload as sync
    from gpujob.usecases.sync.upload import sync_job
    from tests.conftest import start_sshd, stop_sshd

    paramiko.Transport.run = profiled(paramiko.Transport.run)
    sync.open_session = timed("manifest (sync session)", sync.open_session)
    sync.upload_ranged = timed("ranged upload", sync.upload_ranged)
    sync.upload = timed("stream upload", sync.upload)
    ranges._commit = timed("commit", ranges._commit)
    Agent.stream_doc = timed("command opens", Agent.stream_doc)
    ranges._Server.connect = timed("served channel connects", ranges._Server.connect)
    ranges._first_doc = timed("served channel answers", ranges._first_doc)
    from gpujob.transport import dialback

    dialback.DialBack.open = timed("forward asked", dialback.DialBack.open)
    taken = dialback.DialBack.take

    def take(self, wait):  # noqa: ANN001, ANN202
        got = taken(self, wait)
        EVENTS.append((time.monotonic() - T0[0], f"dialled-back channel {'taken' if got else 'none'}"))
        return got
    dialback.DialBack.take = take
    ranges._Channel.run = profiled(ranges._Channel.run)
    sshd = start_sshd(work / "sshd")
    link = None
    try:
        sshd.authorize(public_key_line())
        (work / "big").mkdir()
        (work / "empty").mkdir()
        (work / "big" / "model.bin").write_bytes(os.urandom(a.mb << 20))
        port = sshd.port
        if a.rtt_ms or a.mbit:
            link = LinkProcess(sshd.port, a.rtt_ms / 2, a.mbit)
            port = link.port
        host = Host(name="prof", hostname="127.0.0.1", port=port, user=os.environ.get("USER", "root"),
                    root=str(work / "root"), connect_timeout=10, agent_python=sys.executable)
        Agent(connect(host), host).call("hello")
        if a.kept:
            from gpujob.transport import mux

            assert mux.start(host), "the kept connection did not start"
        spec = JobSpec(name="p", run="true", workdir=str(work / "empty"),
                       data=[DataEntry(str(work / "big" / "model.bin"), "prof/model.bin")])
        os.sync()
        t = T0[0] = time.monotonic()
        main_prof = cProfile.Profile()
        PROFILES.append(main_prof)
        main_prof.enable()
        agent = Agent(connect(host), host)
        t_conn = time.monotonic() - t
        print(f"transport: {type(agent.t).__name__}")
        rep = sync_job(agent, spec, "p")
        main_prof.disable()
        wall = time.monotonic() - t
        rtt = ranges.measured_rtt(agent)
        print(f"{a.mb} MB up: {wall:.2f} s ({a.mb / wall:.1f} MB/s), connect {t_conn:.2f} s, measured RTT "
              f"{(rtt or 0) * 1e3:.1f} ms, {len(PROFILES) - 1} profiled threads, sent {rep.bytes_sent / 1e6:.0f} MB; "
              f"load average {os.getloadavg()[0]:.1f}")
        for at, what in EVENTS:
            print(f"{at:7.2f} s  {what}")
        st = pstats.Stats(PROFILES[0])
        for p in PROFILES[1:]:
            st.add(p)
        st.sort_stats("tottime").print_stats(a.top)
    finally:
        if link:
            link.close()
        stop_sshd(sshd)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
