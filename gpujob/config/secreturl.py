"""A URL of a shared service (MLflow, a sweep's database) never carries its password in a file gpujob
keeps or sends: the job file is synced to the host, the ledger and the sweep records are plain files."""

from __future__ import annotations

from urllib.parse import urlsplit


def credential_in(url: str) -> bool:
    """True when ``url`` spells a password (``scheme://user:pass@host``) or a token in its query."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.password:
        return True
    query = parts.query.lower()
    return any(w + "=" in query for w in ("password", "token", "secret", "api_key", "apikey"))


def shown(url: str) -> str:
    """``url`` as a message may print it: a password or token replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that cannot be read>"
    netloc = parts.netloc
    if parts.password:
        netloc = netloc.replace(":" + parts.password + "@", ":***@", 1)
    query = "***" if credential_in(url) and parts.query else parts.query
    return parts._replace(netloc=netloc, query=query).geturl()
