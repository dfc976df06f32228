"""A job whose pool instance is gone goes on on a new instance of the pool (``gpujob guard``, docs/pools.md).

Guard decides the instance is gone (it did not answer for the job's ``retry.move_after``); here the
old instance is released (it is billed while the provider keeps it), a new one taken or made, and
the job moved there from its newest checkpoint by the caller's ``move`` (gpujob move).
"""

from __future__ import annotations

from typing import Callable

from gpujob.config import pools
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject
from gpujob.usecases.pools.make import acquire, bind, unbind
from gpujob.usecases.pools.release import forget_profile, release

Note = Callable[[str], None]


def pool_of(host: str) -> str | None:
    """The pool whose instance ``host`` is (or was: one the provider released under a job); None for any other host."""
    row = pools.instance(host)
    return row["pool"] if row is not None else None


def to_new_instance(host: str, job_id: str, move: Callable[[str], JSONObject], note: Note) -> JSONObject:
    """Release the lost instance ``host``, move ``job_id`` to a new instance of its pool; the move's answer."""
    pool = pool_of(host)
    if pool is None:
        raise GpujobError(f"{host} is not an instance of a pool", "gpujob move JOB --to HOST")
    from gpujob.config.hosts import HostStore
    from gpujob.transport import mux

    try:
        mux.disconnect(HostStore().get(host, checked=False))  # its kept connection waits on a dead link
        release(host, note, keep_profile=True)
    except GpujobError as e:  # still counted in the pool's max: the new one may wait for a slot
        note(f"pool {pool}: {e}")
    new = acquire(pool, note=note)
    try:
        res = move(new)
    except BaseException:
        unbind(new, note)
        raise
    bind(new, job_id)
    forget_profile(host)  # the job is on the new one: the old profile (kept for the move) goes
    return res
