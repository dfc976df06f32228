"""``gpujob doctor [HOST]``: one round trip to the agent's ``doctor`` verb, then checks with remedies;
``gpujob agent-log``: the agent's own log.

Each check is ``ok`` (green), ``warn`` (yellow) or ``error`` (red) and says what to do next.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gpujob.bundle import import_remote
from gpujob.config.hosts import LOCAL, Host, HostStore
from gpujob.jsontypes import JSONObject
from gpujob.transport.agent import Agent

if TYPE_CHECKING:
    from gpujob.config.spec import JobSpec

LOW_DISK = 5 * 1024**3  # below this free, a checkpoint or a pip install may not fit
LEVELS = ("ok", "warn", "error")


@dataclass
class Check:
    name: str
    level: str  # ok | warn | error
    message: str
    remedy: str = ""


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 1024**3:.1f} GiB"


def run_doctor(agent: Agent, host: Host, torch_timeout: float = 60.0, job: JobSpec | None = None) -> JSONObject:
    """The instance's report plus ``checks`` (a list of dicts) and the host profile's name.
    ``job``: that job's interpreter is resolved there as its submit would (``--job``)."""
    args = ["--torch-timeout", str(torch_timeout)]
    if job is not None:  # the program run: starts, not the whole line (argv is visible on the host)
        cmd = import_remote("env.interpreter").first_command(job.run)
        args += ["--job-run", shlex.quote(cmd) if cmd else "", "--job-python", job.python or ""]
        args += ["--job-setup"] if job.setup else []
    if host.data_disk_path:
        args += ["--data-disk", host.data_disk_path]
    if host.env.get("GPUJOB_NETWORK_TURBO_FILE"):
        args += ["--turbo-file", host.env["GPUJOB_NETWORK_TURBO_FILE"]]
    prefix = host.env.get("GPUJOB_PATH_PREFIX") or (os.environ.get("PATH", "") if host.kind == LOCAL else "")
    if prefix:  # on local, jobs get this PATH (submit sends it), so the venv gpujob runs from is theirs
        args += ["--path-prefix", prefix]
    rep = agent.call("doctor", args, timeout=torch_timeout + 120)
    rep["host"] = host.name
    rep["preset"] = host.preset
    try:
        rep["checks"] = [asdict(c) for c in checks(rep, host)]
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError) as e:
        # the report is read field by field into many checks: one of the wrong kind (disks: "x")
        # is the host's fault, said so (exit 3), not an internal error
        from gpujob.transport.replies import unreadable

        raise unreadable(host.name, f"a doctor report of the wrong shape ({type(e).__name__}: {e})") from None
    return rep


def doctor_host(name: str | None, torch_timeout: float = 60.0, job: str | None = None) -> tuple[Host, dict[str, Any]]:
    """The profile ``name`` (None: the default host) and its doctor report (``job``: a job file)."""
    from gpujob.config.spec import load_spec
    from gpujob.transport.agent import connect_agent

    spec = load_spec(job) if job else None  # a bad job file is refused before the host is reached
    host = HostStore().get(name)
    rep = run_doctor(connect_agent(host), host, torch_timeout, spec)
    if spec is not None:
        rep["job_file"] = job
    return host, rep


def agent_log(agent: Agent, lines: int) -> JSONObject:
    """{path, lines}: the last ``lines`` lines of the agent's log on the host."""
    return agent.call("agentlog", ["--lines", str(lines)])


def _job_check(ji: dict[str, Any]) -> Check:
    """The ✓/✗ line for ``doctor --job``: the interpreter that job gets, or why it gets none."""
    what = f"python: {ji['python']}" if ji.get("python") else f"run: starts `{ji.get('command')}`"
    if ji.get("looked_up") and ji["looked_up"] != ji.get("command"):
        what += f" (its `{ji['looked_up']}`)"  # a venv's base, or a script that calls python itself
    if ji.get("error"):
        return Check("job python", ji.get("level") or "error", f"{what}: {ji['error']}", ji.get("remedy") or "")
    return Check("job python", "ok", f"{what}: the job runs {ji.get('path')}")


