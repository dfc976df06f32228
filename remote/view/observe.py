"""Seeing a run from the instance: one document per refresh, TensorBoard, log offsets by time.

``watch`` answers everything ``gpujob status JOB`` shows in one round trip: the job's
detail, its metric history (down-sampled), GPU samples summarised, derived rates.
"""

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

from remote.core.layout import JobDir, Root, read_json, read_tail, write_json
from remote.env.jobenv import PATH_PREFIX
from remote.jobs import store as jobs

MAX_READ = 32 << 20  # at most this much of a .jsonl file's end is read (plot: every point)
LIVE_READ = 4 << 20  # status: the newest ~50k metric lines
MARKER = re.compile(rb"^==> gpujob: .*\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]$")


def _read_jsonl(path: Path, max_bytes: int = MAX_READ) -> List[Dict[str, Any]]:
    data, size = read_tail(path, max_bytes)
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first one is cut
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def downsample(rows: List[Any], points: int) -> List[Any]:
    """At most ``points`` rows spread evenly, always keeping the first and the last."""
    if points <= 0 or len(rows) <= points:
        return rows
    if points == 1:
        return rows[-1:]
    step = (len(rows) - 1) / float(points - 1)
    return [rows[int(round(i * step))] for i in range(points)]


def gpu_summary(path: Path) -> Optional[Dict[str, Any]]:
    """The newest sample and per-GPU time-weighted averages over ``gpu.jsonl``; None when there is none.

    A compacted line (``w``: the seconds it averages) weighs ``w``; a raw sample weighs the
    sampling interval (the median gap between raw samples).
    """
    samples = [s for s in _read_jsonl(path, 8 << 20) if isinstance(s.get("gpus"), list)]
    if not samples:
        return None
    raw_t = sorted(float(s["t"]) for s in samples if not s.get("w") and isinstance(s.get("t"), (int, float)))
    gaps = sorted(b - a for a, b in zip(raw_t, raw_t[1:]) if b > a)
    interval = gaps[len(gaps) // 2] if gaps else 5.0
    keys = ("util", "mem_used")
    sums = {}  # type: Dict[Any, Dict[str, List[float]]]  # index -> key -> [weighted sum, weight]
    for s in samples:
        weight = float(s.get("w") or interval)
        for g in s["gpus"]:
            acc = sums.setdefault(g.get("index"), {k: [0.0, 0.0] for k in keys})
            for k in keys:
                v = g.get(k)
                if isinstance(v, (int, float)):
                    acc[k][0] += float(v) * weight
                    acc[k][1] += weight
    avg = []
    for i, a in sorted(sums.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        row = {"index": i}  # type: Dict[str, Any]
        for k in keys:
            row[k] = round(a[k][0] / a[k][1], 1) if a[k][1] else None
        avg.append(row)
    return {"now": samples[-1]["gpus"], "t": samples[-1].get("t"), "avg": avg, "samples": len(samples)}


def watch(root: Root, ref: str, points: int = 60) -> Dict[str, Any]:
    """The job's detail, its metric series and GPU summary, in one document."""
    job_id = jobs.resolve(root, ref)
    job = root.job(job_id)
    detail = jobs.describe(root, job_id, detail=True)
    from remote.metrics import metricsrc

    source, path = metricsrc.active(job)
    rows = _read_jsonl(path, MAX_READ if points <= 0 else LIVE_READ)  # a refresh stays cheap
    keys = []  # type: List[str]
    for r in rows:
        for k, v in r.items():
            if k not in ("t", "step", "epoch", "max_steps") and isinstance(v, (int, float)) and not isinstance(v, bool) \
                    and k not in keys:
                keys.append(k)
    series = {}  # type: Dict[str, List[List[Any]]]
    for k in keys:
        pts = [[r.get("step"), r[k], r.get("t")] for r in rows if isinstance(r.get(k), (int, float))]
        series[k] = downsample(pts, points)
    last = {}  # type: Dict[str, Any]
    for r in rows:  # the newest value of every key (eval metrics come on their own lines), this attempt's
        if jobs.this_attempt(detail, r) is not None:
            last.update(r)
    timed = [(float(r["t"]), float(r["step"])) for r in rows
             if isinstance(r.get("t"), (int, float)) and isinstance(r.get("step"), (int, float))]
    prog = metricsrc.progress(job)
    attempts = detail.get("attempts") or [{}]
    if float(prog.get("t") or 0) < float(attempts[-1].get("started_at") or 0):
        prog = {}  # an earlier attempt's bar
    prog, last, took = _with_unread(job, source, prog, last)
    if source is None and took:  # the log's first metrics, printed before the Collector's first read of them
        source = "log"
    if not prog.get("total"):
        hints = metricsrc.run_hints(job.spec_data(), job.code)  # metrics.total, GPUJOB_MAX_*, run flags, its config
        total = hints.get("max_steps") or metricsrc.total_from_epochs(rows, hints.get("epochs"))
        if total and not hints.get("max_steps") and detail.get("state") == "succeeded":
            # an estimate from the epochs; the run went to its end, so its last step is the total
            total = max([int(r["step"]) for r in rows if isinstance(r.get("step"), (int, float))] or [total])
        prog = dict(prog, total=total) if total else prog
    return {"job": detail, "series": series, "latest": last, "rows": len(rows), "source": source,
            "progress": prog, "rate": prog.get("rate") or _rate(timed), "gpu": gpu_summary(job.gpu), "now": time.time()}


def _with_unread(job: JobDir, source: Optional[str], prog: Dict[str, Any],
                 last: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any], bool]:
    """``prog`` and ``last`` with what the log printed since the Collector last read it: the
    step status shows is the log's newest, not one up to a collect interval old. A step is
    taken only when newer (the tail is parsed without the earlier lines' context). The third
    value: whether metric records from the tail were taken (with no source yet, the log is it)."""
    from remote.metrics import metricsrc

    last, fresh, took = metricsrc.with_unread(job, job.spec_data(), source, last)
    if metricsrc.step_value(fresh.get("step")) > metricsrc.step_value(prog.get("step")):
        prog = dict(prog, step=fresh["step"], t=fresh.get("t"), rate=fresh.get("rate") or prog.get("rate"))
    return prog, last, took


def _rate(timed: List[Tuple[float, float]]) -> Optional[float]:
    """Steps per second over the newest stretch of one attempt (at most the last 50 points)."""
    pts = timed[-50:]
    # keep the tail after the last step decrease (a restart resumes from an older step)
    for i in range(len(pts) - 1, 0, -1):
        if pts[i][1] < pts[i - 1][1]:
            pts = pts[i:]
            break
    # records read from the log in one go share the time of the read: only the newest step of
    # each read is at its time (counting the first read's older steps would inflate the rate)
    pts = [p for i, p in enumerate(pts) if i + 1 == len(pts) or pts[i + 1][0] != p[0]]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


# ---- log offsets by time -------------------------------------------------------------------
def _parse_marker_time(stamp: bytes) -> float:
    return time.mktime(time.strptime(stamp.decode(), "%Y-%m-%d %H:%M:%S"))


def offset_since(job: JobDir, since: float) -> int:
    """The byte offset of the first line written at or after ``since`` (epoch seconds).

    Sources, finest first: the supervisor's size index ``output.log.idx`` (``T SIZE`` per
    heartbeat: SIZE bytes existed at T), then the attempt markers' timestamps. The offset
    is the largest known position written before ``since``, moved to a line start; a
    log untouched since then gives its end.
    """
    log = job.log
    try:
        st = log.stat()
    except OSError:
        return 0
    if st.st_mtime < since:
        return st.st_size
    best = 0
    try:
        with open(str(job.path / "output.log.idx")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and float(parts[0]) <= since:
                    best = max(best, int(parts[1]))
    except (OSError, ValueError):
        pass
    if not best:  # no index: the newest marker before since
        pos = 0
        with open(str(log), "rb") as f:
            for line in f:
                m = MARKER.match(line.rstrip(b"\n"))
                if m and _parse_marker_time(m.group(1)) <= since:
                    best = pos
                pos += len(line)
    return _line_start(log, min(best, st.st_size))


def _line_start(path: Path, offset: int) -> int:
    """``offset`` if a line starts there, else the start of the next line."""
    if offset <= 0:
        return 0
    with open(str(path), "rb") as f:
        f.seek(offset - 1)
        pos = offset - 1
        while True:
            block = f.read(65536)
            if not block:
                return pos
            i = block.find(b"\n")
            if i >= 0:
                return pos + i + 1
            pos += len(block)


# ---- TensorBoard ---------------------------------------------------------------------------
def _listening(port: int) -> bool:
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
    spec = job.spec_data()
    tb = spec.get("tensorboard_logdir")
    return str((job.code / tb).resolve()) if tb else str(job.tb)


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

    spec = job.spec_data()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOB_") and k != "PYTHONPATH"}
    env.update(spec.get("host_env") or {})
    env.update(spec.get("env") or {})
    env.update(jobenv.load(job))
    env["GPUJOB_TB_TOOLS"] = str(tb_tools(root))
    return env


def install_tensorboard(root: Root, ref: str, timeout: float = 900.0) -> Dict[str, Any]:
    """pip-install TensorBoard into ``<root>/tools/tensorboard`` with the host's pip and proxy settings."""
    from remote.env import provision

    job = root.job(jobs.resolve(root, ref))
    env = job_env(root, job)
    if provision.turbo_mode(env):
        env.update(provision.turbo_env(env))
    tools = tb_tools(root)
    tools.parent.mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run(["bash", "-lc", PATH_PREFIX + TB_INSTALL], env=env, cwd=str(root.root),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise jobs.AgentError("installing TensorBoard took over {:.0f} s".format(timeout),
                              "check the host's network (gpujob doctor), then retry", "tb_install") from None
    out = res.stdout.decode("utf-8", "replace")
    if res.returncode != 0:
        raise jobs.AgentError("pip could not install TensorBoard into {}: {}".format(tools, out.strip()[-600:]),
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


def tensorboard(root: Root, ref: str, port: int, wait: float = 60.0) -> Dict[str, Any]:
    """Start TensorBoard on the job's tb folder on ``port`` unless something serves there.

    Detached (own session), with the job's interpreter (its ``python:`` and PATH, in a login
    shell), else the host's ``tensorboard``, else gpujob's tools environment. Returns what
    serves the port (``via``) and the AutoDL URL if exposed.
    """
    job_id = jobs.resolve(root, ref)
    job = root.job(job_id)
    logdir = tb_dir(job)
    info = read_json(job.path / "tensorboard.json", {}) or {}
    busy = None  # type: Optional[Dict[str, Any]]
    for p_ in ([int(info["port"])] if info.get("port") and info.get("port") != port else []) + [port]:
        if not _listening(p_):
            continue
        serves = serves_logdir(p_)
        if serves is not None and _same_dir(serves, logdir):  # verified: this job's curves, not another's
            return {"job_id": job_id, "port": p_, "started": False, "logdir": logdir, "pid": info.get("pid"),
                    "via": info.get("via"), "autodl_url": autodl_url(p_), "verified": True}
        if p_ == port:
            busy = {"port": port, "serves": serves}
    if busy is not None:  # another job's TensorBoard (or another server): this job's own on a free port
        port = _free_port(port + 1)
    url = autodl_url(port)
    Path(logdir).mkdir(parents=True, exist_ok=True)
    env = job_env(root, job)
    bind = "0.0.0.0" if url else "127.0.0.1"
    args = ["--logdir", logdir, "--port", str(int(port)), "--host", bind, "--reload_interval", "5"]
    log_path = job.path / "tensorboard.log"
    log = open(str(log_path), "ab")
    start = log_path.stat().st_size
    p = subprocess.Popen(["bash", "-lc", PATH_PREFIX + TB_PICK, "gpujob-tb"] + args, cwd=str(job.path), env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         close_fds=True)
    log.close()
    write_json(job.path / "tensorboard.json", {"pid": p.pid, "port": port, "logdir": logdir, "started_at": time.time()})

    def output() -> str:
        try:
            with open(str(log_path), "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    deadline = time.time() + wait
    while time.time() < deadline:
        if _listening(port):
            via = _tb_via(output())
            write_json(job.path / "tensorboard.json", {"pid": p.pid, "port": port, "logdir": logdir,
                                                       "started_at": time.time(), "via": via})
            return {"job_id": job_id, "port": port, "started": True, "logdir": logdir, "pid": p.pid, "via": via,
                    "autodl_url": url, "verified": True, "port_taken": busy}
        if p.poll() is not None:
            break
        time.sleep(0.2)
    out = output()
    if p.poll() is None:
        p.kill()
    via = _tb_via(out)
    if via and via["kind"] == "none":
        raise jobs.AgentError(
            "TensorBoard is not installed in the job's environment ({}) nor on this host's PATH".format(via["path"]),
            "gpujob tunnel {} --install puts it into gpujob's tools environment on the host ({}; pip with the "
            "host's pip_index_url and network_turbo settings: gpujob host set HOST --pip-index-url URL), "
            "or `pip install tensorboard` with the job's python".format(job_id, tb_tools(root)), "tb_missing")
    raise jobs.AgentError("TensorBoard did not start on port {}: {}".format(port, out.strip()[-600:] or "no output"),
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
    raise jobs.AgentError("no free port in {}..{}".format(start, start + 199), "gpujob tunnel JOB --remote-port N", "tb_failed")


def _tb_via(out: str) -> Optional[Dict[str, str]]:
    """``{kind: job|host|tools|none, path}`` from the picker's first line."""
    for line in out.splitlines():
        if line.startswith("gpujob-tb "):
            parts = line.split(" ", 2)
            if len(parts) == 3:
                return {"kind": parts[1], "path": parts[2]}
    return None


def stop_tensorboard(root: Root, ref: str, grace: float = 5.0) -> Dict[str, Any]:
    """Stop the TensorBoard that ``tensorboard`` started for the job (its whole session)."""
    import signal

    job_id = jobs.resolve(root, ref)
    job = root.job(job_id)
    info = read_json(job.path / "tensorboard.json", {}) or {}
    pid = info.get("pid")
    try:
        with open("/proc/{}/cmdline".format(int(pid)), "rb") as f:
            ours = b"tensorboard" in f.read()
    except (OSError, TypeError, ValueError):
        ours = False
    if not ours:  # gone already, or the pid now belongs to someone else
        return {"job_id": job_id, "stopped": False, "pid": pid, "running": False}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(int(pid), sig)
        except OSError:
            break
        deadline = time.time() + wait
        while time.time() < deadline and os.path.exists("/proc/{}".format(pid)):
            try:
                os.waitpid(int(pid), os.WNOHANG)
            except OSError:
                pass
            time.sleep(0.1)
        if not os.path.exists("/proc/{}".format(pid)):
            break
    info["stopped_at"] = time.time()
    write_json(job.path / "tensorboard.json", info)
    return {"job_id": job_id, "stopped": True, "pid": pid, "running": False}

