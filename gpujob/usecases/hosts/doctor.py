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
SLURM_WAIT = 60.0  # s the shared-root test job may wait for a node; longer: "the partition is busy"
SLURM_CLIENTS = ("sbatch", "squeue", "scontrol", "srun", "sinfo", "scancel")  # what gpujob runs on the login node
LEVELS = ("ok", "warn", "error")


@dataclass
class Check:
    name: str
    level: str  # ok | warn | error
    message: str
    remedy: str = ""


def slurm_wait() -> float:
    """Seconds the shared-root test job may wait for a node: ``GPUJOB_DOCTOR_SLURM_WAIT``, else SLURM_WAIT."""
    try:
        return min(max(float(os.environ.get("GPUJOB_DOCTOR_SLURM_WAIT") or SLURM_WAIT), 1.0), 3600.0)
    except ValueError:
        return SLURM_WAIT


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
    timeout = torch_timeout + 120
    if host.slurm:  # the cluster too: its test job may wait for a node (GPUJOB_DOCTOR_SLURM_WAIT s)
        wait = slurm_wait()
        args += ["--slurm", "--slurm-wait", f"{wait:g}"]
        for flag, value in (("--partition", host.partition), ("--account", host.account), ("--qos", host.qos)):
            args += [flag, value] if value else []
        timeout += wait + 60
    rep = agent.call("doctor", args, timeout=timeout)
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
        if host.slurm and not t.get("cuda_available"):  # a login node: the GPUs are the compute nodes'
            out.append(Check("torch", "ok", f"torch {t['version']} (CUDA {t.get('cuda')}) on the login node; "
                             "the GPUs are the compute nodes' (node gpus below)"))
        elif t.get("cuda_available"):
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
    if host.slurm:
        out.append(Check("gpu", "ok", f"skipped: {host.name} is a Slurm login node; jobs get the compute nodes' "
                         "GPUs (node gpus below)"))
    elif gpus:
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
        if key == "data" and host.slurm:
            out.append(Check("disk:data", "ok", "skipped: a login node has no instance data disk; jobs write "
                             "under gpujob's root, which the compute nodes share (shared root below)"))
            continue
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
    if not host.slurm and rootd.get("path") and r.get("root") and not str(r["root"]).startswith(str(rootd["path"])):
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
    if host.slurm:
        out.append(Check("power", "ok", "skipped: gpujob never powers a Slurm login node on or off (no idle watcher)"))
        out += slurm_checks(r.get("slurm"), host)
    tail = r.get("agent_log_tail") or []
    errors = [line for line in tail if "crashed" in line or "failed" in line or "Traceback" in line]
    if errors:
        out.append(Check("agent log", "warn", f"{len(errors)} recent error line(s); last: {errors[-1][-200:]}",
                         f"read {r.get('root')}/agent.log on the instance"))
    else:
        out.append(Check("agent log", "ok", f"{len(tail)} recent line(s), no errors"))
    return out


