"""``gpujob exec JOB [-- CMD]``: a command, or an interactive shell, where a job runs: on its host (a job
over several hosts: the first, rank 0's), in its code folder and with its environment; on a Slurm host
on its first node, as one more step of its allocation. The agent's ``exec`` verb decides where and
refuses a Slurm job that runs on no node (remote/run/inside.py).

A command's output (stdout and stderr in order) streams back as it comes and gpujob exits with its
code; what the login files print, and srun's own words, come apart on the channel's stderr (shown on
a failure), as ``gpujob exec HOST`` keeps them. The shell hands the terminal to OpenSSH (``ssh -t``
through gpujob's Host entry, as ``gpujob ssh``) running the verb, which becomes the shell
(``srun --pty`` on a Slurm host).
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any, Callable, TypedDict

from gpujob.config.hosts import LOCAL, Host, HostStore
from gpujob.errors import ConnectError, GpujobError
from gpujob.transport.agent import Agent
from gpujob.usecases.hosts.shell import SshPlan, command_text, feed_stdin, ssh_plan

# srun repeats a failed task's exit status in words; the status itself is passed through
_SRUN_EXIT = re.compile(r"^srun: error: \S+: task \d+: Exited with exit code \d+$")


class JobExec(TypedDict):
    """``exec JOB --json``: where the command ran and what it did."""

    job_id: str
    host: str
    node: str | None  # a Slurm host: the compute node; else None (the host itself)
    slurm_job: str | None
    cwd: str
    command: str
    exit_code: int
    output: str
    login_output: str  # what the login files (and srun) printed on stderr, apart from the output


def run_in_job(agent: Agent, ref: str, argv: list[str], write: Callable[[bytes], None] | None = None) -> JobExec:
    """Run ``argv`` (one item: a shell line) where job ``ref`` runs; its output goes to ``write`` as
    it comes (else into ``output``). Stdin that is no terminal is passed on."""
    text = command_text(argv)
    chunks: list[bytes] = []
    # --command=TEXT: a line that starts with "-" stays the option's value
    s, doc = agent.stream_doc("exec", ["--job", ref, "--command=" + text],
                              again="run it again: whether the command ran before the cut is unknown")
    try:
        if sys.stdin is not None and not sys.stdin.isatty():
            threading.Thread(target=feed_stdin, args=(s,), daemon=True).start()
        else:
            s.close_stdin()
        while True:
            chunk = s.read_some()
            if not chunk:
                break
            (write or chunks.append)(chunk)
        rc = s.wait()
        said = s.stderr_text()
    finally:
        s.kill()
    if rc < 0:
        raise ConnectError(f"the connection to {agent.endpoint.name} dropped before the command ended",
                           "check the network; the command may still be running there")
    said = "".join(ln for ln in said.splitlines(keepends=True) if not _SRUN_EXIT.match(ln.strip()))
    return {"job_id": str(doc.get("job_id") or ref), "host": agent.endpoint.name, "node": doc.get("node"),
            "slurm_job": doc.get("slurm_job"), "cwd": str(doc.get("cwd") or ""), "command": text, "exit_code": rc,
            "output": b"".join(chunks).decode("utf-8", "replace"), "login_output": said}


def shell_plan(agent: Agent, host: Host, ref: str) -> tuple[SshPlan, dict[str, Any]]:
    """The terminal's hand-over for an interactive shell in job ``ref`` (what ``shell.hand_over`` runs),
    and where it lands; refused first, over gpujob's own connection, when the job cannot take one."""
    if sys.stdin is None or not sys.stdin.isatty():
        raise GpujobError("an interactive shell needs a terminal, and stdin is not one",
                          f"give a command: gpujob exec {ref} -- CMD")
    doc = agent.call("exec", ["--job", ref, "--shell", "--check"], timeout=120)
    remote = agent.command("exec", ["--job", str(doc.get("job_id") or ref), "--shell"])
    if host.kind == LOCAL:
        return {"argv": ["/bin/sh", "-c", remote], "ssh_config": None, "block": ""}, doc
    plan = ssh_plan(host, HostStore().all(), [remote])
    if "-t" not in plan["argv"]:  # a command given: OpenSSH would open no terminal for it
        plan["argv"].insert(1, "-t")
    return plan, doc


def job_host(ref: str, host: str | None, remembered_host: str | None) -> str:
    """The host profile to ask for job ``ref``: ``--host``, else the one it was submitted to (a job over
    several hosts: the first, where rank 0 runs)."""
    name = host or remembered_host
    if not name:
        raise GpujobError(f"{ref!r} is neither a host profile nor a job this laptop knows",
                          "gpujob host ls lists the hosts and gpujob ls the jobs; --host HOST looks for the job there")
    return name.split(",")[0]
