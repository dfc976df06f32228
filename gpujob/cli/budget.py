"""``gpujob budget``: the account's limits per day, week and month, what was spent, the balance."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpujob.config.budget import DEFAULT_CURRENCY, PERIODS


def add_parsers(add: Any, sub: Any) -> None:
    what = "the account's money: limits per day, week and month across every host, the balance (docs/budget.md)"
    bp = sub.add_parser("budget", help=what, description=what + "; with no ACTION: the limits, the spend, what is left")
    bp.set_defaults(fn=cmd_budget)
    bp.add_argument("--json", action="store_true", help="print JSON (schema: docs/json.md)")
    bsub = bp.add_subparsers(dest="budget_command", metavar="ACTION")
    s = add("set", cmd_budget_set, "set (or clear with '') the limits, the balance command and its threshold", bsub)
    for p in PERIODS:
        s.add_argument(f"--{p}", metavar="AMOUNT", help=f"the most the account may spend in a calendar {p} "
                       "(local time; weeks start on Monday); '' clears it")
    s.add_argument("--currency", default=DEFAULT_CURRENCY, help=f"of these amounts (default {DEFAULT_CURRENCY}): "
                   "jobs count against the limit of their host's currency")
    s.add_argument("--balance", metavar="CMD", help="the provider's command that prints the balance as its last line "
                   "(run under bash here, the secrets file's entries in its environment); '' clears it")
    s.add_argument("--balance-below", metavar="AMOUNT", help="notify once when the balance falls under this")
    s.add_argument("--notify", metavar="FILE", help="a job file (or one with only notify:) whose channels hear "
                   "about the account; '' clears it")


def cmd_budget(args: argparse.Namespace) -> int:
    from gpujob.ui.budget import budget_report
    from gpujob.ui.output import show
    from gpujob.usecases.budget.account import report

    doc = report(lambda s: None)
    show(doc, args.json, budget_report)
    return 0


def cmd_budget_set(args: argparse.Namespace) -> int:
    from gpujob.config.budget import parse_amount, save_budget
    from gpujob.errors import GpujobError

    limits = {p: parse_amount(f"--{p}", v) for p in PERIODS if (v := getattr(args, p)) is not None}
    extra: dict[str, Any] = {}
    if args.balance is not None:
        extra["balance_command"] = args.balance.strip() or None
    if args.balance_below is not None:
        extra["balance_below"] = parse_amount("--balance-below", args.balance_below)
    if args.notify is not None:
        if args.notify.strip():
            from gpujob.usecases.budget.channels import notify_section

            notify_section(args.notify)  # refused now, not at the first limit passed
            extra["notify_file"] = str(Path(args.notify).expanduser().resolve())
        else:
            extra["notify_file"] = None
    if not limits and not extra:
        raise GpujobError("nothing to set", "e.g. gpujob budget set --month 500 (gpujob budget set --help)")
    save_budget(args.currency, limits, extra)
    return cmd_budget(args)
