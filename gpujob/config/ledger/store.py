"""The ledger's SQLite file (``<state>/ledger.sqlite``): one row per job, written by every gpujob process.

WAL lets readers go on while one process writes; every write is one short transaction and a
busy database is waited for (``busy_timeout``), so concurrent submits, status polls and a sweep
never lose a row. Columns that are queried are columns; the rest of a run is JSON text.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, TypedDict, cast

from gpujob.config.paths import state_dir
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSON, JSONObject

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    job_id TEXT PRIMARY KEY, name TEXT, host TEXT, state TEXT,
    submitted_at REAL, started_at REAL, ended_at REAL, updated_at REAL,
    run_line TEXT, params TEXT, spec TEXT, job_file TEXT, overrides TEXT,
    git_commit TEXT, diff_hash TEXT, code_hash TEXT, env_hash TEXT, gpu TEXT, gpus INTEGER,
    final TEXT, best TEXT, series TEXT, loss_key TEXT,
    gpu_hours REAL, cost REAL, currency TEXT, price_per_hour REAL,
    parent TEXT, sweep TEXT, trial INTEGER, extra TEXT
);
CREATE INDEX IF NOT EXISTS runs_name ON runs(name);
CREATE INDEX IF NOT EXISTS runs_sweep ON runs(sweep);
CREATE INDEX IF NOT EXISTS runs_submitted ON runs(submitted_at);
CREATE TABLE IF NOT EXISTS diffs (hash TEXT PRIMARY KEY, text TEXT);
CREATE TABLE IF NOT EXISTS looks (job_id TEXT, full INTEGER, fp TEXT, PRIMARY KEY (job_id, full));
CREATE TABLE IF NOT EXISTS curves (job_id TEXT PRIMARY KEY, ended TEXT, series TEXT);
"""
JSON_COLS = ("params", "spec", "overrides", "final", "best", "series", "extra")
COLS = ("job_id", "name", "host", "state", "submitted_at", "started_at", "ended_at", "updated_at", "run_line",
        "params", "spec", "job_file", "overrides", "git_commit", "diff_hash", "code_hash", "env_hash", "gpu", "gpus",
        "final", "best", "series", "loss_key", "gpu_hours", "cost", "currency", "price_per_hour", "parent",
        "sweep", "trial", "extra")


class Mirrored(TypedDict):
    """A checkpoint the job's mirror holds (record.py's ``_live``)."""

    target: str
    name: str
    step: int | None


class NewestCheckpoint(TypedDict):
    """The newest complete checkpoint a look listed (``status JOB``): what a powered-off host may hold alone."""

    name: str
    step: int | None
    mtime: float | None


class LiveFigures(TypedDict, total=False):
    """Throughput, GPU use and the mirrored checkpoints as the newest look saw them (record.py's ``_live``)."""

    steps_per_s: float
    gpu_util: float
    mirrored: list[Mirrored]
    checkpoint: NewestCheckpoint  # kept by later looks that list no checkpoints (ls)


class MlflowTarget(TypedDict, total=False):
    """The job file's ``mlflow:`` section (where the laptop exports the run)."""

    tracking_uri: str
    experiment: str


class RunExtra(TypedDict, total=False):
    """The ``extra`` column: what record_submit and each look keep beside the columns."""

    snapshot: bool  # a tarball of the code was kept (rerun's)
    workdir: str
    mlflow: MlflowTarget
    live: LiveFigures
    directions: dict[str, str]  # metric -> maximize|minimize, as the job file set it (experiments/direction.py)


class LedgerRow(TypedDict, total=False):
    """One run as the ledger gives it back: the columns read (every one unless a query named fewer), a
    value never written None; the JSON columns decoded, holding what record.py wrote in them."""

    job_id: str
    name: str | None
    host: str | None
    state: str | None
    submitted_at: float | None
    started_at: float | None
    ended_at: float | None
    updated_at: float | None
    run_line: str | None
    params: JSONObject | None  # the run line's arguments and the Trainer's hparams: the user's values
    spec: JSONObject | None  # the job file as sent to the agent
    job_file: str | None
    overrides: list[str] | None  # the ``--set`` items that changed the job file
    git_commit: str | None
    diff_hash: str | None
    code_hash: str | None
    env_hash: str | None
    gpu: str | None
    gpus: int | None
    final: JSONObject | None  # the newest metrics as the status document gave them
    best: dict[str, float] | None  # each metric's best value (best_of)
    series: dict[str, list[list[JSON]]] | None  # each metric's curve: [step, value, wall time] points
    loss_key: str | None
    gpu_hours: float | None
    cost: float | None
    currency: str | None
    price_per_hour: float | None
    parent: str | None
    sweep: str | None
    trial: int | None
    extra: RunExtra | None
    directions: dict[str, str]  # not a column: ``runs``' word on which way each best went (maximize|minimize)


