"""``gpujob tunnel``: a real TensorBoard over the real sshd, any port of a host, a link that drops."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, run_cli
from tests.gpujob.usecases.test_tail import _proxied_host
from tests.helpers import needs, remote_root, submit, wait_for, wait_state, write_job


def _tunnel(*args: str) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_LINK_PROBE="1")
    p = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "tunnel", *args, "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    assert p.stdout
    text = ""
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"tunnel exited {p.wait()}: {p.stderr.read() if p.stderr else ''}")
        text += line
        try:
            return p, json.loads(text)
        except ValueError:
            continue
    raise AssertionError("the tunnel printed no JSON")


def _get(url: str, timeout: float = 60, want: str | None = None) -> str:
    deadline = time.time() + timeout
    last: object = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read().decode()
            if want is None or want in body:
                return body
            last = body
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{url}: {last}")


def _stop(p: subprocess.Popen) -> int:
    p.send_signal(signal.SIGINT)
    try:
        return p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        return -9


@contextlib.contextmanager
def _tensorboard_tunnel(*args: str) -> Iterator[dict]:
    """``_tunnel`` to a job's TensorBoard; then the tunnel stops, and TensorBoard too (it outlives tunnels)."""
    p, info = _tunnel(*args)
    try:
        yield info
    finally:
        _stop(p)
        pid = (info.get("tensorboard") or {}).get("pid")
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _write_events(logdir: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(logdir))
    for step in range(1, 4):
        value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / step)
        w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
    w.close()


def test_tensorboard_through_tunnel_survives_a_drop(ssh_host: str, sshd, tmp_path: Path) -> None:
    needs("tensorboard")
    job = write_job(tmp_path, "tbjob", "print('hi')\n", "python main.py")
    job_id = submit(ssh_host, job)["job_id"]
    jdir = tmp_path / "remote-root" / "jobs" / job_id
    record = tmp_path / "remote-root" / "tensorboard" / f"{job_id}.json"  # not under the job's folder: not the job's
    _write_events(jdir / "tb" / "run1")
    proxy = _proxied_host(sshd.port, tmp_path)
    remote_port = free_port()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    busy = taken.getsockname()[1]
    p, info = _tunnel(job_id, "--host", ssh_host, "--remote-port", str(remote_port), "--local-port", str(busy))
    try:
        assert info["job_id"] == job_id and info["tensorboard"]["started"] is True
        assert info["local_port"] != busy and "taken" in info["note"]
        runs = json.loads(_get(info["url"] + "data/runs", want="run1"))
        assert "tb/run1" in runs  # the run named by where it lies under the job
        proxy.kill()  # the link drops; the tunnel notices and listens again on the same port
        time.sleep(1.5)
        proxy.start()
        assert "tb/run1" in json.loads(_get(info["url"] + "data/runs", timeout=60, want="run1"))
        assert _stop(p) == 130
        # a second tunnel finds TensorBoard serving and does not start another
        p, info2 = _tunnel(job_id, "--host", ssh_host, "--remote-port", str(remote_port))
        assert info2["tensorboard"]["started"] is False
        assert _stop(p) == 130
        # TensorBoard outlives the tunnel (AutoDL's service URL) until told to stop
        pid = json.loads(record.read_text())["pid"]
        assert Path(f"/proc/{pid}").exists()
        r = run_cli("tunnel", job_id, "--host", ssh_host, "--stop", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["stopped"] is True
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        r = run_cli("tunnel", job_id, "--host", ssh_host, "--stop", "--json")
        assert json.loads(r.stdout)["stopped"] is False
    finally:
        if p.poll() is None:
            p.kill()
        proxy.kill()
        taken.close()
        tb = json.loads(record.read_text())
        try:
            os.killpg(tb["pid"], signal.SIGKILL)
        except OSError:
            pass


def test_any_port_of_a_host(ssh_host: str) -> None:
    """HOST instead of JOB: a plain forward (Jupyter's 8888, here a small HTTP server)."""
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello through the tunnel")

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    p, info = _tunnel(ssh_host, "--remote-port", str(srv.server_address[1]))
    try:
        assert "job_id" not in info
        assert _get(info["url"], timeout=20) == "hello through the tunnel"
    finally:
        _stop(p)
        srv.shutdown()


def test_tensorboard_missing_says_how_to_install(tmp_path: Path) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("needs a system python3 without tensorboard")
    r = subprocess.run(["/usr/bin/python3", "-c", "import tensorboard"], capture_output=True)
    if r.returncode == 0:
        pytest.skip("the system python3 has tensorboard")
    # the job runs /usr/bin/python3; pyenv's shims (on this image's login PATH) find nothing for "system"
    job = write_job(tmp_path, "notb", "", "true", env={"GPUJOB_PATH_PREFIX": "/usr/bin", "PYENV_VERSION": "system",
                                                        "PIP_INDEX_URL": f"http://127.0.0.1:{free_port()}/simple",
                                                        "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(tmp_path),
                                                        "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"})
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("succeeded", "failed"))
    r = run_cli("tunnel", job_id, "--host", "local", "--remote-port", str(free_port()))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "TensorBoard is not installed" in r.stderr and "pip install tensorboard" in r.stderr
    assert "nor on this host's PATH" in r.stderr and f"gpujob tunnel {job_id} --install" in r.stderr
    assert "--pip-index-url" in r.stderr
    # the offered install uses the host's pip settings: an index that does not answer fails clearly
    r = run_cli("tunnel", job_id, "--host", "local", "--remote-port", str(free_port()), "--install", timeout=300)
    assert r.returncode == 2 and "pip could not install TensorBoard" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert (Path(os.environ["GPUJOB_LOCAL_ROOT"]) / "tools" / "tensorboard" / "bin" / "python").exists()


