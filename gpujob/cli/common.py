"""Helpers every command module shares: the host store, the agent, job references, the transfer bar."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any, Callable

from gpujob.errors import GpujobError

Handler = Callable[[argparse.Namespace], int]


# ---- shared helpers ----------------------------------------------------------------------
def host_store() -> Any:
    from gpujob.config.hosts import HostStore

    return HostStore()


def agent_for(host_name: str | None) -> Any:
    from gpujob.transport.agent import connect_agent

    return connect_agent(host_store().get(host_name))


def host_for_job(args: argparse.Namespace) -> str | None:
    if getattr(args, "host", None):
        return args.host
    from gpujob.config import index

    return index.host_of(args.job) if getattr(args, "job", None) else None


def esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@contextlib.contextmanager
def transfer_bar(description: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar (bytes, rate, ETA) on a terminal; yields its update callback, or None."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), transient=True)
    task = bar.add_task(description, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


# ---- a command or a shell on a host -----------------------------------------------------
def command_after(args: argparse.Namespace, flags: tuple[str, ...], valued: tuple[str, ...] = ()) -> list[str]:
    """The words after HOST: our own options up to ``--`` (or the first other word) set, the rest is the command."""
    rest = list(args.cmd)
    while rest and (rest[0] in flags or rest[0] in valued):
        opt = rest.pop(0)
        if opt in valued:
            if not rest:
                raise GpujobError(f"{opt} needs a value", f"e.g. {opt} ~/.ssh/config")
            setattr(args, opt.lstrip("-").replace("-", "_"), rest.pop(0))
        else:
            setattr(args, opt.lstrip("-"), True)
    return rest[1:] if rest[:1] == ["--"] else rest
