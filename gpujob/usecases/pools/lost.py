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
from gpujob.usecases.pools.release import release

Note = Callable[[str], None]


def pool_of(host: str) -> str | None:
    """The pool whose live instance ``host`` is; None for any other host."""
    row = pools.instance(host)
    return row["pool"] if row is not None and row["state"] in pools.LIVE else None


def to_new_instance(host: str, job_id: str, move: Callable[[str], JSONObject], note: Note) -> JSONObject:
    """Release the lost instance ``host``, move ``job_id`` to a new instance of its pool; the move's answer."""
    pool = pool_of(host)
    if pool is None:
        raise GpujobError(f"{host} is not an instance of a pool", "gpujob move JOB --to HOST")
    try:
        release(host, note)
    except GpujobError as e:  # still counted in the pool's max: the new one may wait for a slot
        note(f"pool {pool}: {e}")
    new = acquire(pool, note=note)
    try:
        res = move(new)
    except BaseException:
        unbind(new, note)
        raise
    bind(new, job_id)
    return res
