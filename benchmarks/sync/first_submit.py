"""A first submit of a tree of small files against rsync -az plus one ssh exec, over a real sshd.

    python benchmarks/sync/first_submit.py [--files 3000] [--rounds 3] [--base /tmp/fs-base] [--slow]

Every timed run is a first one: a fresh remote root (the agent installed there before timing, as
once per version), a fresh project name and so no laptop record. gpujob's time is ``gpujob submit
job.yaml --json`` as a user runs it (Python's start, the run ledger's record of the code, its own
SSH connect, the sync, the ``submit`` verb: lease, code snapshot, data view, supervisor start); the yardstick is
``rsync -az`` of the same tree into a fresh folder plus one ``ssh host true``, timed just before it.
With ``--base`` the code of another checkout (``git worktree add /tmp/fs-base HEAD``) takes turns
with this one in every round, the order swapped each round. Between runs everything a submit
left running (the detached reseal, the job's supervisor) is waited for, and the page cache synced.
CPU seconds (the laptop's process and the host's SSH sessions; not the detached processes a
submit leaves) are printed beside the times: on a loaded machine they move less.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child(a: argparse.Namespace) -> None:
    """In the checkout ``a.repo`` (first on sys.path): install the agent under ``a.root`` and keep
    a host profile ``a.project`` naming it (once per version and host: not timed)."""
    sys.path.insert(0, a.repo)
    from gpujob.config.hosts import Host, HostStore
    from gpujob.transport import connect
    from gpujob.transport.agent import Agent

    assert Path(sys.modules["gpujob"].__file__).resolve().is_relative_to(Path(a.repo).resolve())
    host = Host(name=a.project, hostname="127.0.0.1", port=a.port, user=os.environ.get("USER", "root"),
                root=a.root, connect_timeout=10, agent_python=sys.executable)
    HostStore().save(host)
    with Agent(connect(host), host) as ag:
        ag.call("hello")


def cli(repo: str) -> list[str]:
    """``gpujob`` as a user runs it, from the checkout ``repo``."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {repo!r}); from gpujob.cli import main; "
            "sys.exit(main())"]


