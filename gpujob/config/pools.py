"""Pools of instances made on demand (docs/pools.md): the pools' settings and every instance they made.

A pool's settings live in ``pools.json`` in the config folder (mode 0600; the provider's commands,
never a credential: those stay in the secrets file). Its instances are rows of the run ledger's
SQLite file (table ``instances``): made → released, so the money an instance cost is known after
its profile is gone. Taking a free slot is one ``BEGIN IMMEDIATE`` transaction: two submits at once
never make more than the pool's ``max``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypedDict

from gpujob.config.paths import atomicfile, config_dir
from gpujob.errors import HostError

SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    name TEXT PRIMARY KEY, pool TEXT, id TEXT, hostname TEXT, port INTEGER, user TEXT, state TEXT,
    job_id TEXT, made_at REAL, ready_at REAL, idle_since REAL, released_at REAL,
    price_per_hour REAL, currency TEXT, region TEXT, gpu TEXT, owner_pid INTEGER, note TEXT
);
CREATE INDEX IF NOT EXISTS instances_pool ON instances(pool);
"""
# creating: a slot taken, no id yet; booting: the provider gave an id, SSH not yet answering;
# busy: a job runs there; idle: free (kept warm); releasing; released; release-failed (still billed)
LIVE = ("creating", "booting", "busy", "idle", "releasing", "release-failed")
_COLS = ("name", "pool", "id", "hostname", "port", "user", "state", "job_id", "made_at", "ready_at", "idle_since",
         "released_at", "price_per_hour", "currency", "region", "gpu", "owner_pid", "note")


@dataclass
class Pool:
    """A pool: the provider's commands and what gpujob may make with them."""

    name: str
    create: str
    release: str
    listing: str | None = None  # the `list` command (prints the ids that exist)
    stock: str | None = None
    identity: str | None = None  # the key instances accept; None: the pool's own key (GPUJOB_PUBLIC_KEY)
    max: int = 1
    keep_warm: str | None = None  # e.g. "10m": an idle instance waits this long for the next job
    price_per_hour: float | None = None
    currency: str = "CNY"
    regions: list[str] = field(default_factory=list)  # tried in order when `stock` says where GPUs are
    gpus: list[str] = field(default_factory=list)
    root: str | None = None  # gpujob's folder on an instance (default: the preset's)
    preset: str = "generic"
    boot_timeout: str = "10m"  # create's answer to SSH answering
    stock_wait: str = "30m"  # how long a submit waits for stock by default

    def command(self, verb: str) -> str | None:
        """The ``create``, ``release``, ``list`` or ``stock`` command."""
        return self.listing if verb == "list" else getattr(self, verb)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], "") and k != "name"}


class InstanceRow(TypedDict):
    """One instance a pool made (a row of ``instances``)."""

    name: str
    pool: str
    id: str | None
    hostname: str | None
    port: int | None
    user: str | None
    state: str
    job_id: str | None
    made_at: float | None
    ready_at: float | None
    idle_since: float | None
    released_at: float | None
    price_per_hour: float | None
    currency: str | None
    region: str | None
    gpu: str | None
    owner_pid: int | None
    note: str | None


class Interval(TypedDict):
    """What an instance is billed for: its life, made → released (None: still there)."""

    pool: str
    id: str | None
    host: str
    made_at: float
    released_at: float | None
    price_per_hour: float | None
    currency: str | None


def _path() -> Any:
    return config_dir() / "pools.json"


def check_pool_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,40}", name or ""):
        raise HostError(f"{name[:60]!r} cannot name a pool: use letters, digits, '_' and '-' (at most 41)",
                        "e.g. gpujob pool add a100s --create CMD --release CMD")
    return name


def all_pools() -> list[Pool]:
    raw = atomicfile().read(_path())
    import json

    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        raise HostError(f"{_path()} is not valid JSON", "fix it, or remove it and add the pools again") from None
    known = {f.name for f in fields(Pool)} - {"name"}
    return [Pool(name=n, **{k: v for k, v in d.items() if k in known}) for n, d in sorted(doc.items())
            if isinstance(d, dict)]


def get_pool(name: str) -> Pool:
    pools = {p.name: p for p in all_pools()}
    if name not in pools:
        known = ", ".join(pools) or "none yet"
        raise HostError(f"unknown pool {name[:60]!r} (known: {known})",
                        "add it with gpujob pool add NAME --create CMD --release CMD (docs/pools.md)")
    return pools[name]


def save_pool(pool: Pool, replace: bool = False) -> None:
    def edit(doc: dict[str, Any]) -> None:
        if pool.name in doc and not replace:
            raise HostError(f"pool {pool.name!r} exists", f"gpujob pool rm {pool.name} first, or add --force")
        doc[pool.name] = pool.to_dict()

    atomicfile().update_json(_path(), edit, 0o600)


