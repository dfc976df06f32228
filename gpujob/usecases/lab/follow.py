"""Runs follow into MLflow while gpujob reads them, without the reading command waiting.

After a command wrote the ledger (a submit, a look that learnt something), it starts a detached
exporter unless one is running (``<state>/mlflow-export.lock``); the exporter sends what changed,
then keeps watching the ledger for ``LINGER_S`` (a ``status -w`` or the dashboard writes every few
seconds: one exporter serves them all) and leaves. A server that did not answer is said once, by
the next command, and its runs are sent when it answers again; a run it refuses (one deleted there)
is said once by the next command, and the other runs go. MLflow's client is imported only by the
exporter: the command pays one stat and, at most, the start of a process. Nothing here holds a
password: a URI holding one is written as ``secreturl.shown`` prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpujob.bundle import import_remote
from gpujob.config.paths import state_dir

LINGER_S = float(os.environ.get("GPUJOB_MLFLOW_LINGER", "30"))
WANTED = "mlflow-wanted"  # some job of this laptop names a server in its job file (env: MLFLOW_TRACKING_URI)
LOCK = "mlflow-export.lock"
FAILED = "mlflow-export.failed"  # {uri, error, since}: the last export that a server refused
SAID = "mlflow-export.said"  # which failure (uri and since) a command has told
NOTES = "mlflow-export.notes"  # JSON lines {uri, job_id, run_id, why}: runs a server refused, until a command says them


def wanted() -> bool:
    if os.environ.get("GPUJOB_MLFLOW_FOLLOW") == "0":
        return False
    return bool(os.environ.get("MLFLOW_TRACKING_URI")) or (state_dir() / WANTED).exists()


def after_look() -> None:
    """A look that wrote nothing: an export a server refused earlier is tried again; refused runs said."""
    if (state_dir() / FAILED).exists():
        after_write(False)
    else:
        say_refused()


def after_write(names_server: bool) -> None:
    """The ledger changed: start the exporter where runs are exported. Never fails the command."""
    try:
        if names_server:
            (state_dir() / WANTED).touch()
        if not wanted():
            return
        say_failure_once()
        say_refused()
        if import_remote("core.filelock").held(state_dir() / LOCK):  # a running exporter reads the ledger again before it leaves
            return
        subprocess.Popen([sys.executable, "-m", "gpujob.usecases.lab.follow"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         close_fds=True, cwd="/")
    except OSError as e:
        print(f"gpujob: runs were not sent to MLflow ({e}); gpujob runs export --mlflow sends them", file=sys.stderr)


def say_failure_once() -> None:
    """The first command after an export failed says so; the next ones do not, until it fails anew.
    (What was said is its own file: the exporter, rewriting the failure, never undoes it.)"""
    from gpujob.config.secreturl import shown

    try:
        doc = json.loads((state_dir() / FAILED).read_text())
    except (OSError, ValueError):
        return
    said = state_dir() / SAID
    mark = f"{doc.get('uri')} {doc.get('since')}"
    try:
        if said.read_text() == mark:
            return
    except OSError:
        pass
    then = doc.get("next") or "they are sent when it answers (gpujob runs export --mlflow sends them now)"
    print(f"gpujob: MLflow at {shown(str(doc.get('uri')))} did not take the runs ({doc.get('error')}); {then}",
          file=sys.stderr)
    _write(said, mark)


def note_refused(refused: Sequence[Mapping[str, object]]) -> None:
    """The exporter's side: runs to be said by the next command (appended under the file's lock)."""
    if not refused:
        return
    fd = os.open(str(state_dir() / NOTES), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        import_remote("core.filelock").lock(fd)
        os.write(fd, "".join(json.dumps(r) + "\n" for r in refused).encode())
    finally:
        os.close(fd)


def say_refused() -> None:
    """The command's side: each run noted is said once (read and emptied under the lock)."""
    path = state_dir() / NOTES
    try:
        if path.stat().st_size == 0:
            return
        fd = os.open(str(path), os.O_RDWR)
    except OSError:
        return
    try:
        import_remote("core.filelock").lock(fd)
        text = os.read(fd, 1 << 20).decode(errors="replace")
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            from gpujob.usecases.lab.export import refusal_line

            print(f"gpujob: {refusal_line(r)}", file=sys.stderr)


def _write(path: Path, doc: dict | str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    os.replace(tmp, path)


def _ledger_version() -> float:
    from gpujob.config.ledger import open_ledger

    with open_ledger() as lg:
        return lg.db.execute("SELECT COALESCE(MAX(updated_at), 0) FROM runs").fetchone()[0]


def _export_once() -> bool:
    """One round; True when a server did not take the runs."""
    from gpujob.usecases.lab.export import PASSWORD, PASSWORD_NEXT, export

    doc = export()
    note_refused([r for r in doc["refused"] if r["new"]])
    failed = state_dir() / FAILED
    bad = {u: e for u, e in doc["servers"].items() if e}  # each URI as shown: no password
    if bad:
        uri, err = next(iter(bad.items()))
        try:
            old = json.loads(failed.read_text())
        except (OSError, ValueError):
            old = {}
        same = old.get("uri") == uri and old.get("since")
        _write(failed, {"uri": uri, "error": err, "since": old["since"] if same else time.time(),
                        **({"next": PASSWORD_NEXT} if err == PASSWORD else {})})
        return True
    if doc["servers"]:
        failed.unlink(missing_ok=True)
    return False


RETRY_S = 10.0  # a server that did not answer is tried again this often while the exporter lingers


def main() -> int:
    """The detached exporter: one per laptop (the lock), while the ledger keeps changing."""
    lock = state_dir() / LOCK
    filelock = import_remote("core.filelock")
    fd = os.open(str(lock), os.O_RDWR | os.O_CREAT, 0o600)
    if not filelock.lock(fd, blocking=False):
        os.close(fd)
        return 0
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    try:
        seen, failing, tried = None, False, 0.0
        quiet_since = time.monotonic()
        while True:
            now = _ledger_version()
            if now != seen or (failing and time.monotonic() - tried >= RETRY_S):
                failing, tried = _export_once(), time.monotonic()
                if now != seen:
                    seen, quiet_since = now, time.monotonic()
            if time.monotonic() - quiet_since >= LINGER_S:
                break
            time.sleep(1.0)
    finally:
        filelock.unlock(fd)
        os.close(fd)
    if _ledger_version() != seen:  # written between the last look and the unlock: one more round
        return main()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # detached: nobody reads its stderr; the next command says it
        try:
            from gpujob.config.secreturl import shown

            _write(state_dir() / FAILED, {"uri": shown(os.environ.get("MLFLOW_TRACKING_URI") or ""),
                                          "error": str(e)[:300], "since": time.time()})
        finally:
            sys.exit(1)
