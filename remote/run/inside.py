"""``gpujob exec JOB``: a command, or an interactive shell, where a job runs: in its code folder, with the
environment its run command gets (remote/run/childenv.py), the interpreter its setup chose (env.json,
remote/env/jobenv.py) and the network_turbo proxies its runs get; on a Slurm host on the job's first
node, as one more step of its allocation (remote/slurm/step.py).

The command carries the job's identity (GPUJOB_JOB_ID, GPUJOB_JOB_DIR) as the job's own processes do:
``gpujob stop`` ends it with them, and so does the end of an attempt.
"""

from typing import Dict, List, Optional, Tuple

from remote.core import atomicfile, slurmq
from remote.core.errors import AgentError
from remote.core.jobrecord import JobRecord
from remote.core.layout import JobDir, Root
from remote.core.spec import JobSpec
from remote.env import jobenv
from remote.run import childenv, ckptdir
from remote.slurm import step

# The login files print to stderr (kept apart from the command's output, as ``gpujob exec HOST`` keeps
# them); fd 3 carries the command's own output, its stderr merged in so the two keep their order.
# ``sh`` runs it: srun passes a task no descriptor past 2.
SPLIT = 'exec bash -lc "$0" 3>&1 1>&2'
OUTPUT_BACK = "exec 1>&3 2>&1 3>&-\n"
# An interactive shell reads a login shell's files, then gets the job's PATH prefix: a ``bash -l``
# alone would lose it (Debian's /etc/profile sets PATH anew). The same text for every job (under
# the root, which a Slurm host's compute nodes share).
SHELL_RC = ("# gpujob exec JOB: a login shell's files, then the job's PATH and folder (written by gpujob)\n"
            "[ -f /etc/profile ] && . /etc/profile\n"
            'for f in ~/.bash_profile ~/.bash_login ~/.profile; do if [ -f "$f" ]; then . "$f"; break; fi; done\n'
            + jobenv.PATH_PREFIX + 'cd "$GPUJOB_EXEC_DIR" 2>/dev/null || true\n')
NOT_RUNNING = "not_running"


class Plan:
    """What runs (``argv``, with ``env``, in ``cwd``) and what the laptop is told first (``doc``)."""

    def __init__(self, argv: List[str], env: Dict[str, str], cwd: str, doc: Dict[str, object]) -> None:
        self.argv, self.env, self.cwd, self.doc = argv, env, cwd, doc


def environment(root: Root, job: JobDir, spec: JobSpec, rec: JobRecord) -> Dict[str, str]:
    """The environment of the job's current attempt, as its run command got it."""
    tried = rec.attempts
    resume = str((tried[-1].get("resume") if tried else "") or "")
    env = childenv.environment(root, job, spec, rec, ckptdir.ckpt_dir(job, spec), rec.attempt or 1, resume)
    env.update(jobenv.load(job))
    from remote.env import provision

    if provision.turbo_mode(env) in ("both", "run"):  # setup kept these in memory only: asked again
        env.update(provision.turbo_env(env))
    return env


def shell_rc(root: Root) -> str:
    """The interactive shell's rc file (written once, and again only when its text changed)."""
    path = root.root / "cache" / "exec-shell.rc"
    try:
        same = path.read_text() == SHELL_RC
    except OSError:
        same = False
    if not same:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.write(path, SHELL_RC, durable=False)
    return str(path)


def plan(root: Root, job_id: str, command: Optional[str]) -> Plan:
    """The command (None: an interactive shell) in job ``job_id``'s folder and environment; an
    :class:`AgentError` naming the state when the job cannot take it (a Slurm job not running)."""
    job = root.job(job_id)
    if not job.code.is_dir():
        raise AgentError("job {} has no code folder on this host ({})".format(job_id, job.code),
                         "a moved job runs on the host it moved to: gpujob status {} names it".format(job_id), "no_code")
    spec, rec = job.job_spec(), job.record()
    cwd = str(job.code)
    doc = {"job_id": job_id, "state": rec.state or "unknown", "cwd": cwd}  # type: Dict[str, object]
    env = environment(root, job, spec, rec)
    if command is None:
        env["GPUJOB_EXEC_DIR"] = cwd
        argv = ["bash", "--rcfile", shell_rc(root), "-i"]
    else:
        argv = ["sh", "-c", SPLIT, OUTPUT_BACK + jobenv.PATH_PREFIX + command]
    if spec.slurm.on or rec.slurm_job:
        sid, node = running_in_slurm(job, rec)
        doc.update(slurm_job=sid, node=node)
        argv = step.srun(sid, node, cwd, argv, pty=command is None)
    return Plan(argv, env, cwd, doc)


def running_in_slurm(job: JobDir, rec: JobRecord) -> Tuple[str, str]:
    """(Slurm's job id, its first node) of a job Slurm runs now; else an AgentError naming its state."""
    sid = rec.slurm_job
    if not sid:
        raise AgentError("job {} has not reached Slurm (gpujob state {}): there is no node to run on".format(
            job.id, rec.state or "unknown"), "wait until gpujob status {} says running, then exec again".format(job.id),
            NOT_RUNNING)
    now = slurmq.job(sid, fresh=True)
    if now is not None and now.waiting:
        why = " ({})".format(now.reason) if now.reason and now.reason not in ("None", "(null)") else ""
        raise AgentError("job {} is pending in Slurm (Slurm job {}, {}{}): it runs on no node yet".format(
            job.id, sid, now.state, why), "wait until it starts (gpujob status {} -w shows when), then exec "
            "again".format(job.id), NOT_RUNNING)
    if now is None or not now.alive:
        said = "Slurm no longer knows it" if now is None else "Slurm says {}".format(now.state)
        raise AgentError("job {} is not running in Slurm (Slurm job {}: {}; gpujob state {})".format(
            job.id, sid, said, rec.state or "unknown"), "its files stay on the cluster: gpujob tail {0} shows its "
            "output, gpujob resume {0} starts it again".format(job.id), NOT_RUNNING)
    node = step.first_node(now.nodes) if now.state == slurmq.ON_A_NODE else ""
    if not node:
        raise AgentError("job {} is {} in Slurm (Slurm job {}), not yet running on a node".format(
            job.id, now.state, sid), "try again in a moment (gpujob status {} says when it runs)".format(job.id),
            NOT_RUNNING)
    return sid, node