def remove_pool(name: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc.pop(name, None)

    atomicfile().update_json(_path(), edit, 0o600)


# ---- instances ---------------------------------------------------------------------------
@contextmanager
def instances_db(write: bool = False) -> Iterator[sqlite3.Connection]:
    """The ledger's connection with the ``instances`` table; ``write``: inside one immediate
    transaction (the row counts read in it hold until it ends)."""
    from gpujob.config.ledger import open_ledger

    with open_ledger() as lg:
        lg.db.executescript(SCHEMA)
        if not write:
            yield lg.db
            return
        lg.db.execute("BEGIN IMMEDIATE")
        try:
            yield lg.db
        except BaseException:
            lg.db.execute("ROLLBACK")
            raise
        lg.db.execute("COMMIT")


def _rows(db: sqlite3.Connection, where: str = "", args: tuple[Any, ...] = ()) -> list[InstanceRow]:
    cur = db.execute(f"SELECT {', '.join(_COLS)} FROM instances {where} ORDER BY made_at, name", args)
    return [dict(zip(_COLS, r)) for r in cur.fetchall()]  # type: ignore[misc]  # the columns are InstanceRow's


def instances(pool: str | None = None, live_only: bool = False) -> list[InstanceRow]:
    where, args = [], []
    if pool:
        where.append("pool = ?")
        args.append(pool)
    if live_only:
        where.append(f"state IN ({', '.join('?' * len(LIVE))})")
        args += list(LIVE)
    with instances_db() as db:
        return _rows(db, ("WHERE " + " AND ".join(where)) if where else "", tuple(args))


def instance(name: str) -> InstanceRow | None:
    with instances_db() as db:
        got = _rows(db, "WHERE name = ?", (name,))
    return got[0] if got else None


def update(db: sqlite3.Connection, name: str, **values: Any) -> None:
    sets = ", ".join(f"{k} = ?" for k in values if k in _COLS)
    db.execute(f"UPDATE instances SET {sets} WHERE name = ?", [v for k, v in values.items() if k in _COLS] + [name])


def put(name: str, **values: Any) -> None:
    """Change an instance's row (one short transaction)."""
    with instances_db(write=True) as db:
        update(db, name, **values)


def pid_alive(pid: int | None) -> bool:
    """Whether the process that took a slot is still there (the agent's rule: a zombie is gone)."""
    from gpujob.bundle import import_remote

    return bool(import_remote("core.procs").pid_alive(pid))


def take_slot(pool: Pool) -> tuple[InstanceRow, bool] | None:
    """An idle instance of ``pool`` taken (busy, owned by this process), or a new slot (``creating``)
    when the pool has fewer than ``max``; (row, made_before). None: the pool is full.
    A slot whose maker died before the provider gave an id is freed here."""
    me = os.getpid()
    with instances_db(write=True) as db:
        for r in _rows(db, "WHERE pool = ? AND state = 'creating' AND id IS NULL", (pool.name,)):
            if r["owner_pid"] != me and not pid_alive(r["owner_pid"]):
                db.execute("DELETE FROM instances WHERE name = ?", (r["name"],))
        for r in _rows(db, "WHERE pool = ? AND state = 'idle'", (pool.name,)):
            update(db, r["name"], state="busy", owner_pid=me, idle_since=None, job_id=None)  # the watcher waits for bind
            r["state"], r["owner_pid"], r["idle_since"], r["job_id"] = "busy", me, None, None
            return r, True
        live = _rows(db, f"WHERE pool = ? AND state IN ({', '.join('?' * len(LIVE))})", (pool.name, *LIVE))
        if len(live) >= pool.max:
            return None
        n = 1 + max([int(m.group(1)) for r in _rows(db, "WHERE pool = ?", (pool.name,))
                     if (m := re.fullmatch(re.escape(pool.name) + r"-(\d+)", r["name"]))] or [0])
        return new_slot(db, pool, f"{pool.name}-{n}"), False


def new_slot(db: sqlite3.Connection, pool: Pool, name: str) -> InstanceRow:
    """A slot ``name`` of ``pool`` taken by this process (``creating``, no id yet); inside ``instances_db(write=True)``."""
    db.execute("INSERT INTO instances (name, pool, state, owner_pid, price_per_hour, currency) "
               "VALUES (?, ?, 'creating', ?, ?, ?)", (name, pool.name, os.getpid(), pool.price_per_hour, pool.currency))
    return _rows(db, "WHERE name = ?", (name,))[0]


def interval_of(r: InstanceRow) -> Interval | None:
    """The instance's billed life; None before the provider made it."""
    if r["made_at"] is None:
        return None
    return {"pool": r["pool"], "id": r["id"], "host": r["name"], "made_at": float(r["made_at"]),
            "released_at": r["released_at"], "price_per_hour": r["price_per_hour"], "currency": r["currency"]}


def instance_intervals() -> list[Interval]:
    """Every instance's billed life (made → released, None while it lives), for spend and cost."""
    return [iv for r in instances() if (iv := interval_of(r)) is not None]


def interval_cost(iv: Interval, now: float | None = None) -> float | None:
    """What an instance cost so far (or in all, released), to the cent; None without a price."""
    if not iv["price_per_hour"]:
        return None
    end = iv["released_at"] or now or time.time()
    return round(float(iv["price_per_hour"]) * max(0.0, end - iv["made_at"]) / 3600.0, 2)
