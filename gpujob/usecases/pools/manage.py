"""``gpujob pool add/ls/rm/release``: a pool's settings, and its instances with their jobs and costs."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable

from gpujob.bundle import import_remote
from gpujob.config import pools
from gpujob.config.pools import Pool
from gpujob.errors import GpujobError

Note = Callable[[str], None]


def add_pool(name: str, settings: Mapping[str, Any], replace: bool = False) -> dict[str, Any]:
    """Check and save pool ``name``; its settings back."""
    pools.check_pool_name(name)
    given = {k: v for k, v in settings.items() if v is not None}
    for key in ("keep_warm", "boot_timeout", "stock_wait"):
        if given.get(key):
            try:
                import_remote("core.protocol").parse_duration(given[key])
            except ValueError as e:
                raise GpujobError(f"--{key.replace('_', '-')}: {e}", "nothing was saved") from None
    if int(given.get("max", 1)) < 1:
        raise GpujobError("--max must be 1 or more", "nothing was saved")
    for key in ("create", "release"):
        if not str(given.get(key) or "").strip():
            raise GpujobError(f"a pool needs a {key} command", f"--{key} CMD (docs/pools.md); nothing was saved")
    pool = Pool(name=name, **given)
    pools.save_pool(pool, replace=replace)
    if not pool.identity:  # the pool's own key, its public half given to create as GPUJOB_PUBLIC_KEY
        from gpujob.usecases.pools.make import pool_key

        pool_key(pool)
    return {"added": name, **pool.to_dict()}


def remove_pool(name: str, release_all: bool, say: Note) -> dict[str, Any]:
    """Forget pool ``name``; refused while it has instances, unless ``release_all`` releases them first."""
    from gpujob.usecases.pools.release import release

    pools.get_pool(name)
    live = pools.instances(name, live_only=True)
    if live and not release_all:
        raise GpujobError(f"pool {name} has {len(live)} instance(s): "
                          + ", ".join(f"{r['name']} ({r['state']}{', job ' + r['job_id'] if r['job_id'] else ''})"
                                      for r in live),
                          f"gpujob pool rm {name} --release releases them first (their jobs end with them)")
    released = []
    for r in live:
        if r["state"] == "creating" and not r["id"]:
            continue
        release(r["name"], say)
        released.append(r["name"])
    pools.remove_pool(name)
    return {"removed": name, "released": released}


def list_instances(say: Note, everything: bool = False) -> dict[str, Any]:
    """Every pool and its instances (each with its job and its cost so far), after releasing what is due."""
    from gpujob.usecases.pools.release import mark_gone, release_due

    errors = release_due(say)
    for p in pools.all_pools():
        try:
            mark_gone(p, say)
        except GpujobError as e:
            errors.append(str(e))
    now = time.time()
    rows: list[dict[str, Any]] = []
    for r in pools.instances(live_only=not everything):
        iv = pools.interval_of(r)
        end = r["released_at"] or now
        rows.append({**r, "age_s": round(end - r["made_at"], 1) if r["made_at"] else None,
                     "cost": pools.interval_cost(iv, now) if iv else None})
    return {"pools": [{"name": p.name, **p.to_dict()} for p in pools.all_pools()], "instances": rows,
            "errors": errors}
