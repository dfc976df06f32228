"""A job's TensorBoard: started on the folders holding its event files (remote/view/tblogdir.py; with
the job's interpreter, the host's, or gpujob's tools environment, where ``install`` puts one), found
again when it already serves, and stopped (``tunnel --stop``, ``rm`` and ``gc`` end it); ``port``
says whether something listens and AutoDL's URL.

It is the user's, not the job's: its record and log lie in ``<root>/tensorboard/`` (not under the
job's folder, where a process holding a file open for writing is the job's: remote/stopping/find.py),
in a session of its own, so a stop or the job's end leaves it serving."""

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from remote.core import procs
from remote.core.errors import AgentError
from remote.core.layout import JobDir, Root, read_json, write_json
from remote.env.jobenv import PATH_PREFIX
from remote.jobs.store import resolve


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def autodl_url(port: int) -> Optional[str]:
    """The AutoDL custom-service URL for ``port`` (6006/6008), from our or PID 1's environment."""
    key = "AutoDLService{}URL".format(port)
    if os.environ.get(key):
        return os.environ[key]
    try:
        with open("/proc/1/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(key.encode() + b"="):
                    return item.split(b"=", 1)[1].decode("utf-8", "replace") or None
    except OSError:
        pass
    return None


def tb_dir(job: JobDir) -> str:
    tb = job.job_spec().tensorboard_logdir
    return str((job.code / tb).resolve()) if tb else str(job.tb)


def _files(root: Root, job_id: str) -> Path:
    """``<root>/tensorboard/<job>``: its ``.json`` record (pid, port, what it serves) and ``.log``."""
    return root.root / "tensorboard" / job_id


def _record(root: Root, job: JobDir) -> Dict[str, object]:
    """The record of the job's TensorBoard (an older agent kept it in ``<job>/tensorboard.json``)."""
    doc = read_json(_files(root, job.id).with_suffix(".json"), None)
    if not isinstance(doc, dict):
        doc = read_json(job.path / "tensorboard.json", None)
    return doc if isinstance(doc, dict) else {}


# which TensorBoard serves a job: the job's own interpreter (``python:`` and its PATH), then any
# ``tensorboard`` that runs on the host's login PATH, then gpujob's tools environment
TB_PICK = """
py="${GPUJOB_PYTHON:-$(command -v python || command -v python3)}"
if [ -n "$py" ] && "$py" -c 'import tensorboard' >/dev/null 2>&1; then
  echo "gpujob-tb job $py"; exec "$py" -m tensorboard.main "$@"
fi
tb="$(command -v tensorboard)"
if [ -n "$tb" ] && "$tb" --version >/dev/null 2>&1; then echo "gpujob-tb host $tb"; exec "$tb" "$@"; fi
t="$GPUJOB_TB_TOOLS/bin/python"
if [ -x "$t" ] && "$t" -c 'import tensorboard' >/dev/null 2>&1; then  # it may see the image's own copy
  echo "gpujob-tb tools $t"; exec "$t" -m tensorboard.main "$@"
fi
echo "gpujob-tb none ${py:-no-python}"; exit 127
"""
# a venv (seeing the image's packages) that gpujob installs TensorBoard into on request; where
# the image's python3 has it already, pip leaves the venv without it and the venv's python serves
TB_INSTALL = """
py="$(command -v python3 || command -v python)"
[ -n "$py" ] || { echo "no python3 on the login shell's PATH"; exit 127; }
[ -x "$GPUJOB_TB_TOOLS/bin/python" ] || "$py" -m venv --system-site-packages "$GPUJOB_TB_TOOLS" || exit $?
exec "$GPUJOB_TB_TOOLS/bin/python" -m pip install --disable-pip-version-check tensorboard
"""


def tb_tools(root: Root) -> Path:
    return root.root / "tools" / "tensorboard"


def job_env(root: Root, job: JobDir) -> Dict[str, str]:
    """What the job's run command saw (host env, job env, its interpreter's PATH), without gpujob's own."""
    from remote.env import jobenv

    spec = job.job_spec()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOB_") and k != "PYTHONPATH"}
    env.update(spec.host_env)
    env.update(spec.env)
    env.update(jobenv.load(job))
    env["GPUJOB_TB_TOOLS"] = str(tb_tools(root))
    return env


def install_tensorboard(root: Root, ref: str, timeout: float = 900.0) -> Mapping[str, object]:
    """pip-install TensorBoard into ``<root>/tools/tensorboard`` with the host's pip and proxy settings."""
    from remote.env import provision

    job = root.job(resolve(root, ref))
    env = job_env(root, job)
    if provision.turbo_mode(env):
        env.update(provision.turbo_env(env))
    tools = tb_tools(root)
    tools.parent.mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run(["bash", "-lc", PATH_PREFIX + TB_INSTALL], env=env, cwd=str(root.root),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AgentError("installing TensorBoard took over {:.0f} s".format(timeout),
                              "check the host's network (gpujob doctor), then retry", "tb_install") from None
    out = res.stdout.decode("utf-8", "replace")
    if res.returncode != 0:
        raise AgentError("pip could not install TensorBoard into {}: {}".format(tools, out.strip()[-600:]),
                              "set a reachable index: gpujob host set HOST --pip-index-url URL "
                              "(or --network-turbo true on AutoDL), then retry", "tb_install")
    return {"installed": True, "path": str(tools), "pip_index_url": _without_credentials(env.get("PIP_INDEX_URL"))}


def _without_credentials(url: Optional[str]) -> Optional[str]:
    """An index URL as it may be shown: ``https://user:token@host/`` loses its ``user:token@``."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def tensorboard(root: Root, ref: str, port: int, wait: float = 60.0) -> Mapping[str, object]:
    """Start TensorBoard on the job's event folders on ``port`` unless it serves there already.

    Detached (own session), with the job's interpreter (its ``python:`` and PATH, in a login
    shell), else the host's ``tensorboard``, else gpujob's tools environment. Returns what
    serves the port (``via``), the folders it serves, a note when no event file is there yet,
    and the AutoDL URL if exposed. This job's TensorBoard serving fewer folders than there are
    now (a run written since) is started again on its port.
    """
    from remote.view import tblogdir

    job_id = resolve(root, ref)
    job = root.job(job_id)
    args, names, note = tblogdir.arguments(job)
    logdir = args[1]  # what /data/environment answers as data_location
    shown = {"served": names, "note": note}  # type: Dict[str, object]
    info = _record(root, job)
    own_port, own_pid = _int(info.get("port")), _int(info.get("pid"))
    busy = None  # type: Optional[Dict[str, object]]
    for p_ in ([own_port] if own_port and own_port != port else []) + [port]:
        if not listening(p_):
            continue
        serves = serves_logdir(p_)
        if serves is not None and (serves == logdir or _same_dir(serves, logdir)):  # this job's curves, not another's
            return dict(shown, job_id=job_id, port=p_, started=False, logdir=logdir, pid=own_pid,
                        via=info.get("via"), autodl_url=autodl_url(p_), verified=True)
        if serves is not None and serves == info.get("logdir") and own_pid \
                and _runs_tensorboard(own_pid, info.get("started_at")):
            stop_tensorboard(root, job_id)  # this job's own, started before the folders it serves now were written
            port, busy = p_, None
            break
        if p_ == port:
            busy = {"port": port, "serves": serves}
    if busy is not None:  # another job's TensorBoard (or another server): this job's own on a free port
        port = _free_port(port + 1)
    url = autodl_url(port)
    Path(tb_dir(job)).mkdir(parents=True, exist_ok=True)
    env = job_env(root, job)
    bind = "0.0.0.0" if url else "127.0.0.1"
    args += ["--port", str(int(port)), "--host", bind, "--reload_interval", "5"]
    files = _files(root, job_id)
    files.parent.mkdir(parents=True, exist_ok=True)
    log_path, rec_path = files.with_suffix(".log"), files.with_suffix(".json")
    log = open(str(log_path), "ab")
    start = log_path.stat().st_size
    p = subprocess.Popen(["bash", "-lc", PATH_PREFIX + TB_PICK, "gpujob-tb"] + args, cwd=str(files.parent), env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         close_fds=True)
    log.close()
    write_json(rec_path, {"pid": p.pid, "port": port, "logdir": logdir, "started_at": time.time()})

    def output() -> str:
        try:
            with open(str(log_path), "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    deadline = time.time() + wait
    while time.time() < deadline:
        if listening(port):
            via = _tb_via(output())
            write_json(rec_path, {"pid": p.pid, "port": port, "logdir": logdir, "started_at": time.time(), "via": via})
            return dict(shown, job_id=job_id, port=port, started=True, logdir=logdir, pid=p.pid, via=via,
                        autodl_url=url, verified=True, port_taken=busy)
        if p.poll() is not None:
            break
        time.sleep(0.2)
    out = output()
    if p.poll() is None:
        p.kill()
    via = _tb_via(out)
    if via and via["kind"] == "none":
        raise AgentError(
            "TensorBoard is not installed in the job's environment ({}) nor on this host's PATH".format(via["path"]),
            "gpujob tunnel {} --install puts it into gpujob's tools environment on the host ({}; pip with the "
            "host's pip_index_url and network_turbo settings: gpujob host set HOST --pip-index-url URL), "
            "or `pip install tensorboard` with the job's python".format(job_id, tb_tools(root)), "tb_missing")
    raise AgentError("TensorBoard did not start on port {}: {}".format(port, out.strip()[-600:] or "no output"),
                          "see {}; another port: gpujob tunnel {} --remote-port N".format(log_path, job_id), "tb_failed")


def serves_logdir(port: int) -> Optional[str]:
    """The log folder the TensorBoard on ``port`` serves (its ``/data/environment``), or None when
    what listens there is no TensorBoard."""
    import urllib.request

    try:
        with urllib.request.urlopen("http://127.0.0.1:{}/data/environment".format(port), timeout=5) as r:
            doc = json.loads(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None
    return str(doc.get("data_location") or "") if isinstance(doc, dict) else None


def _int(v: object) -> Optional[int]:
    """A record's pid or port; None when it holds none (or something else)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    return int(v) if isinstance(v, str) and v.isdigit() else None


def _same_dir(a: str, b: str) -> bool:
    return bool(a) and os.path.realpath(a) == os.path.realpath(b)


def _free_port(start: int) -> int:
    for p in range(start, min(65536, start + 200)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise AgentError("no free port in {}..{}".format(start, start + 199), "gpujob tunnel JOB --remote-port N", "tb_failed")


def _tb_via(out: str) -> Optional[Dict[str, str]]:
    """``{kind: job|host|tools|none, path}`` from the picker's first line."""
    for line in out.splitlines():
        if line.startswith("gpujob-tb "):
            parts = line.split(" ", 2)
            if len(parts) == 3:
                return {"kind": parts[1], "path": parts[2]}
    return None


def _runs_tensorboard(pid: int, since: object = None) -> bool:
    """Whether process ``pid`` (as the record has it) is a TensorBoard started by ``since`` (the
    record's time: a pid reused later by someone else's process is not ours)."""
    from remote.stopping.find import START_SLACK, started

    try:
        with open("/proc/{}/cmdline".format(pid), "rb") as f:
            if b"tensorboard" not in f.read():
                return False
    except OSError:
        return False
    return not isinstance(since, (int, float)) or started(pid) <= since + START_SLACK


def stop_tensorboard(root: Root, ref: str, grace: float = 5.0, forget: bool = False) -> Mapping[str, object]:
    """Stop the TensorBoard that ``tensorboard`` started for the job (its whole session); ``forget``
    (the job is being removed): its record and log go too."""
    return _stop(root, resolve(root, ref), grace, forget)


def _stop(root: Root, job_id: str, grace: float, forget: bool) -> Dict[str, object]:
    info = _record(root, root.job(job_id))
    pid = _int(info.get("pid"))
    running = pid is not None and _runs_tensorboard(pid, info.get("started_at"))
    gone = True
    if pid is not None and running:  # else gone already, or the pid now belongs to someone else
        def reap() -> None:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass

        gone = procs.end(lambda sig: procs.signal_group(pid, sig), lambda: os.path.exists("/proc/{}".format(pid)),
                         grace, 2.0, reap, tick=0.1)
    files = _files(root, job_id)
    if not gone:  # it outlived SIGKILL (a process in D state): said so, and its record kept to stop it later
        return {"job_id": job_id, "stopped": False, "pid": pid, "running": True}
    if forget:
        for path in (files.with_suffix(".json"), files.with_suffix(".log")):
            try:
                path.unlink()
            except OSError:
                pass
    elif running:
        write_json(files.with_suffix(".json"), dict(info, stopped_at=time.time()))
    return {"job_id": job_id, "stopped": running, "pid": pid, "running": False}


def stop_orphans(root: Root) -> List[str]:
    """End the TensorBoards whose job is gone (removed by hand, or by an agent that left them): ``gc``."""
    folder = root.root / "tensorboard"
    gone = sorted(p.stem for p in folder.glob("*.json") if not root.job(p.stem).path.is_dir()) if folder.is_dir() else []
    return [job_id for job_id in gone if _stop(root, job_id, 2.0, forget=True)["stopped"]]
