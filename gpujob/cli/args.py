"""argparse types: each refuses a bad value with a message that names it, before any host is reached."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from gpujob.errors import GpujobError


def job_ref(text: str) -> str:
    """argparse type of a JOB argument: an id, an id's unique part, a job name, or last/@."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9@_][A-Za-z0-9@._-]{0,127}", text):  # "_": a host name (tunnel HOST)
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r} is not a job: give a job id, the end of one, or a job name (gpujob ls lists them)")
    return text


def number_type(kind: Callable[[str], float], lo: float, hi: float) -> Callable[[str], Any]:
    """argparse type of a number from ``lo`` to ``hi`` (nan and inf refused)."""
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not lo <= v <= hi:  # false for nan too
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is out of range: expected {lo:g} to {hi:g}")
        return v

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


PORT = number_type(int, 1, 65535)


PRICE = number_type(float, 0, 1e6)


def url_type(text: str) -> str:
    """argparse type of a mirror's address: an http(s) URL, or "" (clears)."""
    from urllib.parse import urlsplit

    try:
        ok = not text or (urlsplit(text).scheme in ("http", "https") and bool(urlsplit(text).hostname))
    except ValueError:
        ok = False
    if not ok or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not an http(s) URL, e.g. https://hf-mirror.com ('' clears)")
    return text


def address_type(text: str) -> str:
    """argparse type of ``--private-address``: a host name or IP address, or "" (clears)."""
    from gpujob.config.hosts import check_address

    try:
        return check_address(text) if text else text
    except GpujobError as e:
        raise argparse.ArgumentTypeError(e.cause) from None


def regex_type(text: str) -> str:
    """argparse type of ``--grep``: a pattern Python's ``re`` compiles."""
    import re

    try:
        re.compile(text.encode("utf-8", "surrogateescape"))  # as tail's filter compiles it
    except (re.error, OverflowError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a valid regular expression: {e} "
                                         "(Python syntax; escape ( [ * + ? with a backslash)") from None
    return text


def table_flags(p: argparse.ArgumentParser) -> None:
    """--wide and --columns of a command that prints a table (gpujob.ui.plaintable's rule)."""
    p.add_argument("--wide", action="store_true",
                   help="every column, nothing shortened (the terminal wraps what is wider than it)")
    p.add_argument("--columns", metavar="A,B,C",
                   help="these columns, in this order (names as the header shows them, any case; last_line for LAST LINE)")
