"""The laptop's watcher of one pool instance (started detached by ``submit --pool``):

    python -m gpujob.usecases.pools.watch INSTANCE

It asks the instance's agent how its job is (every ``GPUJOB_POOL_WATCH_INTERVAL`` s); once the job
ended the instance is idle, and past the pool's keep-warm (no other submit took it) it is released
with the pool's ``release`` command, which lives on this laptop with its credentials. One watcher
per instance (its lock): a second submit onto a warm instance leaves the watching to the first.
A laptop asleep meanwhile: the next ``pool ls`` releases what is due.
"""

from __future__ import annotations

import os
import sys
import time

from gpujob.bundle import import_remote
from gpujob.config import pools
from gpujob.config.paths import state_dir
from gpujob.errors import GpujobError


def interval() -> float:
    return float(os.environ.get("GPUJOB_POOL_WATCH_INTERVAL", "15"))


def job_ended(name: str, job_id: str) -> bool | None:
    """Whether the job on instance ``name`` ended; None when the instance did not answer."""
    from gpujob.config.hosts import HostStore
    from gpujob.transport.agent import connect_agent
    from gpujob.transport.jobview import JobView
    from gpujob.usecases.jobs import ops

    try:
        agent = connect_agent(HostStore().get(name))
        try:
            doc = ops.status(agent, job_id)
            ended = JobView(doc).state in ops.FINAL
            if ended:  # the ledger's last look, with the whole curve, before the instance goes
                from gpujob.usecases.experiments.record import observe
                from gpujob.usecases.jobs.watch import whole

                observe([doc], name, whole(agent))
            return ended
        finally:
            agent.close()
    except GpujobError:
        return None


LIST_EVERY_S = 60.0  # a silent instance: the provider's list asked at most this often


def watch(name: str) -> None:
    from gpujob.usecases.pools.release import keep_warm_s, mark_gone, release_due

    listed_at = 0.0
    while True:
        row = pools.instance(name)
        if row is None or row["state"] not in ("busy", "idle"):
            return  # released (or being released by another command), or never made
        ended = job_ended(name, row["job_id"]) if row["state"] == "busy" and row["job_id"] else False
        if ended:
            with pools.instances_db(write=True) as db:  # only if no submit took it meanwhile
                db.execute("UPDATE instances SET state = 'idle', idle_since = ? WHERE name = ? AND state = 'busy' "
                           "AND job_id = ?", (time.time(), name, row["job_id"]))
            continue
        if ended is None and time.monotonic() - listed_at >= LIST_EVERY_S:  # silent: did the provider release it?
            listed_at = time.monotonic()
            try:
                mark_gone(pools.get_pool(row["pool"]), lambda s: None)  # its time stops; guard moves its job
            except GpujobError:
                pass
        if row["state"] == "idle":
            pool = pools.get_pool(row["pool"])
            due = (row["idle_since"] or 0) + keep_warm_s(pool)
            if time.time() >= due:
                release_due(lambda s: None, only=name)  # a failure is kept on the instance's row (pool ls says it)
                continue
            time.sleep(min(interval(), max(0.05, due - time.time())))
            continue
        time.sleep(interval())


def main(argv: list[str]) -> int:
    name = argv[0]
    folder = state_dir() / "pool-watch"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    filelock = import_remote("core.filelock")
    fd = os.open(str(folder / f"{name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if not filelock.lock(fd, blocking=False):
            return 0  # watched already: that watcher follows the instance's new job too
        watch(name)
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # detached: nobody reads its stderr; the instance's row says it, pool ls shows it
        try:
            pools.put(sys.argv[1], note=f"watcher stopped: {str(e)[:200]}")
        finally:
            sys.exit(1)
