"""Giving a pool's instances back: ``release`` with the instance's id, then its profile forgotten.

A release that fails or hangs (bounded: ``GPUJOB_POOL_RELEASE_TIMEOUT``) leaves the instance
``release-failed``: still billed, shown by ``pool ls`` with the way on. ``release_due`` is what
every ``pool ls`` (and the watcher) does: an idle instance past its keep-warm is released, one
whose maker died half-way is released, one the provider's ``list`` no longer has is marked gone.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

from gpujob.bundle import import_remote
from gpujob.config import pools
from gpujob.config.pools import InstanceRow, Pool
from gpujob.errors import GpujobError
from gpujob.usecases.pools import provider
from gpujob.usecases.pools.provider import ProviderError

Note = Callable[[str], None]
RELEASE_TIMEOUT_S = float(os.environ.get("GPUJOB_POOL_RELEASE_TIMEOUT", "120"))


def release(name: str, say: Note, forget: bool = False, keep_profile: bool = False) -> InstanceRow:
    """Run the pool's ``release`` for instance ``name`` (``forget``: do not, it was released by hand) and
    forget its profile (``keep_profile``: later, a move from it needs it); ProviderError (the instance
    then ``release-failed``) when it did not."""
    row = pools.instance(name)
    if row is None:
        raise GpujobError(f"no instance {name!r} in any pool", "gpujob pool ls lists them")
    if row["state"] == "released":
        return row
    pool = pools.get_pool(row["pool"])
    pools.put(name, state="releasing")
    if row["id"] and not forget:
        try:
            said = provider.run(pool, "release", row["id"], timeout=RELEASE_TIMEOUT_S)
            if said.rc != 0:
                raise provider.failed(pool, "release", said, row["id"])
        except ProviderError as e:
            pools.put(name, state="release-failed", note=e.cause[:300])
            raise ProviderError(f"{e.cause}; instance {row['id']} may still run and be billed",
                                f"gpujob pool release {name} tries again; released in the provider's console: "
                                f"gpujob pool release {name} --forget") from None
    now = time.time()
    pools.put(name, state="released", released_at=now)
    if not keep_profile:
        forget_profile(name)
    say(f"pool {pool.name}: released {name} (instance {row['id'] or 'none'})")
    row["state"], row["released_at"] = "released", now
    return row


def forget_profile(name: str) -> None:
    """The instance's profile, its connection and its host key go (the provider reuses the address); its
    jobs leave the job index (the run ledger keeps them: runs, cost, resume from a mirror)."""
    from gpujob.config import index
    from gpujob.config.hosts import HostStore
    from gpujob.errors import HostError
    from gpujob.transport.ssh import forget_host_key
    from gpujob.usecases.hosts.connection import remove_host

    index.forget({str(e.get("job_id")) for e in index.entries() if e.get("host") == name}, host=name)
    try:
        host = HostStore().get(name, checked=False)
    except HostError:
        return
    forget_host_key(host)
    remove_host(name)


def _claim_idle(name: str, idle_since: float | None) -> bool:
    """Whether the idle instance is still idle since then (no submit took it): then it is being released."""
    with pools.instances_db(write=True) as db:
        cur = db.execute("UPDATE instances SET state = 'releasing' WHERE name = ? AND state = 'idle' AND idle_since IS ?",
                         (name, idle_since))
        return cur.rowcount == 1


def keep_warm_s(pool: Pool) -> float:
    if not pool.keep_warm:
        return 0.0
    try:
        return float(import_remote("core.protocol").parse_duration(pool.keep_warm))
    except ValueError:
        return 0.0


def release_due(say: Note, only: str | None = None) -> list[str]:
    """Release what is due (see the module's doc); the errors met, as lines (nothing raised)."""
    errors: list[str] = []
    now = time.time()
    by_name = {p.name: p for p in pools.all_pools()}
    if not by_name:  # no pool: the ledger is not opened (guard asks every pass)
        return errors
    for r in pools.instances(live_only=True):
        pool = by_name.get(r["pool"])
        if pool is None or (only and r["name"] != only):
            continue
        owner_gone = r["owner_pid"] is not None and not pools.pid_alive(r["owner_pid"])
        try:
            if r["state"] == "idle" and now >= (r["idle_since"] or 0) + keep_warm_s(pool):
                if _claim_idle(r["name"], r["idle_since"]):
                    release(r["name"], say)
            elif r["state"] in ("creating", "booting") and r["id"] and owner_gone:
                say(f"pool {pool.name}: {r['name']} (instance {r['id']}) was being made by a gpujob that ended: releasing it")
                release(r["name"], say)
            elif r["state"] == "busy" and not r["job_id"] and owner_gone:  # its submit died before the job started
                pools.put(r["name"], state="idle", idle_since=now, owner_pid=None)
        except GpujobError as e:
            errors.append(str(e))
    return errors


def listed_ids(pool: Pool) -> set[str] | None:
    """The ids the provider's ``list`` prints (a JSON list of ids or of objects with ``id``, else the first
    word of each line); None without a ``list`` command."""
    if not pool.listing:
        return None
    said = provider.run(pool, "list")
    if said.rc != 0:
        raise provider.failed(pool, "list", said)
    text = said.out.strip()
    if text.startswith("["):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, list):
            return {str(d.get("id")) if isinstance(d, dict) else str(d) for d in doc}
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def mark_gone(pool: Pool, say: Note) -> None:
    """Instances the provider no longer lists are released (by it): their time stops now."""
    ids = listed_ids(pool)
    if ids is None:
        return
    for r in pools.instances(pool.name, live_only=True):
        if r["id"] and r["state"] in ("busy", "idle", "release-failed") and r["id"] not in ids:
            pools.put(r["name"], state="released", released_at=time.time(),
                      note="gone from the provider's list")
            if r["state"] != "busy":  # a job's profile stays until guard moved it (pools/lost.py)
                forget_profile(r["name"])
            say(f"pool {pool.name}: {r['name']} (instance {r['id']}) is no longer listed by the provider: counted as released")
