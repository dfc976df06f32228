"""Where a sweep's Optuna study lives: this laptop's ``<state>/sweeps.sqlite`` by default, or a storage
the lab shares (``sweep.storage``: any Optuna RDB URL such as ``postgresql://alice@db/sweeps``, or a
journal file on shared storage), so several laptops add trials to one study.

A shared URL never holds its password (the job file is synced to hosts; this laptop records which
storage a sweep is in): PostgreSQL's client reads ``PGPASSWORD`` or ``~/.pgpass``, MySQL's its option
files. Optuna is passed in by the sweep (imported there only)."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from gpujob.config.paths import state_dir
from gpujob.config.secreturl import credential_in, shown
from gpujob.errors import GpujobError, SpecError
from gpujob.jsontypes import JSONObject

RDB = ("sqlite://", "postgresql://", "postgresql+psycopg2://", "postgres://", "mysql://", "mysql+pymysql://")
RECORD = "sweep-storages.json"  # sweep name -> the storage it is in (no password: refused above)


def local_url() -> str:
    return "sqlite:///" + str(state_dir() / "sweeps.sqlite")


def check(url: Any) -> str | None:
    """Why ``url`` is no storage a sweep can use ('' / None when it is one)."""
    if not isinstance(url, str) or not url.strip():
        return "expected a storage URL (postgresql://user@host/db) or a journal file path"
    if credential_in(url):
        return (f"{shown(url)} holds a password, and the job file is sent to the host: put it in PGPASSWORD "
                "or ~/.pgpass on each laptop (MySQL: its option file)")
    if url.startswith("postgres://"):
        return "write postgresql:// (SQLAlchemy's name for PostgreSQL)"
    if not (url.startswith(RDB) or url.startswith("journal:") or url.startswith("/")):
        return f"{shown(url)} is no Optuna storage (postgresql://, mysql://, sqlite:///, or a journal file: /path or journal:/path)"
    return None


def shared(url: str | None) -> bool:
    return bool(url) and url != local_url()


def open_storage(optuna: Any, url: str | None) -> Any:
    """Optuna's storage for ``url`` (None: this laptop's)."""
    url = url or local_url()
    if url.startswith("journal:") or url.startswith("/"):
        path = url[len("journal:"):] if url.startswith("journal:") else url
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(path))
    kwargs: JSONObject = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except ImportError as e:
            raise GpujobError(f"the sweep's storage {shown(url)} needs a database driver that is not installed ({e})",
                              "pip install 'gpujob[lab]' (PostgreSQL: psycopg)") from None
        except Exception as e:  # SQLAlchemy's OperationalError and kin: the database's own words
            text = " ".join(str(e).split())
            if attempt < 4 and ("already exists" in text or "duplicate key" in text):
                # two laptops opening a new database at once both make Optuna's tables: the loser, again
                time.sleep(0.2 + random.random() * (attempt + 1))
                continue
            raise GpujobError(f"the sweep's storage {shown(url)} could not be opened ({_cause(text)})",
                              "check the database is up and reachable, and its password in PGPASSWORD or "
                              "~/.pgpass") from None
    raise AssertionError("unreachable")


def _cause(text: str) -> str:
    """The database's words without SQLAlchemy's statement and background link."""
    return text.split(" [SQL:")[0].split(" (Background on this error")[0][:300]


def _record_path() -> Path:
    return state_dir() / RECORD


def remember(name: str, url: str | None) -> None:
    """This laptop's note of which storage holds ``name`` (``sweep status NAME`` reads it)."""
    if not shared(url):
        return
    path = _record_path()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {}
    doc[name] = url
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def storage_of(name: str, given: str | None) -> str | None:
    """The storage of the sweep ``name``: ``given`` (--storage), else what this laptop noted, else its own."""
    if given:
        why = check(given)
        if why:
            raise SpecError(f"--storage: {why}", "e.g. --storage postgresql://alice@db.lab/sweeps")
        return given
    try:
        return json.loads(_record_path().read_text()).get(name)
    except (OSError, ValueError):
        return None


def laptop_id() -> str:
    """This laptop's id in a shared study: its trials are the ones it follows and resumes."""
    path = state_dir() / "laptop-id"
    try:
        return path.read_text().strip()
    except OSError:
        pass
    ident = uuid.uuid4().hex[:12]
    tmp = path.with_name(f"laptop-id.{os.getpid()}.tmp")
    tmp.write_text(ident)
    try:
        os.link(tmp, path)  # first writer wins; a racing one reads the winner's
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()
