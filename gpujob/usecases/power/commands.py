"""One ``power:`` command of a host profile, run on this machine, and what its answer means.

The commands are the provider's own CLI or API call, or the user's script (recipes: docs/power.md).
They get the secrets file's entries in their environment (an API token), plus ``GPUJOB_HOST``;
their output is shown with those values blanked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from gpujob import helpercmd
from gpujob.config.hosts import LOCAL, Host, SshTarget, parse_ssh_target
from gpujob.errors import GpujobError, HostError
from gpujob.transport import replies
from gpujob.usecases.secrets.file import blank, secrets_env

VERBS = ("on", "off", "state", "address")
# an ``on`` command says "no GPU free to start it" by exiting 75 (EX_TEMPFAIL) or by printing a line that
# matches this (the providers' own wordings; ``power.stock_out`` replaces it)
STOCK_OUT_RC = 75
STOCK_OUT = (r"(?i)(no|not enough|insufficient)( free| available)? (gpus?|resources?|machines?)"
             r"|gpus? (not|un)available|out of stock|sold out|资源不足|库存不足|GPU不足|无可用")
# a ``state`` command's last line, as one of three: on, off, or pending (on its way either way)
ON_WORDS = {"on", "running", "active", "started", "ready", "online", "up", "true"}
OFF_WORDS = {"off", "stopped", "exited", "shutdown", "poweroff", "powered_off", "offline", "down", "false", "stop"}
COMMAND_TIMEOUT_S = float(os.environ.get("GPUJOB_POWER_COMMAND_TIMEOUT", "180"))
# a ``state`` asked on the way of a quick command that found the host silent: at most this much of what is
# left of the command's budget (status, ls: their reply's 30 s, transport/replies.py)
QUICK_STATE_S = float(os.environ.get("GPUJOB_POWER_QUICK_TIMEOUT", "5"))
QUICK_BUDGET_S = replies.timeout("status")


class PowerError(GpujobError):
    """A power command failed or answered something gpujob cannot read."""


class StockOut(PowerError):
    """The provider has no GPU free to power the instance on."""


class PowerTimedOut(PowerError):
    """A power command did not answer within its limit (it was ended with its process group)."""


@dataclass
class Answer:
    verb: str
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def last_line(self) -> str:
        lines = [x.strip() for x in self.out.splitlines() if x.strip()]
        return lines[-1] if lines else ""


def command(host: Host, verb: str) -> str:
    cmd = (host.power or {}).get(verb)
    if not cmd and host.kind == LOCAL:  # host set cannot give it one: no remedy to send the user to
        raise HostError(f"'local' is this machine: gpujob does not power it {'on' if verb == 'on' else 'off'}"
                        if verb in ("on", "off") else "'local' is this machine: it has no power state to ask",
                        "power commands belong to SSH profiles (docs/power.md)")
    if not cmd:
        raise HostError(f"host {host.name} has no power.{verb} command",
                        f"gpujob host set {host.name} --power-{verb} CMD (recipes for vast.ai, RunPod, AutoDL: docs/power.md)")
    return cmd


def run(host: Host, verb: str, timeout: float = COMMAND_TIMEOUT_S) -> Answer:
    """Run ``power.VERB`` under bash on this machine, at most ``timeout`` s (then it is ended with its
    process group: ``PowerTimedOut``); its answer, secrets blanked."""
    cmd = command(host, verb)
    secrets = secrets_env()
    env = {**os.environ, **secrets, "GPUJOB_HOST": host.name}
    try:
        res = helpercmd.run(["bash", "-c", cmd], timeout, f"power.{verb} of {host.name}", env=env)
    except helpercmd.TimedOut as e:
        left = f" (pid {', '.join(map(str, e.survivors))} still there after SIGKILL)" if e.survivors else ""
        raise PowerTimedOut(
            f"power.{verb} of {host.name} gave no answer in {timeout:.3g} s and was ended with its processes{left}: "
            f"{blank(cmd, secrets)[:120]}",
            f"run it by hand to see where it hangs; gpujob host {'on' if verb == 'address' else verb} {host.name} "
            f"gives it {COMMAND_TIMEOUT_S:.0f} s (GPUJOB_POWER_COMMAND_TIMEOUT)") from None
    return Answer(verb, res.rc, blank(res.out, secrets), blank(res.err, secrets), res.seconds)


def _failed(host: Host, a: Answer) -> PowerError:
    said = (a.err.strip() or a.out.strip()).splitlines()[-3:]
    return PowerError(f"power.{a.verb} of {host.name} failed (exit {a.rc}): {' | '.join(said)[:300] or 'no output'}",
                      f"run it by hand: {command(host, a.verb)[:160]}; fix it with gpujob host set {host.name} "
                      f"--power-{a.verb} CMD")


def state(host: Host, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """``on``, ``off`` or ``pending``, as the ``state`` command's last line says (within ``timeout`` s)."""
    a = run(host, "state", timeout)
    if a.rc != 0:
        raise _failed(host, a)
    words = set(re.split(r"[^\w]+", a.last_line.lower()))
    if words & OFF_WORDS and not words & ON_WORDS:
        return "off"
    if words & ON_WORDS and not words & OFF_WORDS:
        return "on"
    return "pending"


def is_stock_out(host: Host, a: Answer) -> bool:
    pattern = (host.power or {}).get("stock_out") or STOCK_OUT
    return a.rc == STOCK_OUT_RC or (a.rc != 0 and re.search(pattern, a.out + "\n" + a.err) is not None)


def switch(host: Host, verb: str) -> Answer:
    """Run ``on`` or ``off``; ``StockOut`` when an ``on`` is refused for lack of GPUs."""
    a = run(host, verb)
    if a.rc != 0:
        if verb == "on" and is_stock_out(host, a):
            raise StockOut(f"{host.name} cannot be powered on: no GPU free ({a.last_line or a.err.strip()[-120:]})",
                           "wait (submit --wait-gpus 1h retries), or add another host to host:")
        raise _failed(host, a)
    return a


def address(host: Host) -> SshTarget:
    """The fields of the profile that the ``address`` command's last line gives: an ssh login line,
    ``user@host:port``, ``host:port`` or a bare port."""
    a = run(host, "address")
    if a.rc != 0:
        raise _failed(host, a)
    line = a.last_line
    if line.isdigit():
        line = f"{host.hostname}:{line}"
    try:
        return parse_ssh_target(line)
    except HostError as e:
        raise PowerError(f"power.address of {host.name} printed {line[:80]!r}, not an address ({e.cause})",
                         "it must print an ssh login line, user@host:port, host:port or a port as its last line") from None