def slurm_checks(s: dict[str, Any] | None, host: Host) -> list[Check]:
    """The cluster as its login node sees it (the report's ``slurm``, remote/slurm/doctor.py)."""
    if not s:
        return [Check("slurm", "error", "the agent did not check the cluster", f"gpujob doctor {host.name} again")]
    clients = s.get("clients") or {}
    missing = [c for c in SLURM_CLIENTS if not clients.get(c)]
    if missing:
        out = [Check("slurm", "error", f"Slurm's client is not on the login node's PATH: {', '.join(missing)} missing",
                     "install it on the login node (Debian: apt install slurm-client), or put its folder on the PATH "
                     "there (~/.bashrc: gpujob's commands run in a non-interactive ssh session)")]
    else:
        out = [Check("slurm", "ok", f"Slurm's client: {', '.join(SLURM_CLIENTS)} ({clients.get('sbatch')})")]
    ctl = s.get("controller")
    if ctl is None:
        return out + [Check("slurm ctld", "error", "not checked: scontrol is missing", "install Slurm's client first")]
    if not ctl.get("up"):
        return out + [Check("slurm ctld", "error", f"Slurm's controller does not answer (scontrol ping: "
                            f"{ctl.get('said') or 'no answer'})", "nothing can be queued until it does: try again "
                            "later; ask the cluster's admins if it stays down")]
    out.append(Check("slurm ctld", "ok", f"scontrol ping: {ctl.get('said')}"))
    part = s.get("partition") or {}
    known = ", ".join(part.get("partitions") or []) or "none"
    fix = f"name one of them: gpujob host set {host.name} --partition NAME"
    if not part.get("found"):
        if part.get("error"):
            return out + [Check("partition", "error", f"the partitions could not be listed: {part['error']}",
                                f"gpujob doctor {host.name} again")]
        if part.get("asked"):
            return out + [Check("partition", "error", f"Slurm has no partition {part['asked']!r} (its partitions: "
                                f"{known}): every submit would be refused", fix)]
        return out + [Check("partition", "error", f"the profile names no partition and the cluster has no default "
                            f"one (its partitions: {known})", fix)]
    name, state = part.get("name"), part.get("state") or "?"
    which = "" if part.get("asked") else " (the cluster's default)"
    nodes = part.get("nodes") or []
    msg = f"{name}{which}: {state}, {len(nodes)} node(s); partitions: {known}"
    out.append(Check("partition", "ok", msg) if state == "UP" else Check(
        "partition", "warn", msg, f"jobs wait while it is {state}: ask the cluster's admins, or {fix}"))
    with_gpus = [n for n in nodes if n.get("gpus")]
    if with_gpus:
        shown = ", ".join(f"{n.get('node')} {n.get('gres')}" for n in with_gpus[:8])
        more = f" and {len(with_gpus) - 8} more" if len(with_gpus) > 8 else ""
        out.append(Check("node gpus", "ok", f"{len(with_gpus)} of {len(nodes)} node(s) with GPUs (gres): {shown}{more}"))
    else:
        out.append(Check("node gpus", "warn", f"no GPUs (gres gpu) on partition {name}'s nodes: a job asking for "
                         "gpus: N is refused at submit", f"for GPU jobs pick a partition with GPUs (sinfo -o '%P %G'): "
                         f"gpujob host set {host.name} --partition NAME"))
    default = part.get("default_time") or ""
    said = f" (default {default})" if default and default not in ("NONE", "n/a") else ""
    out.append(Check("time limit", "ok", f"at most {part.get('max_time') or '?'} per job on {name}{said}; a job "
                     "requeues itself at its slurm: time and resumes from its checkpoint"))
    for kind in ("account", "qos"):
        a = s.get(kind)
        if not a:
            continue
        label = "QOS" if kind == "qos" else kind
        if not a.get("checked"):
            out.append(Check(kind, "warn", f"{label} {a.get('name')}: not checked ({a.get('why')})",
                             "a wrong one is refused by sbatch at submit, naming it"))
        elif a.get("found"):
            out.append(Check(kind, "ok", f"{label} {a.get('name')} is among this user's associations"))
        else:
            theirs = ", ".join(a.get("known") or []) or "none"
            out.append(Check(kind, "error", f"Slurm's accounting has no {label} {a.get('name')!r} for this user "
                             f"(theirs: {theirs}): every submit would be refused",
                             f"gpujob host set {host.name} --{kind} NAME (one of theirs; '' clears it)"))
    out += _shared_checks(s.get("shared"), host, str(name))
    return out


def _shared_checks(sh: dict[str, Any] | None, host: Host, partition: str) -> list[Check]:
    """gpujob's root seen from a compute node (a test job read a file written here), and the agent's Python there."""
    if not sh:
        return [Check("shared root", "warn", "not checked: srun is missing on the login node", "install Slurm's client")]
    outcome = sh.get("outcome")
    if outcome == "busy":
        return [Check("shared root", "warn", f"not checked: the partition is busy (a one-minute test job found no "
                      f"node within {sh.get('wait') or slurm_wait():g} s)",
                      f"gpujob doctor {host.name} again when {partition} has a node free (sinfo -p {partition})")]
    if outcome == "refused":
        return [Check("shared root", "error", f"srun refused a one-minute test job on {partition}: {sh.get('said')}",
                      f"fix what Slurm names (gpujob host set {host.name} --partition/--account/--qos): a job is "
                      "refused the same way")]
    node = sh.get("node") or "?"
    if outcome != "ok":
        return [Check("shared root", "error", f"compute node {node} cannot read gpujob's root {sh.get('root')} "
                      f"({sh.get('said')}): a job there would find neither its code nor its checkpoints",
                      f"put the root on the file system the nodes share (home, /scratch): gpujob host set "
                      f"{host.name} --root /SHARED/PATH/gpujob")]
    out = [Check("shared root", "ok", f"{sh.get('root')} is the same on compute node {node} (a test job read a "
                 "file written here)")]
    if sh.get("python_ok"):
        out.append(Check("node python", "ok", f"the agent's {sh.get('python')} starts on {node}"))
    else:
        out.append(Check("node python", "error", f"the agent's {sh.get('python')} does not start on compute node "
                         f"{node}: the batch script runs the agent with it there",
                         "install the same Python on the nodes, or set agent_python in the host profile to one "
                         "on the shared file system"))
    return out
