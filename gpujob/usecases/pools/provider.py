"""A pool's provider commands (create, release, list, stock), run on this machine as the power commands are.

Each runs under ``bash -c`` with the secrets file's entries in its environment (the token stays
out of the command line and of every file gpujob writes), bounded in time (its process group is
ended past the limit, gpujob/helpercmd.py), its output shown with the secrets blanked. A command
about one instance gets the instance's id as its last argument and in ``GPUJOB_INSTANCE_ID``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from gpujob import helpercmd
from gpujob.config.hosts import SshTarget, parse_ssh_target
from gpujob.config.pools import Pool
from gpujob.errors import GpujobError, HostError
from gpujob.usecases.power.commands import STOCK_OUT, STOCK_OUT_RC
from gpujob.usecases.secrets.file import blank, secrets_env

TIMEOUT_S = float(os.environ.get("GPUJOB_POOL_COMMAND_TIMEOUT", "300"))
# an id the command printed on a line of its own, before any later failure (kept: the instance is released)
_ID_LINE = re.compile(r"^\s*(?:instance[ _-]?)?id\s*[:=]\s*(\S+)\s*$", re.I | re.M)


@dataclass
class Said:
    rc: int
    out: str
    err: str

    def tail(self) -> str:
        said = (self.err.strip() or self.out.strip()).splitlines()[-3:]
        return " | ".join(said)[:300] or "no output"


class ProviderError(GpujobError):
    """A provider command failed or answered something gpujob cannot read; ``said``: what a command
    ended past its limit had printed (a create's id, for one)."""

    said: Said | None = None


class NoStock(ProviderError):
    """The provider has no GPU of the kinds the pool allows, where it allows."""


@dataclass
class Made:
    """What ``create`` answered: the instance's id and login (None where it gave none)."""

    id: str | None
    login: SshTarget | None
    root: str | None = None  # gpujob's folder on this instance, when create knows it better than the pool


def run(pool: Pool, verb: str, instance_id: str | None = None, env: dict[str, str] | None = None,
        timeout: float = TIMEOUT_S) -> Said:
    """``pool.VERB`` (its id appended as the last argument), at most ``timeout`` s; ProviderError past it."""
    cmd = pool.command(verb)
    if not cmd:
        raise HostError(f"pool {pool.name} has no {verb} command", f"gpujob pool add {pool.name} --{verb} CMD --force")
    secrets = secrets_env()
    full = {**os.environ, **secrets, **(env or {}), "GPUJOB_POOL": pool.name}
    argv = ["bash", "-c", cmd + (' "$@"' if instance_id is not None else ""), f"gpujob-pool-{verb}"]
    if instance_id is not None:
        full["GPUJOB_INSTANCE_ID"] = instance_id
        argv.append(instance_id)
    try:
        res = helpercmd.run(argv, timeout, f"{verb} of pool {pool.name}", env=full)
    except helpercmd.TimedOut as e:
        left = f" (pid {', '.join(map(str, e.survivors))} still there after SIGKILL)" if e.survivors else ""
        err = ProviderError(
            f"{verb} of pool {pool.name} gave no answer in {timeout:.3g} s and was ended with its processes{left}"
            + (f" (instance {instance_id})" if instance_id else ""),
            f"run it by hand to see where it hangs: {blank(cmd, secrets)[:120]}")
        err.said = Said(124, blank(e.out, secrets), blank(e.err, secrets))
        raise err from None
    except helpercmd.Interrupted as e:  # Ctrl-C: what it printed goes up (a create's id is recorded)
        e.out, e.err = blank(e.out, secrets), blank(e.err, secrets)
        raise
    return Said(res.rc, blank(res.out, secrets), blank(res.err, secrets))


def failed(pool: Pool, verb: str, said: Said, instance_id: str | None = None) -> ProviderError:
    on = f" for instance {instance_id}" if instance_id else ""
    return ProviderError(f"{verb} of pool {pool.name} failed{on} (exit {said.rc}): {said.tail()}",
                         f"run it by hand: {(pool.command(verb) or '')[:160]}")


def is_stock_out(said: Said) -> bool:
    return said.rc == STOCK_OUT_RC or (said.rc != 0 and re.search(STOCK_OUT, said.out + "\n" + said.err) is not None)


def read_made(said: Said) -> Made:
    """``create``'s answer: the last JSON object line ``{"host","port","user","id"}`` (and, optionally, ``root``),
    or an ssh login line
    (``ssh -p PORT user@host``) with the id on a line ``id: ID``; either may lack what a failure cut."""
    ident: str | None = None
    login: SshTarget | None = None
    root: str | None = None
    ids = _ID_LINE.findall(said.out)
    if ids:
        ident = ids[-1]
    for line in reversed([x.strip() for x in said.out.splitlines() if x.strip()]):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                ident = str(doc["id"]) if doc.get("id") not in (None, "") else ident
                if doc.get("host"):
                    user = f"{doc['user']}@" if doc.get("user") else ""
                    port = f"-p {int(doc['port'])} " if str(doc.get("port") or "").isdigit() else ""
                    login = parse_ssh_target(f"ssh {port}{user}{doc['host']}")
                root = str(doc["root"]) if doc.get("root") else None
                break
        if line.startswith("ssh ") or line.startswith("ssh://"):
            login = parse_ssh_target(line)
            break
    return Made(ident, login, root)


def stock(pool: Pool) -> list[tuple[str, str]]:
    """Where the pool may make an instance now: (region, gpu) pairs the ``stock`` command lists with a
    count above 0 (lines ``REGION GPU COUNT`` or a JSON list of ``{"region","gpu","count"}``), kept to
    the pool's regions and GPU kinds, in the pool's order. Without a ``stock`` command: the pool's
    choices as they are (create says when it cannot)."""
    if not pool.stock:
        return [(r, g) for r in pool.regions or [""] for g in pool.gpus or [""]]
    said = run(pool, "stock")
    if said.rc != 0:
        raise failed(pool, "stock", said)
    found: list[tuple[str, str, float]] = []
    text = said.out.strip()
    try:
        doc = json.loads(text) if text.startswith("[") else None
    except ValueError:
        doc = None
    if isinstance(doc, list):
        found = [(str(d.get("region", "")), str(d.get("gpu", "")), float(d.get("count") or 0))
                 for d in doc if isinstance(d, dict)]
    else:
        for line in text.splitlines():
            words = line.split()
            if len(words) == 3 and re.fullmatch(r"\d+(\.\d+)?", words[2]):
                found.append((words[0], words[1], float(words[2])))
            elif line.strip():
                raise ProviderError(f"stock of pool {pool.name} printed {line.strip()[:80]!r}, not REGION GPU COUNT",
                                    "it must print lines 'REGION GPU COUNT' or a JSON list of {region, gpu, count}")
    have = [(r, g) for r, g, n in found if n > 0]
    out = []
    for r in pool.regions or sorted({r for r, _ in have}):
        for g in pool.gpus or sorted({g for _, g in have}):
            if (r, g) in have:
                out.append((r, g))
    return out