def ledger_path() -> Path:
    return state_dir() / "ledger.sqlite"


class LedgerDamaged(GpujobError):
    """The ledger's file is no SQLite database SQLite can read: it was kept aside under a new name."""


DAMAGE_WORDS = ("malformed", "not a database", "file is encrypted", "disk image")


def is_damage(e: BaseException) -> bool:
    """A file SQLite cannot read as a database (not a busy or locked one, nor a bug's bad SQL)."""
    return isinstance(e, sqlite3.DatabaseError) and any(w in str(e) for w in DAMAGE_WORDS)


def set_aside(path: Path, e: BaseException) -> LedgerDamaged:
    """Rename a damaged ledger (and its WAL files) to ``<name>.damaged-<UTC time>``: nothing in it is
    deleted, and the next command starts a new one. The error to raise, naming both files."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    try:
        path.rename(aside)
    except FileNotFoundError:  # another gpujob process met it first and kept it aside
        return LedgerDamaged(f"the run ledger {path} is damaged ({e}); another gpujob command kept it aside",
                             f"run the command again: a new, empty ledger is started; the damaged one is "
                             f"{path.name}.damaged-* in {path.parent}")
    for tail in ("-wal", "-shm"):  # a WAL belongs to the file it was written for
        side = path.with_name(path.name + tail)
        if side.exists():
            try:
                side.rename(aside.with_name(aside.name + tail))
            except OSError:
                pass
    return LedgerDamaged(
        f"the run ledger {path} is damaged ({e}): kept aside as {aside}",
        f"run the command again: gpujob starts a new, empty ledger (runs and compare list runs recorded from then "
        f"on); to bring back what can be read: sqlite3 {aside} .recover | sqlite3 {path}")


class Ledger:
    """A connection to the ledger; rows come back as dicts with their JSON columns decoded.

    A damaged file (``is_damage``) met on opening or inside ``with`` is kept aside (``set_aside``)
    and becomes ``LedgerDamaged``: commands that only record warn and go on, ``runs``/``compare``/
    ``rerun`` say it and exit 2."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._open(path)
        except sqlite3.DatabaseError as e:
            if not is_damage(e):
                raise
            self.close()
            raise set_aside(path, e) from None

    def _open(self, path: Path) -> None:
        self.db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        self.db.execute("PRAGMA busy_timeout=30000")
        # switching a new file to WAL, and its first schema, take a lock that SQLite does not wait for
        # (busy at once when another process opens it the same instant): tried again, as the busy wait would
        deadline = time.monotonic() + 30.0
        while True:
            try:
                if self.db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(SCHEMA)
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        if path.stat().st_mode & 0o777 != 0o600:
            path.chmod(0o600)

    def close(self) -> None:
        if getattr(self, "db", None) is not None:
            self.db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, kind: Any, e: BaseException | None, tb: Any) -> None:
        self.close()
        if e is not None and is_damage(e):  # a page read inside the block found the damage
            raise set_aside(self.path, e) from None

    def put(self, job_id: str, /, **fields: Any) -> None:
        """Insert the run or update the fields given (others keep their values); one transaction."""
        fields = {k: v for k, v in fields.items() if k in COLS and k != "job_id"}
        fields["updated_at"] = time.time()
        vals = {k: json.dumps(v) if k in JSON_COLS and v is not None else v for k, v in fields.items()}
        names = ", ".join(["job_id", *vals])
        marks = ", ".join("?" * (len(vals) + 1))
        sets = ", ".join(f"{k}=excluded.{k}" for k in vals)
        self.db.execute(f"INSERT INTO runs ({names}) VALUES ({marks}) ON CONFLICT(job_id) DO UPDATE SET {sets}",
                        [job_id, *vals.values()])

    def put_look(self, job_id: str, full: bool, fingerprint: str) -> None:
        """What a ``status``/``ls`` last learnt of the job (record.py's fingerprint), written with its row."""
        self.db.execute("INSERT OR REPLACE INTO looks VALUES (?, ?, ?)", (job_id, int(full), fingerprint))

    def put_curve(self, job_id: str, ended: str, series: dict[str, list[list[JSON]]]) -> None:
        """An ended job's whole curve (every point its host logged), read once at the end ``ended``
        (record.py); the row's ``series`` is its down-sampled copy."""
        self.db.execute("INSERT OR REPLACE INTO curves VALUES (?, ?, ?)", (job_id, ended, json.dumps(series)))

    def curve(self, job_id: str) -> tuple[str, dict[str, list[list[JSON]]]] | None:
        """(the end it was read at, the whole curve) of an ended job, if kept."""
        row = self.db.execute("SELECT ended, series FROM curves WHERE job_id=?", (job_id,)).fetchone()
        return (row[0] or "", json.loads(row[1] or "{}")) if row else None

    def curve_ends(self, job_ids: list[str]) -> dict[str, str]:
        """job id -> the end whose whole curve is kept (a job resumed and ended again has a new end)."""
        out: dict[str, str] = {}
        for i in range(0, len(job_ids), 500):  # an older SQLite takes at most 999 parameters
            part = job_ids[i:i + 500]
            out.update(self.db.execute(f"SELECT job_id, ended FROM curves WHERE job_id IN ({', '.join('?' * len(part))})",
                                       part).fetchall())
        return out

    def declared_direction(self, metric: str) -> str | None:
        """Which way ``metric`` gets better as the newest job file that set it said (``extra.directions``)."""
        path = f'$.directions."{metric}"'
        try:
            row = self.db.execute("SELECT json_extract(extra, ?) FROM runs WHERE json_extract(extra, ?) IS NOT NULL "
                                  "ORDER BY submitted_at DESC LIMIT 1", (path, path)).fetchone()
        except sqlite3.OperationalError:  # a name no JSON path can hold: no job file set it
            return None
        return row[0] if row else None

    def keep_diff(self, digest: str, text: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO diffs VALUES (?, ?)", (digest, text))

    def diff(self, digest: str) -> str | None:
        row = self.db.execute("SELECT text FROM diffs WHERE hash=?", (digest,)).fetchone()
        return row[0] if row else None

    def get(self, job_id: str) -> LedgerRow | None:
        row = self.db.execute(f"SELECT {', '.join(COLS)} FROM runs WHERE job_id=?", (job_id,)).fetchone()
        return _row(row) if row else None

    def find(self, ref: str) -> LedgerRow | None:
        """The newest run whose id, id prefix, id suffix or name is ``ref``."""
        exact = self.get(ref)  # a whole id (what compare and rerun mostly get): its key, not a scan of every id
        if exact is not None:
            return exact
        rows = self.db.execute(
            f"SELECT {', '.join(COLS)} FROM runs WHERE job_id=? OR name=? OR job_id LIKE ? ESCAPE '\\' OR job_id LIKE ? ESCAPE '\\' "
            "ORDER BY (name=?) DESC, submitted_at DESC",
            (ref, ref, _like(ref) + "%", "%-" + _like(ref) + "%", ref))
        # LIKE ignores case and matches inside a name: the job asked about is the one of that name, or
        # whose id ``ref`` begins past its name, or whose random end ``ref`` begins ("tiny" is not "tinyllama-…")
        return next((_row(r) for r in rows if _names(ref, r[0], r[1])), None)

    def all(self, name: str | None = None, sweep: str | None = None, with_series: bool = False) -> list[LedgerRow]:
        """Every run (of ``name`` / ``sweep``), oldest first; the curves only when asked for (they are big)."""
        cols = [c for c in COLS if with_series or c not in ("series", "spec")]
        where, args = [], []
        if name:
            where.append("name=?")
            args.append(name)
        if sweep:
            where.append("sweep=?")
            args.append(sweep)
        sql = f"SELECT {', '.join(cols)} FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        return [_row(r, cols) for r in self.db.execute(sql + " ORDER BY submitted_at", args)]

    def query(self, where: list[tuple[str, str, Any]], sort: tuple[str, bool] | None, limit: int,
              name: str | None = None, sweep: str | None = None, cols: tuple[str, ...] = COLS
              ) -> tuple[list[LedgerRow], int]:
        """(rows, how many match): the filters and the order run in SQLite, so only the rows shown are
        decoded. A key is a column, else a parameter, else a best then a final metric (``value_sql``)."""
        conds, args = [], []
        for col, val in (("name", name), ("sweep", sweep)):
            if val:
                conds.append(f"{col}=?")
                args.append(val)
        for key, op, want in where:
            expr, eargs = value_sql(key)
            if op == "~":
                conds.append(f"CAST({expr} AS TEXT) LIKE ? ESCAPE '\\'")
                args += eargs + ["%" + _like(str(want)) + "%"]
            else:
                conds.append(f"{expr} {SQL_OPS[op]} ?")
                args += eargs + [want]
        sql_where = " WHERE " + " AND ".join(conds) if conds else ""
        total = self.db.execute("SELECT COUNT(*) FROM runs" + sql_where, args).fetchone()[0]
        order = "submitted_at DESC"
        oargs: list[str] = []
        if sort:
            expr, oargs = value_sql(sort[0])
            order = f"({expr}) IS NULL, typeof({expr}) NOT IN ('integer', 'real'), {expr} {'DESC' if sort[1] else 'ASC'}"
            oargs = oargs * 3
        sql = f"SELECT {', '.join(cols)} FROM runs{sql_where} ORDER BY {order}" + (" LIMIT ?" if limit else "")
        rows = self.db.execute(sql, args + oargs + ([limit] if limit else []))
        return [_row(r, cols) for r in rows], total


SQL_OPS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "=", "==": "=", "!=": "!="}
PLAIN = set(COLS) - set(JSON_COLS)