def checks(r: dict[str, Any], host: Host) -> list[Check]:
    """Judge the report; every red or yellow line carries its remedy."""
    out: list[Check] = []
    osi = r.get("os") or {}
    out.append(Check("os", "ok", f"{osi.get('name')} ({osi.get('kernel')}, {osi.get('arch')}), {osi.get('hostname')}"))
    ag = r.get("agent") or {}
    out.append(Check("agent", "ok", f"agent {ag.get('version')} on Python {ag.get('python_version')} ({ag.get('python')})"))
    from gpujob.config.keys import uses_shared_key

    if uses_shared_key(host):
        out.append(Check("key", "warn", "logs in with gpujob's shared key, which every instance it was installed on "
                         "accepts (one provider could log into the others)", f"gpujob host rekey {host.name}"))
    pys = r.get("pythons") or []
    if r.get("job_interpreter"):
        out.append(_job_check(r["job_interpreter"]))
    if r.get("login_python"):
        listed = ", ".join(f"{p['path']} {p.get('version') or '?'} ({p['source']})" for p in pys)
        # the image's own `python` (what a job without python: runs), never another job's choice
        default = f"`python` is {r['python_command']} on a login shell's PATH" if r.get("python_command") else ""
        out.append(Check("python", "ok", (default + "; " if default else "") + f"found: {listed}"))
        if "python_command" in r and not r["python_command"]:  # an agent that reports it, and found none
            out.append(Check("python cmd", "error", "no `python` command on a login shell's PATH: a job without "
                             "python: whose run: starts with `python` exits 127 (command not found)",
                             "write python3 in run:, or set python: to an interpreter (a path, venv or conda:NAME), "
                             "or install python-is-python3 on the host"))
    else:
        out.append(Check("python", "error", "no python on a login shell's PATH",
                         "install one (apt-get install -y python3) or set python: in the job to a path or conda:NAME"))
    t = r.get("torch") or {}
    nv = r.get("nvidia") or {}
    gpus = nv.get("gpus") or []
    if t.get("version"):
        devs = ", ".join(t.get("devices") or []) or "none"
        if t.get("cuda_available"):
            out.append(Check("torch", "ok", f"torch {t['version']} (CUDA {t.get('cuda')}), cuda available: {devs}"))
        elif gpus:
            out.append(Check("torch", "error", f"torch {t['version']} (CUDA {t.get('cuda')}) cannot use the GPU "
                             f"(driver {nv.get('driver')}, supports CUDA {nv.get('cuda')})",
                             "install a torch build for this driver's CUDA (pip install torch --index-url "
                             "https://download.pytorch.org/whl/cu121 or the matching cuXXX), or pick another image"))
        else:
            out.append(Check("torch", "warn", f"torch {t['version']} (CUDA {t.get('cuda')}); no GPU to use",
                             "fine for setup; start the instance with a GPU to train"))
    else:
        out.append(Check("torch", "warn", f"torch not importable with {t.get('python')}: {t.get('error') or 'not installed'}",
                         "pick an image with PyTorch, or add torch to requirements: (python: venv reuses the image's)"))
    if gpus:
        names = ", ".join(f"{g['index']}: {g['name']} {gib(int((g.get('memory_total_mib') or 0) * 1024**2))}" for g in gpus)
        out.append(Check("gpu", "ok", f"driver {nv.get('driver')} (CUDA {nv.get('cuda')}); {names}"))
    else:
        if host.kind == LOCAL:  # this machine runs a GPU job on its CPU: a note, not a failure
            out.append(Check("gpu", "warn", f"no GPU: {nv.get('error') or 'nvidia-smi lists none'}; "
                             "a job's gpus: runs on this machine's CPU", ""))
        else:
            out.append(Check("gpu", "error", f"no GPU: {nv.get('error') or 'nvidia-smi lists none'}",
                             "on AutoDL a no-GPU mode instance has none: power it on with a GPU; elsewhere install the driver"))
    disks = r.get("disks") or {}
    for key, label in (("system", "system disk /"), ("data", "data disk"), ("root", "gpujob root")):
        d = disks.get(key) or {}
        if key == "data" and not d.get("path"):
            level = "warn" if host.preset in ("autodl", "vast", "runpod") else "ok"
            out.append(Check("disk:data", level, "no data disk found",
                             "" if level == "ok" else f"set it with gpujob host set {host.name} --data-disk PATH"))
            continue
        free = d.get("free_bytes")
        msg = f"{label} {d.get('path')}: {gib(free)} free of {gib(d.get('total_bytes'))}"
        if free is not None and free < LOW_DISK:
            out.append(Check(f"disk:{key}", "error" if free < LOW_DISK / 5 else "warn", msg,
                             "free space (old checkpoints: checkpoint.keep; caches under <root>/cache) before training"))
        else:
            out.append(Check(f"disk:{key}", "ok", msg))
    sysd, rootd = disks.get("system") or {}, disks.get("data") or {}
    if rootd.get("path") and r.get("root") and not str(r["root"]).startswith(str(rootd["path"])):
        out.append(Check("root", "warn", f"gpujob's root {r['root']} is not on the data disk {rootd['path']}",
                         f"move it: gpujob host set {host.name} --root {rootd['path']}/gpujob"))
    del sysd
    nt = r.get("network_turbo") or {}
    wants = bool(host.network_turbo) and str(host.network_turbo).lower() not in ("false", "off", "no")
    if nt.get("exists"):
        out.append(Check("network_turbo", "ok", f"{nt.get('path')} exists" + (" (used)" if wants else
                         f" (off: gpujob host set {host.name} --network-turbo true to use it)")))
    elif wants:
        out.append(Check("network_turbo", "error", f"the profile asks for network_turbo but {nt.get('path')} is missing",
                         f"gpujob host set {host.name} --network-turbo false, or set hf_endpoint/pip_index_url mirrors"))
    else:
        out.append(Check("network_turbo", "ok", "no network_turbo on this host"))
    pl = r.get("platform") or {}
    if pl.get("autodl"):
        msg = f"AutoDL, region {pl.get('region') or '?'}"
        if host.preset != "autodl":
            out.append(Check("platform", "warn", msg + f", but the profile's preset is {host.preset}",
                             f"gpujob host set {host.name} --preset autodl (root on the data disk, /usr/bin/shutdown)"))
        else:
            out.append(Check("platform", "ok", msg))
    else:
        out.append(Check("platform", "ok", f"{pl.get('name')} (profile preset {host.preset})"))
    tail = r.get("agent_log_tail") or []
    errors = [line for line in tail if "crashed" in line or "failed" in line or "Traceback" in line]
    if errors:
        out.append(Check("agent log", "warn", f"{len(errors)} recent error line(s); last: {errors[-1][-200:]}",
                         f"read {r.get('root')}/agent.log on the instance"))
    else:
        out.append(Check("agent log", "ok", f"{len(tail)} recent line(s), no errors"))
    return out
