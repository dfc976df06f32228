"""``gpujob pool add/ls/rm/release`` and the pool side of ``submit --pool`` (docs/pools.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable


def _say(args: argparse.Namespace) -> Callable[[str], None]:
    from gpujob.ui.neutral import clean

    return lambda text: print(clean(text), file=sys.stderr)  # provider output may be quoted: cleaned


def cmd_pool_add(args: argparse.Namespace) -> int:
    from gpujob.ui import pools as ui
    from gpujob.ui.output import show
    from gpujob.usecases.pools.manage import add_pool

    settings = {"create": args.create, "release": args.release, "listing": args.list, "stock": args.stock,
                "identity": args.identity, "max": args.max, "keep_warm": args.keep_warm,
                "price_per_hour": args.price_per_hour, "currency": args.currency, "regions": args.region or None,
                "gpus": args.gpu or None, "root": args.root, "preset": args.preset,
                "boot_timeout": args.boot_timeout, "stock_wait": args.stock_wait}
    show(add_pool(args.name, settings, replace=args.force), args.json, ui.added)
    return 0


def cmd_pool_ls(args: argparse.Namespace) -> int:
    from gpujob.ui import pools as ui
    from gpujob.ui.output import show
    from gpujob.usecases.pools.manage import list_instances

    show(list_instances(_say(args), everything=args.all), args.json, ui.listing)
    return 0


def cmd_pool_rm(args: argparse.Namespace) -> int:
    from gpujob.ui import pools as ui
    from gpujob.ui.output import show
    from gpujob.usecases.pools.manage import remove_pool

    show(remove_pool(args.name, args.release, _say(args)), args.json, ui.removed)
    return 0


def cmd_pool_release(args: argparse.Namespace) -> int:
    from gpujob.ui import pools as ui
    from gpujob.ui.output import show
    from gpujob.usecases.pools.release import release

    show(dict(release(args.instance, _say(args), forget=args.forget)), args.json, ui.released)
    return 0


def take_instance(args: argparse.Namespace, wait: float | None) -> str:
    """``submit --pool``: an instance of the pool for the job, taken or made (its profile's name)."""
    from gpujob.errors import GpujobError
    from gpujob.usecases.pools.make import acquire

    if args.host:
        raise GpujobError("--pool and --host both name where the job goes", "give one of them; nothing was submitted")
    _admitted(args)
    return acquire(args.pool, wait=wait, note=_say(args))


def _admitted(args: argparse.Namespace) -> None:
    """The account's limits, before an instance is made for a job they refuse (the submit checks again, and caps)."""
    from gpujob.config.hosts import Host
    from gpujob.config.pools import get_pool
    from gpujob.config.spec import load_spec
    from gpujob.usecases.budget.gate import admit

    pool = get_pool(args.pool)
    admit(load_spec(args.job_file, list(args.set or [])),
          Host(name=pool.name, price_per_hour=pool.price_per_hour, currency=pool.currency))


@contextmanager
def given_back_on_failure(args: argparse.Namespace, instance: str | None) -> Iterator[None]:
    """A submit onto a pool instance that failed frees the instance (released when no keep-warm)."""
    try:
        yield
    except BaseException:
        if instance:
            from gpujob.usecases.pools.make import unbind

            unbind(instance, _say(args))
        raise


def bind_job(instance: str, job_id: str) -> None:
    from gpujob.usecases.pools.make import bind

    bind(instance, job_id)
