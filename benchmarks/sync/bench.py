"""gpujob sync vs rsync -az and scp over a real sshd, on loopback and through an emulated slow link.

    python benchmarks/sync/bench.py [--small 3000] [--large-mb 512] [--rtt-ms 40] [--mbit 100] [--out FILE]
                                    [--links lo,slow] [--cases small,noop,one,up,down] [--no-scp]

The issue's sizes: 3,000 small files, one 512 MB file up and one 512 MB checkpoint down (about
12 minutes on 2 cores, half of it scp copying 3,000 files one by one on the slow link). Every
tool's time includes its own SSH connect, and each starts with nothing dirty in the page cache.
gpujob's agent is installed before timing (it is a one-off per version).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

WORDS = ("def class return import self model loss step batch optimizer tensor grad for in if else "
         "print config data train eval lr = ( ) : + - * 0 1 2 32 128 # TODO note").split()


def make_small(top: Path, n: int, seed: int = 1) -> int:
    rnd = random.Random(seed)
    total = 0
    for i in range(n):
        d = top / f"pkg{i % 30}" / f"mod{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        text = "\n".join(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 12))) for _ in range(rnd.randint(20, 120)))
        (d / f"file_{i}.py").write_text(text + "\n")
        total += len(text) + 1
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=3000)
    ap.add_argument("--large-mb", type=int, default=512)
    ap.add_argument("--rtt-ms", type=float, default=40)
    ap.add_argument("--mbit", type=float, default=100)
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--links", default="lo,slow", help="which links: lo, slow or both (lo,slow)")
    ap.add_argument("--cases", default="small,noop,one,up,down", help="which cases to run")
    ap.add_argument("--kept", action="store_true", help="gpujob with its kept connection (the multiplexer) and "
                    "rsync/scp with OpenSSH's ControlMaster, both opened before timing")
    ap.add_argument("--no-scp", action="store_true", help="skip scp (its 3,000 files on the slow link take minutes)")
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpujob-bench-"))
    os.environ["GPUJOB_CONFIG_DIR"] = str(work / "config")
    os.environ["GPUJOB_NO_SSH_AGENT"] = "1"
    # each gpujob run makes its own SSH connection, as rsync and scp do (the multiplexer's kept
    # connection would skip the handshake: GPUJOB_MUX=1 measures that)
    os.environ.setdefault("GPUJOB_MUX", "1" if a.kept else "0")
    if a.kept:
        os.environ["GPUJOB_MUX_DIR"] = tempfile.mkdtemp(prefix="gjmux")
    from linkemu import LinkProcess as Link

    from gpujob.config.hosts import Host
    from gpujob.config.keys import key_path, public_key_line
    from gpujob.config.spec import JobSpec
    from gpujob.transport import connect
    from gpujob.transport.agent import Agent
    from gpujob.usecases.sync.pull import pull
    from gpujob.usecases.sync.upload import sync_job
    from tests.conftest import start_sshd, stop_sshd

    sshd = start_sshd(work / "sshd")
    try:
        rows = _run(a, work, sshd, Link, Agent, Host, pull, JobSpec, sync_job, connect, key_path, public_key_line)
    finally:
        stop_sshd(sshd)
    _report(a, rows)
    shutil.rmtree(work, ignore_errors=True)


def _here_cpu() -> float:
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _far_cpu(sshd) -> float:  # noqa: ANN001
    """CPU seconds of everything under the sshd listener: the sessions it reaped, and the live ones
    (a kept connection's session and its agent) with what they reaped."""
    tck = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[int]] = {}
    times: dict[int, tuple[int, int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(d.name)
        kids.setdefault(int(f[1]), []).append(pid)
        times[pid] = (int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))  # utime+stime, cutime+cstime
    root = sshd.proc.pid
    total, todo = times.get(root, (0, 0))[1], list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        total += sum(times.get(pid, (0, 0)))
        todo += kids.get(pid, [])
    return total / tck


def _run(a, work, sshd, Link, Agent, Host, pull, JobSpec, sync_job, connect, key_path, public_key_line):  # noqa: N803
    sshd.authorize(public_key_line())
    key = str(key_path())
    user = os.environ.get("USER", "root")
    root = work / "remote-root"
    src = work / "src"
    nbytes = make_small(src, a.small)
    big = work / "big"
    big.mkdir()
    (big / "model.bin").write_bytes(os.urandom(a.large_mb << 20))
    job = root / "jobs" / "bench-job"
    (job / "ckpt" / "step-1").mkdir(parents=True)
    (job / "status.json").write_text('{"job_id": "bench-job", "state": "succeeded", "submitted_at": 1}')
    (job / "ckpt" / "step-1" / "model.bin").write_bytes(os.urandom(a.large_mb << 20))
    (job / "ckpt" / "step-1" / ".gpujob-complete").write_text("")
    print(f"tree: {a.small} small files, {nbytes / 1e6:.1f} MB; large file {a.large_mb} MB", flush=True)

    def bench_host(port: int) -> Host:
        return Host(name="bench", hostname="127.0.0.1", port=port, user=user, root=str(root), connect_timeout=10,
                    agent_python=sys.executable)

    def agent(port: int) -> Agent:
        host = bench_host(port)
        return Agent(connect(host), host)

    agent(sshd.port).call("hello")  # install the agent once

    def ssh_e(port: int) -> str:
        kept = f" -o ControlMaster=auto -o ControlPath={work}/cm-%C -o ControlPersist=600" if a.kept else ""
        return (f"ssh -p {port} -i {key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                f"-o LogLevel=ERROR{kept}")

    def run(cmd: list[str]) -> None:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    cpu: dict[str, tuple[float, float]] = {}

    def timed(fn, tool: str = "") -> float:
        """Seconds; and into ``cpu[tool]`` the CPU seconds it cost (load-proof, unlike the time): the
        laptop's (this process and the tools it ran) and the instance's (the sshd sessions it ended,
        reaped by the listener, agents and ``scp -t`` included)."""
        os.sync()  # no tool flushes the page cache another one left dirty
        far0, here0 = _far_cpu(sshd), _here_cpu()
        t = time.monotonic()
        fn()
        dt = time.monotonic() - t
        time.sleep(0.3)  # the listener reaps the session that just ended
        cpu[tool] = (_here_cpu() - here0, _far_cpu(sshd) - far0)
        return dt

    rows = []
    links = [("loopback", None)] if "lo" in a.links.split(",") else []
    if "slow" in a.links.split(","):
        links.append((f"{a.rtt_ms:.0f} ms RTT / {a.mbit:.0f} Mbit", (a.rtt_ms / 2, a.mbit)))
    cases = set(a.cases.split(","))

    def one_link(link_name: str, shape: tuple | None) -> None:
        link = Link(sshd.port, shape[0], shape[1]) if shape else None
        slug = "slow" if shape else "lo"
        port = link.port if link else sshd.port
        for d in ("gp", "rs", "scp"):
            shutil.rmtree(root / "projects" / d, ignore_errors=True)
            shutil.rmtree(root / "up" / d, ignore_errors=True)
        (root / "up").mkdir(parents=True, exist_ok=True)
        rs_dst = f"{user}@127.0.0.1:{root}/projects/rs/code/"
        scp_dst = f"{user}@127.0.0.1:{root}/projects/scp/code"
        spec = JobSpec(name="gp", run="true", workdir=str(src))
        rts = {}
        if a.kept:  # both tools' kept connections open before timing: gpujob's daemon, OpenSSH's master
            agent(port).call("hello")
            from gpujob.transport import mux

            # a first command starts the daemon only as its process exits (or 5 s into it): this
            # process goes on, so it is started here and listening before the first timed sync
            if not mux.start(bench_host(port)):
                raise SystemExit("gpujob's kept connection did not start")
            run(ssh_e(port).split() + [f"{user}@127.0.0.1", "true"])

        def gp_sync() -> None:
            rts["rt"] = sync_job(agent(port), spec, "gp").round_trips

        def rsync_up(s: Path = src, dst: str = rs_dst) -> None:
            run(["rsync", "-az", "-e", ssh_e(port), f"{s}/", dst])

        def scp_up(s: Path = src, dst: str = scp_dst) -> None:
            run(["scp", "-O", "-q", "-r", "-P", str(port), "-i", key, "-o", "StrictHostKeyChecking=no", "-o",
                 "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", str(s), dst])

        def case(name: str, gp, rs, sc) -> None:
            cpu.clear()
            tg, tr = timed(gp, "gpujob"), timed(rs, "rsync")
            ts = timed(sc, "scp") if sc and not a.no_scp else float("nan")
            rows.append((link_name, name, tg, tr, ts, rts.get("rt", "")))
            rts.clear()
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process: gpujob's laptop side
            print(f"{link_name:>22} | {name:<28} gpujob {tg:6.2f}s  rsync {tr:6.2f}s  scp {ts:6.2f}s  "
                  f"(peak memory so far {peak:.0f} MB)", flush=True)
            print(" " * 25 + "CPU s (laptop + instance): " + ",  ".join(
                f"{k} {v[0]:.2f} + {v[1]:.2f}" for k, v in cpu.items()), flush=True)

        (root / "projects" / "scp").mkdir(parents=True, exist_ok=True)
        (root / "projects" / "rs").mkdir(parents=True, exist_ok=True)
        if "small" in cases:
            case(f"{a.small} small files, first", gp_sync, rsync_up, scp_up)
        # scp has no incremental mode: a resync resends the whole tree (the first row's time)
        if "noop" in cases:
            case("no-op resync", gp_sync, rsync_up, None)
        if "one" in cases:
            f = next(src.rglob("file_7.py"))
            f.write_text(f.read_text() + "# edited\n")
            case("one file changed", gp_sync, rsync_up, None)

        big_spec = JobSpec(name="gp", run="true", workdir=str(work / "empty"), data=[])
        (work / "empty").mkdir(exist_ok=True)
        from gpujob.config.spec import DataEntry

        big_spec.data = [DataEntry(str(big / "model.bin"), f"bench-{slug}/model.bin")]

        def gp_big() -> None:
            rts["rt"] = sync_job(agent(port), big_spec, "big").round_trips

        if "up" in cases:
            case(f"{a.large_mb} MB file up", gp_big,
                 lambda: rsync_up(big, f"{user}@127.0.0.1:{root}/up/rs-{slug}/"),
                 lambda: scp_up(big / "model.bin", f"{user}@127.0.0.1:{root}/up/scp-{slug}.bin"))
        down = work / "down" / slug

        def gp_down() -> None:
            rts["rt"] = 1  # one exec channel: the manifest out, the wanted list in, the stream out
            pull(agent(port), "bench-job", down / "gp", "latest", include=["ckpt/*"])
        ck = f"{root}/jobs/bench-job/ckpt/step-1/model.bin"
        if "down" in cases:
            case(f"{a.large_mb} MB checkpoint down",
                 gp_down,
                 lambda: run(["rsync", "-az", "-e", ssh_e(port), f"{user}@127.0.0.1:{ck}", str(down / "rs.bin")]),
                 lambda: run(["scp", "-O", "-q", "-P", str(port), "-i", key, "-o", "StrictHostKeyChecking=no", "-o",
                              "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"{user}@127.0.0.1:{ck}",
                              str(down / "scp.bin")]))
        (down).mkdir(parents=True, exist_ok=True)
        if link:
            link.close()

    for link_name, shape in links:
        one_link(link_name, shape)
    return rows


def _report(a, rows) -> None:
    lines = ["| link | case | gpujob s | rsync -az s | scp s | gpujob/rsync | gpujob/scp | gpujob round trips |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for ln, name, tg, tr, ts, rt in rows:
        sc = "(resends all)" if ts != ts else f"{ts:.2f}"
        ratio = "–" if ts != ts else f"{tg / ts:.2f}"
        lines.append(f"| {ln} | {name} | {tg:.2f} | {tr:.2f} | {sc} | {tg / tr:.2f} | {ratio} | {rt} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        Path(a.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
