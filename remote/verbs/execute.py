"""``exec``: a command, or an interactive shell, where a job runs (remote/run/inside.py).

The first line is a JSON document: where it runs, or the refusal (a Slurm job not running). Then
this process becomes the command (or ``srun`` of it): its output streams back as it comes, its
stdin is the channel's (or the terminal of ``ssh -t``), its exit status is this command's.
"""

import argparse
import os
import shutil
import sys

from remote.core.errors import AgentError
from remote.core.layout import Root
from remote.verbs.answer import out


def exec_job(root: Root, a: argparse.Namespace) -> None:
    from remote.jobs.store import resolve
    from remote.run import inside

    job_id = resolve(root, a.job)
    plan = inside.plan(root, job_id, None if a.shell else (a.command or ""))
    if shutil.which(plan.argv[0], path=plan.env.get("PATH")) is None:
        raise AgentError("{} is not on this host's PATH: nothing ran".format(plan.argv[0]),
                         "on a Slurm host install Slurm's client on the login node (gpujob doctor HOST checks it)"
                         if plan.argv[0] == "srun" else "install it on the host", "exec_missing")
    out(plan.doc)
    if a.check:
        return
    sys.stdout.flush()
    try:
        os.chdir(plan.cwd)
    except OSError:  # a Slurm job's folder as the login node sees it: srun --chdir says where it runs
        pass
    try:
        os.execvpe(plan.argv[0], plan.argv, plan.env)
    except OSError as e:  # the first line is written: the reason goes to stderr, the status says "not run"
        sys.stderr.write("gpujob exec: could not start {}: {}\n".format(plan.argv[0], e))
        sys.stderr.flush()
        os._exit(127)