def quiet(root: str, timeout: float = 60) -> None:
    """Wait until no process names ``root`` (the detached reseal, the job's supervisor)."""
    deadline = time.monotonic() + timeout
    needle = root.encode()
    while time.monotonic() < deadline:
        busy = False
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    if needle in (d / "cmdline").read_bytes():
                        busy = True
                        break
                except OSError:
                    continue
        if not busy:
            return
        time.sleep(0.1)


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", help="another checkout whose code takes turns with this one's")
    ap.add_argument("--slow", action="store_true", help="through the 40 ms / 100 Mbit link emulator")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("repo", "root", "project"):
        ap.add_argument("--" + name, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench import make_small

    from gpujob.config.keys import key_path, public_key_line
    from tests.conftest import start_sshd, stop_sshd

    work = Path(tempfile.mkdtemp(prefix="gpujob-fsub-"))
    env = dict(os.environ, GPUJOB_CONFIG_DIR=str(work / "config"), GPUJOB_NO_SSH_AGENT="1", GPUJOB_MUX="0")
    os.environ.update(env)
    src = work / "src"
    nbytes = make_small(src, a.files)
    (src / "train.py").write_text("print('done')\n")
    (src / "job.yaml").write_text("name: bench\nrun: python3 train.py\n")
    variants = [("this", str(REPO))] + ([("base", str(Path(a.base).resolve()))] if a.base else [])
    # bytecode kept, as an installed Python has it (this box sets PYTHONDONTWRITEBYTECODE and some
    # of its .pyc files are stale: every run compiled 300 modules again, 1.3-2.7 s), in a folder of
    # the benchmark's own; filled by one untimed submit of each checkout first
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    sshd = start_sshd(work / "sshd")
    link = None
    try:
        sshd.authorize(public_key_line())
        port = sshd.port
        if a.slow:
            from linkemu import LinkProcess

            link = LinkProcess(sshd.port, 20, 100)
            port = link.port
        ssh = ["ssh", "-p", str(port), "-i", str(key_path()), "-o", "StrictHostKeyChecking=no", "-o",
               "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
        user = os.environ.get("USER", "root")
        print(f"tree: {a.files} small files, {nbytes / 1e6:.1f} MB; load {os.getloadavg()[0]:.1f}", flush=True)
        from bench import _far_cpu

        def timed(cmd: list[str], **kw: object) -> tuple[float, float, bytes]:
            """(seconds, CPU seconds of the laptop's process and the host's sessions, stdout); the
            two CPU parts in ``split`` too."""
            os.sync()  # nobody flushes what another left dirty
            far0, here0 = _far_cpu(sshd), _children_cpu()
            t = time.monotonic()
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, **kw).stdout  # type: ignore[call-overload]
            dt = time.monotonic() - t
            time.sleep(0.3)  # the listener reaps the session that just ended
            split[:] = [_children_cpu() - here0, _far_cpu(sshd) - far0]
            return dt, split[0] + split[1], out

        split: list[float] = [0.0, 0.0]

        rows: list[dict[str, float | str]] = []
        n = 0
        for _, repo in variants:  # the warm-up: bytecode, and the page cache of both checkouts
            n += 1
            subprocess.run([sys.executable, __file__, "--child", "--repo", repo, "--root", str(work / f"root{n}"),
                            "--project", f"p{n}", "--port", str(port)], check=True, env=env)
            timed(cli(repo) + ["submit", str(src / "job.yaml"), "--host", f"p{n}", "--set", f"name=p{n}", "--json"],
                  env=env)
            quiet(str(work / f"root{n}"))
            shutil.rmtree(work / f"root{n}", ignore_errors=True)
        for r in range(a.rounds):
            order = variants if r % 2 == 0 else variants[::-1]
            for name, repo in order:
                n += 1
                dst = work / f"rs{n}"
                dst.mkdir()  # as the agent's install made gpujob's root
                t_rs, c_rs, _ = timed(["rsync", "-az", "-e", " ".join(ssh), f"{src}/", f"{user}@127.0.0.1:{dst}/code/"])
                t_ssh, c_ssh, _ = timed(ssh + [f"{user}@127.0.0.1", "true"])
                root = str(work / f"root{n}")
                subprocess.run([sys.executable, __file__, "--child", "--repo", repo, "--root", root,
                                "--project", f"p{n}", "--port", str(port)], check=True, env=env)
                t_gp, c_gp, out = timed(cli(repo) + ["submit", str(src / "job.yaml"), "--host", f"p{n}", "--set",
                                                     f"name=p{n}", "--json"], env=env)
                here, far = split
                sent = json.loads(out.decode()).get("sync", {}).get("files_sent", 0)
                if sent < a.files:
                    raise SystemExit(f"{name}: only {sent} files sent: not a first submit")
                quiet(root)
                load = os.getloadavg()[0]
                rows.append({"name": name, "gp": t_gp, "yard": t_rs + t_ssh, "cgp": c_gp, "cyard": c_rs + c_ssh})
                print(f"round {r + 1} {name:>4}: gpujob {t_gp:.2f} s ({here:.2f} + {far:.2f} s CPU), rsync {t_rs:.2f} s + ssh "
                      f"{t_ssh:.2f} s ({c_rs + c_ssh:.2f} s CPU) -> {t_gp / (t_rs + t_ssh):.2f}x, CPU "
                      f"{c_gp / (c_rs + c_ssh):.2f}x   (load {load:.1f})", flush=True)
                shutil.rmtree(root, ignore_errors=True)
                shutil.rmtree(dst, ignore_errors=True)
        print("\n| code | gpujob s | rsync + ssh s | time ratio, median (min–max) | CPU ratio, median (min–max) |\n"
              "|---|---:|---:|---|---|")
        for name, _ in variants:
            mine = [x for x in rows if x["name"] == name]
            tr = [float(x["gp"]) / float(x["yard"]) for x in mine]
            cr = [float(x["cgp"]) / float(x["cyard"]) for x in mine]
            print(f"| {name} | {statistics.median(float(x['gp']) for x in mine):.2f} | "
                  f"{statistics.median(float(x['yard']) for x in mine):.2f} | {statistics.median(tr):.2f} "
                  f"({min(tr):.2f}–{max(tr):.2f}) | {statistics.median(cr):.2f} ({min(cr):.2f}–{max(cr):.2f}) |")
    finally:
        if link:
            link.close()
        stop_sshd(sshd)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
