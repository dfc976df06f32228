"""The provider's ``balance`` command (``gpujob budget set --balance CMD``), run under bash on this machine.

As the power commands (usecases/power/commands.py): the secrets file's entries in its environment
(an API token), its output shown with those values blanked, ended with its process group past its
time limit. Its last line must be a number: the account's balance, in the budget's currency.
"""

from __future__ import annotations

import math
import os
import re

from gpujob import helpercmd
from gpujob.errors import GpujobError

BALANCE_TIMEOUT_S = float(os.environ.get("GPUJOB_BALANCE_TIMEOUT", "60"))
REMEDY = "run it by hand; change it with gpujob budget set --balance CMD (its last line must be the balance)"


class BalanceError(GpujobError):
    """The balance command failed, hung, or printed no number as its last line."""


def read_balance(cmd: str, timeout: float = BALANCE_TIMEOUT_S) -> float:
    """The number the command prints last (``1,234.5``, ``¥ 88.10`` and ``88.1 CNY`` read as numbers)."""
    from gpujob.usecases.secrets.file import blank, secrets_from_env

    secrets = secrets_from_env(None)
    try:
        res = helpercmd.run(["bash", "-c", cmd], timeout, "the balance command", env={**os.environ, **secrets},
                            remedy=REMEDY)
    except helpercmd.TimedOut as e:
        raise BalanceError(blank(e.cause, secrets), REMEDY) from None
    lines = [x.strip() for x in blank(res.out, secrets).splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    if res.rc != 0:
        said = (blank(res.err, secrets).strip() or last).splitlines()[-3:]
        raise BalanceError(f"the balance command failed (exit {res.rc}): {' | '.join(said)[:300] or 'no output'}",
                           REMEDY)
    found = re.fullmatch(r"[^\d\-+.]*([-+]?\d[\d,]*(?:\.\d+)?)\s*[A-Za-z\u00a5\u5143$]*", last)
    value = float(found.group(1).replace(",", "")) if found else math.nan
    if not math.isfinite(value):
        raise BalanceError(f"the balance command printed {last[:80]!r} as its last line, not a number", REMEDY)
    return value