def value_sql(key: str) -> tuple[str, list[str]]:
    """SQL for a run's value of ``key`` and its arguments (JSON paths are bound, never spliced)."""
    if key in PLAIN:
        return key, []
    paths = [f'$."{k}"' for k in dict.fromkeys([key, key.replace("-", "_")])]
    parts = [f"json_extract({col}, ?)" for col in ("params", "best", "final") for _ in paths]
    return "COALESCE(" + ", ".join(parts) + ")", [p for _ in ("params", "best", "final") for p in paths]


def _names(ref: str, job_id: str, name: str | None) -> bool:
    """Whether ``ref`` (no whole id) names the run ``job_id`` of ``name``: its name, an id prefix that
    reaches past the name, or a prefix of the id's random end."""
    return ref == name or (job_id.startswith(ref) and len(ref) > len(name or "")) \
        or job_id.rsplit("-", 1)[-1].startswith(ref)


def _like(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _row(row: tuple, cols: tuple[str, ...] | list[str] = COLS) -> LedgerRow:
    out = {k: json.loads(v) if k in JSON_COLS and v is not None else v for k, v in zip(cols, row)}
    return cast(LedgerRow, out)  # the columns of SCHEMA, each as ``put`` wrote it


def read_looks(job_ids: list[str]) -> dict[tuple[str, bool], str]:
    """The fingerprints ``put_look`` kept for these jobs, read without writing anything: the file is
    opened immutable (no lock, no -wal or -shm file made and removed, no chmod). A write under way
    in another process may not be seen yet; that costs the caller one write it did not need, and
    a missing file, an older ledger without the table or a read that fails returns nothing."""
    path = ledger_path()
    if not path.is_file():
        return {}
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            rows = []
            for i in range(0, len(job_ids), 500):  # an older SQLite takes at most 999 parameters
                part = job_ids[i:i + 500]
                marks = ", ".join("?" * len(part))
                rows += db.execute(f"SELECT job_id, full, fp FROM looks WHERE job_id IN ({marks})", part).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return {}
    return {(j, bool(full)): fp for j, full, fp in rows}


def open_ledger() -> Ledger:
    """The ledger of this laptop's state folder (made on first use, mode 0600)."""
    return Ledger(ledger_path())
