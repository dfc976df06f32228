"""``gpujob`` command line: parse the arguments, call the use case, hand its result to ``gpujob.ui``.

Heavy modules (paramiko, rich, httpx) are imported inside the commands that use them, so
``gpujob --help`` and ``gpujob ls`` start fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpujob.cli.parser import build_parser
from gpujob.errors import GpujobError


def _searched(e: GpujobError, args: object) -> GpujobError:
    """"No job matches" names the host searched; without --host, also the others used from here."""
    from gpujob.errors import JobNotFound

    if not isinstance(e, JobNotFound):
        return e
    ref = getattr(args, "job", None)
    if isinstance(ref, str) and getattr(args, "command", None) in ("status", "pull", "tail", "stop", "logs", "plot"):
        from gpujob.config import remembered

        known = remembered.from_ledger(ref)
        if known and f" on {known['host']}" in e.cause:  # the host it ran on forgot it; the ledger did not
            e.remedy = (f"the run ledger remembers {known['job_id']} (gpujob runs): gpujob resume {known['job_id']} "
                        f"--host HOST continues it from its checkpoints (the mirror, a pull here, shared storage)"
                        + (f"; gpujob pull {known['job_id']} --from mirror brings the newest" if known.get("mirror") else ""))
            return e
    if getattr(args, "host", None):
        return e
    from gpujob.config import index

    others = [h for h in index.hosts() if f" on {h}" not in e.cause]
    if others:
        e.remedy = f"not looked for on {', '.join(others)} (this laptop's job index knows no such job): " \
                   f"--host HOST searches one; gpujob ls lists every host's jobs"
    return e


def _late_dest(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """``pull JOB --latest DEST``: argparse fills an optional second positional (as empty) together with
    the first, so a DEST written after an option would be refused; it is the pull's folder."""
    if getattr(args, "command", None) == "pull" and args.dest == "gpujob-pulls" and len(extra) == 1 \
            and not extra[0].startswith("-"):
        args.dest = extra[0]
        return
    parser.error(f"unrecognized arguments: {' '.join(extra)}")


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=words[0] if words and not words[0].startswith("-") else None)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _late_dest(parser, args, extra)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 0
    as_json = getattr(args, "json", False)
    if getattr(args, "wide", False) or getattr(args, "columns", None):
        from gpujob.ui.plaintable import choose

        choose(args.wide, args.columns)
    try:
        return args.fn(args)
    except GpujobError as e:
        from gpujob.ui.output import error

        error(_searched(e, args), as_json)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os._exit(0)
    except Exception as e:  # noqa: BLE001 - one paragraph, not a traceback; GPUJOB_DEBUG=1 shows it
        if os.environ.get("GPUJOB_DEBUG"):
            raise
        from gpujob.errors import unexpected
        from gpujob.ui.output import error

        err = unexpected(e)
        error(err, as_json)
        return err.exit_code
