"""An instance of a pool for a submit: an idle one taken, else one made (``submit --pool``, docs/pools.md).

Making one: a slot under the pool's ``max`` (else wait, said, for one to free), ``stock`` asked
for the regions and GPU kinds the pool allows (none: wait with a countdown), ``create`` with the
choice in ``GPUJOB_REGION``/``GPUJOB_GPU``. The id is recorded as soon as create answers, before
the wait for SSH: an instance that does not come up, or whose create failed after printing its
id, is released, never left running unrecorded. The instance becomes a host profile named after
its slot (``POOL-N``), marked as the pool's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Callable

from gpujob import helpercmd
from gpujob.backoff import delays
from gpujob.bundle import import_remote
from gpujob.config import pools
from gpujob.config.hosts import Host, HostStore
from gpujob.config.pools import Pool
from gpujob.errors import ConnectError, GpujobError, HostKeyChanged
from gpujob.usecases.pools import provider
from gpujob.usecases.pools.provider import NoStock, ProviderError
from gpujob.usecases.pools.release import release

Note = Callable[[str], None]


def seconds(pool: Pool, key: str) -> float:
    try:
        return float(import_remote("core.protocol").parse_duration(getattr(pool, key)))
    except ValueError as e:
        raise GpujobError(f"{key.replace('_', '-')} of pool {pool.name}: {e}", f"gpujob pool add {pool.name} ... --force") from None


def _poll() -> float:
    return float(os.environ.get("GPUJOB_POOL_POLL", "5"))


def acquire(name: str, wait: float | None = None, note: Note | None = None) -> str:
    """The profile name of an instance of pool ``name`` that is this submit's (busy, owned by this
    process): an idle one, else one made. ``wait``: seconds to wait for a free slot and for stock
    (default the pool's ``stock_wait``)."""
    say = note or (lambda s: None)
    pool = pools.get_pool(name)
    limit = wait if wait is not None else seconds(pool, "stock_wait")
    t0 = time.monotonic()
    said_full = False
    while True:
        got = pools.take_slot(pool)
        if got is not None:
            break
        waited = time.monotonic() - t0
        busy = [f"{r['name']} ({r['job_id'] or r['state']})" for r in pools.instances(name, live_only=True)]
        if waited >= limit:
            raise ProviderError(f"pool {name} has {len(busy)} instances of its max {pool.max}, all taken: "
                                f"{', '.join(busy)}; none freed in {waited:.0f} s",
                                f"submit again later, raise the max (gpujob pool add {name} ... --max N --force), "
                                "or give the submit longer (--wait-gpus 2h)")
        if not said_full:
            say(f"pool {name}: all {pool.max} instances taken ({', '.join(busy)}); waiting for one to free "
                f"(up to {limit:.0f} s)")
            said_full = True
        time.sleep(min(_poll(), max(0.1, limit - waited)))
    row, existing = got
    if existing:
        say(f"pool {name}: {row['name']} (instance {row['id']}) is free: the job goes there")
        return row["name"]
    try:
        return make(pool, row["name"], t0 + limit, say)
    except BaseException:
        cut = pools.instance(row["name"])
        if cut is not None and cut["state"] == "creating" and not cut["id"]:  # nothing made: the slot goes
            with pools.instances_db(write=True) as db:
                db.execute("DELETE FROM instances WHERE name = ?", (row["name"],))
        raise


def make(pool: Pool, name: str, deadline: float, say: Note) -> str:
    """Create the instance of slot ``name`` (waiting for stock until ``deadline``) and wait for SSH."""
    waits = delays(_poll(), 60.0)
    while True:
        places = provider.stock(pool)
        for region, gpu in places:
            made = _create(pool, name, region, gpu, say)
            if made:
                return _until_ready(pool, name, say)
        left = deadline - time.monotonic()
        kinds = "/".join(pool.gpus) or "any GPU"
        where = "/".join(pool.regions) or "any region"
        if left <= 0:
            raise NoStock(f"pool {pool.name}: no {kinds} in stock in {where}"
                          + (" (create said so)" if places else ""),
                          "submit again later, allow more kinds or regions (gpujob pool add ... --gpu A --gpu B "
                          "--force), or wait longer (--wait-gpus 2h)")
        pause = min(next(waits), left)
        say(f"pool {pool.name}: no {kinds} in stock in {where}; trying again in {pause:.0f} s "
            f"({left:.0f} s left to wait)")
        time.sleep(pause)


def _create(pool: Pool, name: str, region: str, gpu: str, say: Note) -> bool:
    """One ``create``; True: an instance with a login was made and recorded; False: a stock out.
    An instance it made half-way is released before the error goes on."""
    env = {"GPUJOB_INSTANCE_NAME": name, "GPUJOB_REGION": region, "GPUJOB_GPU": gpu,
           "GPUJOB_PUBLIC_KEY": public_key(pool)}
    at = " ".join(x for x in (gpu, region and f"in {region}") if x)
    say(f"pool {pool.name}: creating {name}" + (f" ({at})" if at else ""))
    t0 = time.time()
    hung: ProviderError | None = None
    try:
        said = provider.run(pool, "create", env=env)
    except ProviderError as e:
        if e.said is None or provider.read_made(e.said).id is None:
            e.remedy = (f"an instance it may have made is not known to gpujob: look at the provider's console; "
                        f"{e.remedy}")
            raise
        said, hung = e.said, e  # it printed an id before it hung: that instance is recorded and released below
    except helpercmd.Interrupted as e:  # Ctrl-C: an id it printed is recorded; the next pool ls or guard releases it
        ident = provider.read_made(provider.Said(130, e.out, e.err)).id
        if ident is not None:
            pools.put(name, id=ident, state="creating", made_at=t0, region=region or None, gpu=gpu or None)
            say(f"pool {pool.name}: interrupted after create made instance {ident}: gpujob pool ls releases it")
        raise
    made = provider.read_made(said)
    if made.id is None and made.login is not None and said.rc == 0:
        made.id = f"{made.login.get('hostname')}:{made.login.get('port', 22)}"  # a login line alone names it
    if made.id is not None:  # recorded before anything else can fail: released below, or by the next pool ls
        pools.put(name, id=made.id, state="booting", made_at=t0, region=region or None, gpu=gpu or None,
                  **{k: v for k, v in (made.login or {}).items() if k in ("hostname", "port", "user")})
    if said.rc != 0 or made.login is None:
        why = hung or provider.failed(pool, "create", said) if said.rc != 0 else ProviderError(
            f"create of pool {pool.name} printed no login (ssh -p PORT user@host, or JSON with host and port): "
            f"{said.out.strip()[-200:] or 'no output'}", "fix the create command (docs/pools.md)")
        if made.id is not None:
            say(f"pool {pool.name}: create failed after making instance {made.id}: releasing it")
            pools.put(name, note=why.cause[:300])
            try:
                release(name, say)
            except ProviderError as e:
                raise ProviderError(f"{why.cause}; releasing the instance it made then failed: {e.cause}",
                                    e.remedy) from None
        if said.rc != 0 and provider.is_stock_out(said):
            say(f"pool {pool.name}: no GPU free" + (f" ({at})" if at else ""))
            if made.id is not None:
                _new_slot(pool, name)
            return False
        raise why
    login = made.login
    pool_host = Host(name=name, hostname=login["hostname"], port=login.get("port", 22), user=login.get("user", "root"),
                     identity_file=pool.identity or str(pool_key(pool)), root=made.root or pool.root, preset=pool.preset,
                     price_per_hour=None, currency=pool.currency, pool=pool.name, instance_id=made.id)
    HostStore().save(pool_host)
    return True


def _new_slot(pool: Pool, name: str) -> None:
    """A half-made instance released on a stock out: the slot is taken again for the next try."""
    with pools.instances_db(write=True) as db:
        row = pools.instance(name)
        if row is not None:
            db.execute("UPDATE instances SET name = ? WHERE name = ?", (f"{name}~{row['id']}", name))
            pools.new_slot(db, pool, name)


def _until_ready(pool: Pool, name: str, say: Note) -> str:
    """SSH with backoff until the instance answers (up to the pool's boot_timeout); else it is released."""
    from gpujob.transport.ssh import open_client

    host = HostStore().get(name)
    deadline = time.monotonic() + seconds(pool, "boot_timeout")
    waits = delays(0.5, 10.0)
    say(f"pool {pool.name}: {name} made (instance {host.instance_id}); waiting for SSH at {host.address}")
    while True:
        try:
            open_client(host, retries=1).close()
            break
        except HostKeyChanged:
            raise
        except ConnectError as e:
            if time.monotonic() >= deadline:
                say(f"pool {pool.name}: {name} does not accept SSH: releasing it")
                release(name, say)
                raise ConnectError(f"instance {host.instance_id} of pool {pool.name} did not accept SSH at "
                                   f"{host.address} in {seconds(pool, 'boot_timeout'):.0f} s ({e.cause}); it was released",
                                   "check the create command's login line and the key it authorizes (docs/pools.md)") from None
        time.sleep(min(next(waits), max(0.0, deadline - time.monotonic())))
    pools.put(name, state="busy", ready_at=time.time())
    say(f"pool {pool.name}: {name} answers over SSH")
    return name


def pool_key(pool: Pool) -> object:
    from gpujob.config.keys import ensure_host_key

    return ensure_host_key(f"pool.{pool.name}")


def public_key(pool: Pool) -> str:
    """The public key line instances must accept (GPUJOB_PUBLIC_KEY for create)."""
    from pathlib import Path

    from gpujob.config.keys import pub_path

    key = Path(pool.identity).expanduser() if pool.identity else Path(str(pool_key(pool)))
    try:
        return pub_path(key).read_text().strip()
    except OSError:
        return ""


def bind(name: str, job_id: str) -> None:
    """The job runs on instance ``name``: recorded, and a laptop watcher releases it when the job ends."""
    pools.put(name, job_id=job_id, state="busy", owner_pid=None)
    start_watcher(name)


def unbind(name: str, note: Note | None = None) -> None:
    """The submit failed: the instance is free again (released now when the pool keeps none warm)."""
    from gpujob.usecases.pools.release import release_due

    pools.put(name, state="idle", idle_since=time.time(), owner_pid=None)
    release_due(note or (lambda s: None), only=name)


def start_watcher(name: str) -> None:
    subprocess.Popen([sys.executable, "-m", "gpujob.usecases.pools.watch", name], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
                     cwd="/")
