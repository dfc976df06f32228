"""The Python API (docs/api.md): its notebook example runs as written, its results are the CLI's --json."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from gpujob.errors import GpujobError
from tests.conftest import REPO, run_cli
from tests.e2e.test_first_path import wait_state, write_job


def _example() -> str:
    """The code block after the ``api-example`` marker in docs/api.md."""
    text = (REPO / "docs" / "api.md").read_text()
    m = re.search(r"<!-- api-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/api.md lost its marked example"
    return m.group(1)


def test_docs_example_runs(tmp_path: Path) -> None:
    """The notebook example, run from a copy of the checkout's examples/ on the local host."""
    shutil.copytree(REPO / "examples" / "tiny", tmp_path / "examples" / "tiny")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", _example()], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-2000:]
    out = r.stdout
    job_id = re.search(r"submitted (\S+) to local synced (\d+) file", out).group(1)
    assert "state succeeded exit code 0" in out
    assert re.search(r"step 200 loss \d", out) and "newest checkpoint step-200" in out
    assert "done\n" in out  # the log's last lines
    dest = tmp_path / "pulls" / job_id
    assert f"pulled ckpt/step-200 to pulls/{job_id} (" in out
    assert (dest / "ckpt" / "step-200" / "state.pt").is_file()
    assert not (dest / "ckpt" / "step-150").exists()  # --latest: only the newest checkpoint
    # the job index knows it, as after gpujob submit
    assert json.loads(run_cli("status", job_id, "--json").stdout)["state"] == "succeeded"


def _without_clock(doc: dict) -> dict:
    """A job document less the host's clock at the time of asking (``now``): all else must match."""
    out = {k: v for k, v in doc.items() if k != "now"}
    if "jobs" in out:
        out["jobs"] = [_without_clock(j) for j in out["jobs"]]
    return out


def _as_printed(doc: dict) -> dict:
    return json.loads(json.dumps(doc, sort_keys=True, default=str))


def test_results_are_the_cli_json(tmp_path: Path) -> None:
    """status and ls: to_json() equals what --json prints for the same finished job."""
    import gpujob

    job_file = write_job(tmp_path, "apijson", "import json, os\nprint('hello')\n"
                         "open(os.environ['GPUJOB_METRICS_FILE'], 'a').write(json.dumps({'step': 1, 'loss': 0.5}) + '\\n')\n",
                         "python main.py")
    with gpujob.Client() as client:
        job = client.submit(str(job_file), host="local")
        assert job.submitted.job_id == job.id and job.submitted.host == "local"
        assert job.submitted.to_json()["sync"]["files_sent"] >= 1
        st = job.wait(timeout=120, poll=0.3)
        assert st.finished and st.state == "succeeded" and st.exit_code == 0
        assert st.metrics["loss"] == 0.5 and st.metrics["step"] == 1

        cli = json.loads(run_cli("status", job.id, "--json").stdout)
        assert _without_clock(_as_printed(job.status().to_json())) == _without_clock(cli)
        assert set(cli) >= {"supervisor_pid", "spec", "series", "cost"}  # agent keys pass through

        listed = client.jobs(host="local")
        cli_ls = json.loads(run_cli("ls", "--host", "local", "--json").stdout)
        assert _without_clock(_as_printed(listed.to_json())) == _without_clock(cli_ls)
        assert [j.job_id for j in listed] == [j["job_id"] for j in cli_ls["jobs"]]
        assert listed.jobs[-1].state == "succeeded" and listed.jobs[-1].host == "local"

        # a result does not change with its document, nor its document with what a caller does to it
        doc = st.to_json()
        doc["state"] = "edited"
        assert st.state == "succeeded" and st.to_json()["state"] == "succeeded"


