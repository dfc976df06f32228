"""Lost jobs, found by the agent on its next start (any verb: ``gpujob status``, ``ls``,
``submit``) or by the idle watcher: ``lost`` cannot come from the supervisor that died.

Each job lost and not announced yet gets a ``lost_notified`` marker in its folder (created
exclusively: one sender per job) and a detached ``notify_lost`` process that sends it
(``events.notify_lost``), so the verb is not delayed. Below ``events`` and ``power``: the
idle watcher runs this check without importing the notifier.
"""

import os
import sys
from typing import List

from remote.core import layout, procs
from remote.core.layout import Root, agent_log, now
from remote.core.protocol import SETTLED
from remote.jobs import index as jobindex
from remote.jobs import store as jobs

LOST_MARK = "lost_notified"


def lost_candidates(root: Root) -> List[str]:
    """Jobs that are lost now and whose ``lost`` has not been sent yet (cheap: a folder scan)."""
    out = []  # type: List[str]
    if not root.jobs.is_dir():
        return out
    boot = None
    ids, _, done = jobindex.read(root)
    for p in (root.jobs / i for i in ids if i not in done):  # finished jobs are known from the index
        if (p / LOST_MARK).exists() or not (p / "spec.json").exists():
            continue
        job = root.job(p.name)
        if job.record().state in SETTLED:
            continue
        if not job.job_spec().notify.enabled:
            continue
        boot = boot or procs.boot_id()
        if jobs.judged(root, job, boot)[1].lost:
            out.append(p.name)
    return out


def spawn_lost_check(root: Root) -> None:
    """Hand each newly lost job to a detached ``notify-lost`` process (the verb is not delayed)."""
    try:
        found = lost_candidates(root)
    except Exception:
        return
    for job_id in found:
        mark = root.job(job_id).path / LOST_MARK
        try:
            fd = os.open(str(mark), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # one sender per job
            os.write(fd, str(now()).encode())
            os.close(fd)
        except OSError:
            continue
        import subprocess  # here, for the rare lost job: this check runs at every verb's start

        env = dict(os.environ, PYTHONPATH=str(layout.AGENT_DIR))
        try:
            subprocess.Popen([sys.executable, "-m", "remote", "--root", str(root.root), "notify_lost", job_id],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True, env=env)
        except OSError as e:
            agent_log(root, "could not start notify-lost for {}: {}".format(job_id, e))
