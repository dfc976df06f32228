"""The always-on exclusion layer under every sync: by place, by name and by content.

A rented instance belongs to someone else: a job file in the home folder once uploaded
gpujob's own private key (authorized on every instance the user rented), the secrets file
with every notification token, and ``~/.ssh``. The ignore files are the user's to edit (a
``!`` can take anything back), so this layer applies after them, to the plan's items.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from gpujob.config.paths import cache_dir, config_dir, state_dir

# folders whose content is credentials wherever they sit in a tree (their names, not paths)
SECRET_DIRS = {".ssh", ".gnupg", ".aws", ".azure", ".kaggle", ".huggingface", ".password-store", ".gpujob-keys"}
# (folder, file) pairs: a credential file inside a folder that holds other things too
SECRET_IN = {(".docker", "config.json"), ("huggingface", "token"), ("gcloud", "credentials.db"),
             ("gcloud", "access_tokens.db"), ("gcloud", "application_default_credentials.json"),
             ("gpujob", "secrets.env"), ("gpujob", "hosts.yaml")}
SECRET_NAMES = {".netrc", "_netrc", ".pgpass", ".git-credentials", "secrets.env"}
KEY_NAME = re.compile(r"id_(rsa|dsa|ecdsa|ed25519|ecdsa_sk|ed25519_sk|xmss)(_[^./]*)?$|.*\.(ppk|p12|pfx)$")
KEY_TEXT = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-|openssh-key-v1\0")
CONTENT_MAX = 1 << 20  # keys and .env files are small: larger files are not read for this check
KEY_HINTS = (b"PRIVATE KEY", b"PuTTY-User-Key-File-", b"openssh-key-v1\0")  # one is in any KEY_TEXT match
# files to read for their content before the plan is final; more are checked by the stream as it
# reads them (a first sync of 100,000 files read each one twice: 20 s of 110 under load)
PREPASS_MAX = 256
MIN_SECRET = 6  # shorter declared values would match ordinary text


def own_dirs() -> list[str]:
    """gpujob's config (keys, profiles, secrets), state and cache folders, resolved."""
    return [os.path.realpath(d()) + os.sep for d in (config_dir, state_dir, cache_dir)]


def _restored_code(top: str) -> bool:
    """A tree ``rerun`` rebuilt (a run's code, kept by gpujob): the user's code, not gpujob's own files."""
    from gpujob.config.ledger.code import restored_dir

    return top.startswith(os.path.realpath(restored_dir()) + os.sep)


def sendable(top: Path, files: list[tuple[str, os.stat_result]], values: dict[str, str]) -> list[tuple[str, os.stat_result]]:
    """The files of a tree (``tree_files``) that a sync sends: those this layer withholds left out."""
    import stat

    return [(rel, st) for rel, st in files if why_secret_name(rel) is None and not (
        stat.S_ISREG(st.st_mode) and why_secret_content(str(top / rel), st.st_size, values))]


def why_secret_name(rel: str) -> str | None:
    """Why the name ``rel`` (relative to its tree) is never sent, or None."""
    parts = rel.split("/")
    for d in parts[:-1]:
        if d in SECRET_DIRS:
            return f"inside a {d} folder"
    name = parts[-1]
    if name in SECRET_DIRS:
        return f"a {name} folder"
    if len(parts) > 1 and (parts[-2], name) in SECRET_IN:
        return "a credentials file"
    if name in SECRET_NAMES:
        return "a credentials file"
    if KEY_NAME.match(name):
        return "a private key's name"
    return None


def why_secret_content(path: str, size: int, values: dict[str, str]) -> str | None:
    """Why the file at ``path`` is never sent because of what it holds, or None."""
    if size > CONTENT_MAX or size <= 0:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read(CONTENT_MAX)
    except OSError:
        return None
    return why_secret_bytes(data, [(n, v.encode()) for n, v in values.items()])


def why_secret_bytes(data: bytes, values: list[tuple[str, bytes]]) -> str | None:
    """Why a file holding ``data`` is never sent, or None; ``values``: (name, encoded value)."""
    if any(h in data for h in KEY_HINTS) and KEY_TEXT.search(data):  # ``in`` first: 20x cheaper than the regex
        return "holds a private key"
    for name, value in values:
        if value in data:
            return f"holds the value of {name}"
    return None