def test_logs_iterator_follows_and_leaves_cleanly(tmp_path: Path) -> None:
    """logs(follow=True) yields what the job prints as it prints it; leaving the loop ends the stream."""
    import gpujob

    script = "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n"
    job_file = write_job(tmp_path, "ticker", script, "python main.py")
    with gpujob.Client(host="local") as client:
        job = client.submit(str(job_file))
        wait_state("local", job.id, ("running",))
        seen = b""
        for chunk in job.logs(follow=True, lines=None):
            seen += chunk
            if b"tick 3\n" in seen:
                break
        assert seen.startswith(b"==> gpujob") and b"tick 0\ntick 1\ntick 2\ntick 3\n" in seen
        deadline = time.time() + 20  # the agent's log reader for this job goes away
        while _log_followers(job.id) and time.time() < deadline:
            time.sleep(0.2)
        assert not _log_followers(job.id)
        assert job.record().state == "running"  # leaving the log does not touch the job
        assert job.stop(wait=30).state == "stopped"
        # a finished job's log: follow ends by itself, every line there
        whole = b"".join(job.logs(follow=True, lines=None))
        assert b"tick 3\n" in whole and whole.endswith(b"\n")


def _log_followers(job_id: str) -> list[int]:
    """Processes running the agent's ``logs --follow`` for ``job_id``."""
    from remote.core.procs import _cmdline, _parents

    words = {b"logs", b"--follow", job_id.encode()}
    return [pid for pid in _parents() if words <= set(_cmdline(pid).split(b"\0"))]


def test_tunnel_to_a_port_of_local(tmp_path: Path) -> None:
    """client.tunnel: a context manager; the URL it gives reaches the server; it ends with the block."""
    import gpujob

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello.txt").write_text("hello through the tunnel")
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "www"), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with gpujob.Client() as client:
            tunnel = client.tunnel(server.server_address[1], host="local")
            with tunnel as info:
                assert isinstance(info, gpujob.TunnelInfo) and info.host == "local"
                with urllib.request.urlopen(info.url + "hello.txt", timeout=10) as r:
                    assert r.read() == b"hello through the tunnel"
                assert json.loads(json.dumps(info.to_json()))["url"] == info.url
            tunnel.wait()  # returns: the block's end stopped it
            server.shutdown()
            server.server_close()
            try:  # nothing listens there now: the tunnel said so before serving
                with client.tunnel(server.server_address[1], host="local"):
                    raise AssertionError("a tunnel to a closed port came up")
            except GpujobError as e:
                assert "nothing listens on port" in e.cause
    finally:
        server.server_close()


def test_api_is_exported_lazily() -> None:
    """``import gpujob`` loads no API module; the names resolve on first use and match gpujob.api."""
    code = ("import sys, gpujob; assert [m for m in sys.modules if m.startswith('gpujob.')] == ['gpujob.version'], "
            "sorted(m for m in sys.modules if m.startswith('gpujob')); "
            "import gpujob.api as api; assert sorted(gpujob._API) == sorted(api.__all__); "
            "assert all(getattr(gpujob, n) is getattr(api, n) for n in api.__all__); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_wait_outlives_a_dropped_link(ssh_host: str, sshd, tmp_path: Path) -> None:
    """Job.wait over SSH through a proxy that is killed and comes back: it reconnects and sees the end."""
    import gpujob
    from tests.gpujob.usecases.test_tail import _proxied_host

    job_file = write_job(tmp_path, "waiter", "import time\ntime.sleep(6)\nprint('slept')\n", "python main.py")
    proxy = _proxied_host(sshd.port, tmp_path)
    try:
        with gpujob.Client(host=ssh_host) as client:
            job = client.submit(str(job_file))
            assert job.record().state in ("queued", "running")
            proxy.kill()  # every connection to the host drops, and no new one gets through for a while
            done: dict = {}
            waiter = threading.Thread(target=lambda: done.update(st=job.wait(timeout=120, poll=0.5)), daemon=True)
            waiter.start()
            waiter.join(2.0)  # the host stays away for these seconds (wait's calls fail meanwhile)
            proxy.start()
            waiter.join(120)
            assert "st" in done, "wait gave up while the host was away (see the thread's traceback above)"
            assert done["st"].state == "succeeded", done
            assert b"slept\n" in b"".join(job.logs(lines=5))
    finally:
        proxy.kill()
