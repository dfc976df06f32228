"""Helpers the command modules share: the host store, the agent, the API client, showing a result, the words after HOST."""

from __future__ import annotations

import argparse
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


def client(host: str | None) -> Any:
    """A ``gpujob.api.Client`` pinned to ``host`` (``--host``), else finding each job's host in the index."""
    from gpujob.api.client import Client

    return Client(host)


def show(args: argparse.Namespace, result: Any, draw: Callable[[Any], None]) -> int:
    """A command's result: its JSON document with --json, else drawn by ``draw``."""
    if getattr(args, "json", False):
        from gpujob.ui.output import print_json

        print_json(result.to_json())
    else:
        draw(result)
    return 0


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
