"""The lab's servers for the tests, real and on 127.0.0.1 with unique ports: an ``mlflow server``
(SQLite backend, a local artifact root) and a PostgreSQL cluster (Debian's, started as its
``postgres`` user). Leftovers of a killed earlier run are ended first."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.helpers import needs

PG_PREFIX = "gj-pg-"


def _end_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(15)


@dataclass
class MlflowServer:
    uri: str
    folder: Path


def start_mlflow(folder: Path) -> tuple[subprocess.Popen, MlflowServer]:
    needs("mlflow")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(folder / "server.log", "wb")
    p = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                          f"sqlite:///{folder / 'mlflow.db'}", "--default-artifact-root", f"file://{folder / 'artifacts'}",
                          "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True, stdin=subprocess.DEVNULL,
                         # no job runner (8 huey consumers busy on 2 cores): the tests track runs, they run no server jobs
                         env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240  # its first start migrates the database: a minute on 2 busy cores
    while True:
        try:
            if httpx.get(uri + "/health", timeout=2).status_code == 200:
                return p, MlflowServer(uri, folder)
        except httpx.HTTPError:
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            _end_group(p)
            raise AssertionError("mlflow server did not start: " + (folder / "server.log").read_text()[-2000:])
        time.sleep(0.5)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    p, srv = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    yield srv
    _end_group(p)


@dataclass
class Postgres:
    port: int
    user: str
    password: str
    db: str

    @property
    def url(self) -> str:
        """The URL a job file gives: no password (libpq reads PGPASSWORD)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.db}"


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _as_postgres(argv: list[str], **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True, timeout=120, **kw)


def _clean_leftovers() -> None:
    """Clusters of a killed earlier run: their server ended, their folder removed. A cluster's folder
    names the test process that made it (``gj-pg-<pid>-``): one whose maker lives belongs to a run
    going on beside this one (another xdist worker) and is left alone."""
    from remote.core.procs import pid_alive

    for base in glob.glob(os.path.join(tempfile.gettempdir(), PG_PREFIX + "*")):
        maker = os.path.basename(base)[len(PG_PREFIX):].split("-", 1)[0]
        if not maker.isdigit() or pid_alive(int(maker)):
            continue
        pidfile = Path(base) / "data" / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    needs("psycopg")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if os.geteuid() != 0 or not initdb or not pg_ctl or not shutil.which("runuser"):
        pytest.skip("needs PostgreSQL's server (apt-get install postgresql) and root to start it as postgres")
    _clean_leftovers()
    base = Path(tempfile.mkdtemp(prefix=f"{PG_PREFIX}{os.getpid()}-"))
    base.chmod(0o755)
    data = base / "data"
    data.mkdir()
    for d in (base, data):  # its socket, log and cluster: the server runs as postgres
        shutil.chown(d, "postgres", "postgres")
    pg = Postgres(port=free_port(), user="gj", password="pw-" + uuid.uuid4().hex, db="sweeps")
    pwfile = base / "pw"
    pwfile.write_text(pg.password + "\n")
    pwfile.chmod(0o644)
    r = _as_postgres([initdb, "-D", str(data), "-U", pg.user, f"--pwfile={pwfile}", "-A", "scram-sha-256"])
    pwfile.unlink()
    assert r.returncode == 0, r.stderr
    r = _as_postgres([pg_ctl, "-D", str(data), "-l", str(base / "log"), "-w", "-t", "120", "-o",
                      f"-p {pg.port} -k {base} -c listen_addresses=127.0.0.1", "start"])
    log = base / "log"
    assert r.returncode == 0, r.stderr + (log.read_text() if log.exists() else "")
    try:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=pg.port, user=pg.user, password=pg.password, dbname="postgres",
                             autocommit=True) as con:
            con.execute(f"CREATE DATABASE {pg.db}")
        yield pg
    finally:
        _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"])
        shutil.rmtree(base, ignore_errors=True)