def test_tensorboard_runs_with_the_jobs_venv_python(ssh_host: str, tmp_path: Path) -> None:
    """A job whose ``python:`` is a venv: TensorBoard starts with that interpreter, not the login shell's."""
    needs("tensorboard")
    venv = tmp_path / "jobvenv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    job = write_job(tmp_path, "venvtb", "import sys; print('prefix', sys.prefix)\n", "python main.py",
                    python=str(venv / "bin" / "python"))
    job_id = submit(ssh_host, job)["job_id"]
    wait_state(ssh_host, job_id, ("succeeded",))
    jdir = tmp_path / "remote-root" / "jobs" / job_id
    assert f"prefix {venv}" in (jdir / "output.log").read_text()  # the job itself ran in the venv
    _write_events(jdir / "tb" / "run1")
    with _tensorboard_tunnel(job_id, "--host", ssh_host, "--remote-port", str(free_port())) as info:
        assert info["tensorboard"]["via"] == {"kind": "job", "path": str(venv / "bin" / "python")}
        assert "tb/run1" in json.loads(_get(info["url"] + "data/runs", want="run1"))
        argv = Path(f"/proc/{info['tensorboard']['pid']}/cmdline").read_bytes().split(b"\0")
        assert argv[0].decode() == str(venv / "bin" / "python") and b"tensorboard.main" in argv


def test_nothing_listening_on_the_host_port() -> None:
    r = run_cli("tunnel", "local", "--remote-port", str(free_port()))
    assert r.returncode == 2 and "nothing listens on port" in r.stderr and "jupyter" in r.stderr


def _wheel_of_installed(name: str, dest: Path) -> Path:
    """A wheel of the installed distribution ``name`` (pure Python), built from its files: a real
    package for pip to install with no index and no network."""
    import base64
    import hashlib
    import importlib.metadata
    import zipfile

    dist = importlib.metadata.distribution(name)
    info = f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}.dist-info"
    whl = dest / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-py3-none-any.whl"
    dest.mkdir(parents=True, exist_ok=True)
    record = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for f in dist.files or []:
            rel = str(f)
            if rel.startswith("..") or "__pycache__" in rel or rel.split("/")[-1] in ("RECORD", "INSTALLER", "REQUESTED",
                                                                                      "direct_url.json"):
                continue
            data = Path(str(dist.locate_file(f))).read_bytes()
            z.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(data)}")
        z.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return whl