class InStream:
    """The content check done by the stream's reader (``write_items``'s ``keep``) on the bytes it
    read anyway; ``done`` then takes what it left out of the plan, as ``withhold`` does."""

    def __init__(self, plan: Any, values: dict[str, str]) -> None:
        self.values = [(n, v.encode()) for n, v in values.items()]
        self.owner = {id(it): (tp, len(tp.local.prefix) + 1) for tp in plan.trees for it in tp.send}
        self.gone: list[tuple[Any, str]] = []

    def __call__(self, item: Any, data: bytes) -> bool:
        if not 0 < len(data) <= CONTENT_MAX or id(item) not in self.owner:
            return True
        why = why_secret_bytes(data, self.values)
        if why is not None:
            self.gone.append((item, why))
        return why is None

    def done(self, plan: Any) -> list[tuple[str, str]]:
        """Take the files left out of ``plan`` and of the records it leaves (after the stream)."""
        if not self.gone:
            return []
        out = {id(it) for it, _ in self.gone}
        for it, _ in self.gone:
            tp, n = self.owner[id(it)]
            tp.after.put(it.arcname[n:], None)  # not on the host: the record must not say it is
        for tp in plan.trees:
            tp.send = [it for it in tp.send if id(it) not in out]
        plan.send = [it for it in plan.send if id(it) not in out]
        gone = [(it.arcname, why) for it, why in self.gone]
        _tell(gone)
        return gone


def declared_values(spec: Any) -> dict[str, str]:
    """Every secret the user declared: the secrets file's entries, the job's ``secrets:`` from the
    environment, and literal keys under ``notify:``."""
    from gpujob.config.spec import notify_secrets
    from gpujob.usecases.secrets.file import default_secrets_file, parse_dotenv

    out: dict[str, str] = {}
    path = default_secrets_file()
    try:
        out.update(parse_dotenv(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError):
        pass
    out.update({n: os.environ[n] for n in spec.secrets if os.environ.get(n)})
    out.update(notify_secrets(spec.notify)[1])
    return {k: v for k, v in out.items() if isinstance(v, str) and len(v) >= MIN_SECRET}


def withhold(plan: Any, values: dict[str, str]) -> InStream | None:
    """Take every secret item out of ``plan`` (a sync ``Plan``) and of the records it leaves, each
    said on stderr. Names and places are judged here; contents here too when at most
    ``PREPASS_MAX`` files are to be read (a resubmit whose only differences are withheld files stays
    a no-op), else by the stream as it reads each file: the ``InStream`` check returned, to pass
    to ``write_items`` and then ``done``."""
    own = own_dirs()
    gone: list[tuple[str, str]] = []
    kept_all: list[Any] = []
    to_read = sum(1 for it in plan.send if not it.is_dir and it.link is None and 0 < it.size <= CONTENT_MAX)
    read_here = to_read <= PREPASS_MAX
    for tp in plan.trees:
        n = len(tp.local.prefix) + 1
        top = os.path.realpath(tp.local.top) + os.sep
        inside = [d[len(top):] for d in own if d.startswith(top)]  # gpujob's folders within this tree (rel + '/')
        all_own = any(top.startswith(d) for d in own) and not _restored_code(top)
        kept = []
        for it in tp.send:
            rel = it.arcname[n:]
            why = why_secret_name(rel)
            if why is None and (all_own or any((rel + "/").startswith(d) for d in inside)):
                why = "gpujob's own files"
            if why is None and read_here and not it.is_dir and it.link is None:
                why = why_secret_content(str(it.path), it.size, values)
            if why is None:
                kept.append(it)
                continue
            gone.append((it.arcname, why))
            tp.after.put(rel, None)  # not on the host: the record must not say it is
        tp.send = kept
        kept_all += kept
    if gone:
        ids = {id(k) for k in kept_all}
        plan.send = [it for it in plan.send if id(it) in ids]
        _tell(gone)
    return None if read_here else InStream(plan, values)


def _tell(gone: list[tuple[str, str]]) -> None:
    shown = ", ".join(f"{Path(a).name} ({w})" for a, w in gone[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
    sys.stderr.write(f"not uploaded, never sent to an instance: {shown}\n")