def test_install_puts_tensorboard_in_the_tools_environment(ssh_host: str, tmp_path: Path) -> None:
    """``--install`` when neither the job's interpreter nor the host's PATH has TensorBoard: a venv in
    ``<root>/tools/tensorboard`` that sees the image's packages serves it, whether the image's python3
    has TensorBoard already (pip leaves the venv as it is) or pip installs it there (here from a
    local wheel: no index, no network)."""
    needs("tensorboard")
    venv = tmp_path / "bare"  # the jobs' interpreter: no TensorBoard, and the only python on their PATH
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    wheels = tmp_path / "wheels"
    _wheel_of_installed("tensorboard", wheels)
    tools = tmp_path / "remote-root" / "tools" / "tensorboard"
    # pyenv's shims find no `tensorboard` for "system"; pip reads only what is set here
    env = {"GPUJOB_PATH_PREFIX": str(venv / "bin"), "PYENV_VERSION": "system", "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    # first an image whose python3 has TensorBoard; then one without: pip installs it (its dependencies
    # are the image's, as on an instance)
    for name, extra in (("tbimage", {}), ("tbpip", {"PIP_NO_DEPS": "1", "PIP_IGNORE_INSTALLED": "1"})):
        job = write_job(tmp_path, name, "", "true", python=str(venv / "bin" / "python"), env={**env, **extra})
        job_id = submit(ssh_host, job)["job_id"]
        wait_state(ssh_host, job_id, ("succeeded",))
        _write_events(tmp_path / "remote-root" / "jobs" / job_id / "tb" / "run1")
        if name == "tbimage":
            r = run_cli("tunnel", job_id, "--host", ssh_host, "--remote-port", str(free_port()))
            assert r.returncode == 2 and f"gpujob tunnel {job_id} --install" in r.stderr, r.stdout + r.stderr
        with _tensorboard_tunnel(job_id, "--host", ssh_host, "--remote-port", str(free_port()), "--install") as info:
            assert info.get("installed", {}).get("path") == str(tools), info
            assert info["tensorboard"]["via"] == {"kind": "tools", "path": str(tools / "bin" / "python")}
            assert "tb/run1" in json.loads(_get(info["url"] + "data/runs", want="run1"))
        pip_put = list((tools / "lib").glob("python3*/site-packages/tensorboard/main.py"))
        assert bool(pip_put) == (name == "tbpip")


@pytest.mark.slow
def test_a_port_serving_another_jobs_tensorboard_is_not_shown_as_this_jobs(tmp_path: Path) -> None:
    """Job A's TensorBoard holds the port: B's tunnel checks /data/environment, starts B's own on a
    free port and says so; `tunnel B --stop` stops B's own; Ctrl-C exits 130."""
    needs("tensorboard")
    ids = [submit("local", write_job(tmp_path, n, "print('hi')\n", "python main.py"))["job_id"] for n in ("tba", "tbb")]
    for j in ids:
        wait_state("local", j, ("succeeded",))
    a, b = ids
    port = free_port()
    pids = []
    try:
        p, info_a = _tunnel(a, "--remote-port", str(port))
        pids.append(info_a["tensorboard"]["pid"])
        assert _stop(p) == 130
        p, info_b = _tunnel(b, "--remote-port", str(port))
        pids.append(info_b["tensorboard"]["pid"])
        assert info_b["tensorboard"]["started"] is True and info_b["remote_port"] != port
        assert f"port {port} on local serves another log folder" in info_b["note"] and a in info_b["note"]
        env = json.loads(_get(info_b["url"] + "data/environment"))
        assert f"tb:{remote_root(tmp_path, 'local')}/jobs/{b}/tb," in env["data_location"], env
        assert _stop(p) == 130
        p, again = _tunnel(b, "--remote-port", str(port))  # B's own is found again, verified, not A's
        assert again["tensorboard"]["started"] is False and again["remote_port"] == info_b["remote_port"]
        assert _stop(p) == 130
        r = run_cli("tunnel", b, "--stop", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["stopped"] is True, r.stdout + r.stderr
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


HF_LIKE = """
import os, pathlib, time
hold, write = pathlib.Path(os.environ["HOLD"]), pathlib.Path(os.environ["WRITE"])
runs = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"]) / "runs"
if not runs.exists():  # the first attempt (a resumed one finds its events there)
    from torch.utils.tensorboard import SummaryWriter
    while not write.exists():  # the tunnel starts before any event file is written
        time.sleep(0.1)
    # where an HF Trainer with output_dir=$GPUJOB_CKPT_DIR writes: output_dir/runs/<date>_<host>
    w = SummaryWriter(str(runs / "Dec07_10-00-00_box"))
    for step in range(1, 4):
        w.add_scalar("train/loss", 1.0 / step, step)
    w.close()
while hold.exists():
    time.sleep(0.1)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_tensorboard_is_the_users_and_serves_hf_events(tmp_path: Path) -> None:
    """An HF-Trainer-like job writes under ckpt/runs/ (no job-file setting): its scalars are served under
    their own tag; the tunnel's TensorBoard outlives a stop and the job's normal end, until
    `tunnel --stop`; `gc` ends the one of a job it removes."""
    needs("tensorboard", "torch")
    hold, write = tmp_path / "hold", tmp_path / "write"
    hold.touch()
    job = write_job(tmp_path, "hflike", HF_LIKE, "python main.py", env={"HOLD": str(hold), "WRITE": str(write)})
    job_id = submit("local", job)["job_id"]
    wait_state("local", job_id, ("running",))
    p, info = _tunnel(job_id, "--remote-port", str(free_port()))
    tb_pid = info["tensorboard"]["pid"]
    try:
        assert "no event files of" in info["note"] and "looked in tb, code (4 levels), ckpt/runs" in info["note"]
        assert "ckpt/runs" in info["tensorboard"]["served"]
        write.touch()  # written after TensorBoard started: it finds them on its next reload, no restart
        tags = json.loads(_get(info["url"] + "data/plugin/scalars/tags", want="train/loss"))
        assert list(tags) == ["ckpt/runs/Dec07_10-00-00_box"] and "train/loss" in tags["ckpt/runs/Dec07_10-00-00_box"]
        r = run_cli("stop", job_id, "--json")
        assert r.returncode == 0, r.stderr
        wait_state("local", job_id, ("stopped",))
        assert _alive(tb_pid) and "train/loss" in _get(info["url"] + "data/plugin/scalars/tags")
        r = run_cli("resume", job_id, "--json")
        assert r.returncode == 0, r.stderr
        wait_state("local", job_id, ("running",))
        hold.unlink()  # this attempt ends on its own
        wait_state("local", job_id, ("succeeded",))
        assert _alive(tb_pid) and "train/loss" in _get(info["url"] + "data/plugin/scalars/tags")
        assert _stop(p) == 130
        # a run in a folder of its own, written after TensorBoard started: the next tunnel starts the job's
        # TensorBoard again on its port, reading that folder too
        _write_events(remote_root(tmp_path, "local") / "jobs" / job_id / "code" / "results" / "runs" / "extra")
        p, again = _tunnel(job_id, "--remote-port", str(info["remote_port"]))
        assert again["tensorboard"]["started"] is True and again["remote_port"] == info["remote_port"]
        assert not _alive(tb_pid) and "code/results/runs" in again["tensorboard"]["served"]
        tb_pid = again["tensorboard"]["pid"]
        tags = json.loads(_get(again["url"] + "data/plugin/scalars/tags", want="results"))
        assert tags["code/results/runs/extra"] and "train/loss" in tags["ckpt/runs/Dec07_10-00-00_box"]
        assert _stop(p) == 130
        r = run_cli("tunnel", job_id, "--stop")
        assert r.returncode == 0 and f"stopped TensorBoard of {job_id} (pid {tb_pid})" in r.stdout, r.stdout + r.stderr
        wait_for(lambda: not _alive(tb_pid), 10, "TensorBoard to end")
        p, info = _tunnel(job_id, "--remote-port", str(free_port()))
        tb_pid = info["tensorboard"]["pid"]
        assert info["tensorboard"]["started"] is True and "note" not in info
        assert _stop(p) == 130
        r = run_cli("gc", "--older-than", "0s", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["tensorboards_stopped"] == [job_id], r.stdout + r.stderr
        assert not (remote_root(tmp_path, "local") / "jobs" / job_id).exists()
        assert not _alive(tb_pid) and not list((remote_root(tmp_path, "local") / "tensorboard").iterdir())
    finally:
        if p.poll() is None:
            p.kill()
        with contextlib.suppress(OSError):
            os.killpg(tb_pid, signal.SIGKILL)
