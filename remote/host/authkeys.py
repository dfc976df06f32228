"""``authkeys``: add or remove one public key in the files this host's sshd reads keys from (``host rekey``).

The files are the ones the sshd serving this session names in ``AuthorizedKeysFile`` (its own
``-f`` config, found by walking up from this process; else /etc/ssh/sshd_config), not only
``~/.ssh/authorized_keys``. A key is matched by its base64 blob as a field of a line, so a line
with options or another comment is still that key; every other byte of a file stays as it was.
A removal that would leave no file holding the ``keep`` key is refused: it would lock the
laptop out. A removal ``while_held`` a key happens only while that key has a line (an undo that
must not take away the last way in). Each edit replaces its file whole (a temporary file beside
it, fsynced, renamed over it, its mode and owner kept, the folder fsynced), under a lock on the
folder (two edits at once cannot undo each other), with SIGINT/SIGTERM/SIGHUP held off."""

import contextlib
import glob
import os
import pwd
import signal
import tempfile
import threading
from typing import Any, Dict, Iterator, List, Optional, TypedDict

from remote.core import filelock
from remote.core.errors import AgentError

DEFAULT_FILES = ".ssh/authorized_keys .ssh/authorized_keys2"


def _sshd_config() -> str:
    """The config file of the sshd this process runs under (its ``-f``), else the standard one."""
    pid = os.getppid()
    for _ in range(16):  # python <- shell <- sshd session <- sshd listener, a few more for safety
        try:
            with open("/proc/{}/cmdline".format(pid), "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
            with open("/proc/{}/status".format(pid)) as f:
                ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        except (OSError, StopIteration, ValueError):
            break
        # sshd rewrites its title: "sshd: /usr/sbin/sshd -D -f /etc/x [listener] 0 of 10-100 startups"
        words = argv if len(argv) > 1 else (argv[0].split() if argv else [])
        name = words[0] if words else ""
        if (name == "sshd:" or os.path.basename(name) == "sshd") and "-f" in words[:-1]:
            return words[words.index("-f") + 1]
        if ppid <= 1:
            break
        pid = ppid
    return "/etc/ssh/sshd_config"


def _setting(path: str, depth: int = 0) -> Optional[str]:
    """``AuthorizedKeysFile`` of a config (its ``Include``s followed), before any ``Match``; None: unset."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split("#", 1)[0].split(None, 1)
        if len(words) < 2:
            continue
        key, value = words[0].lower(), words[1].strip()
        if key == "match":
            return None
        if key == "authorizedkeysfile":
            return value
        if key == "include" and depth < 4:
            for pattern in value.split():
                full = pattern if pattern.startswith("/") else os.path.join("/etc/ssh", pattern)
                for inc in sorted(glob.glob(full)):
                    found = _setting(inc, depth + 1)
                    if found is not None:
                        return found
    return None


def key_files(config: Optional[str] = None) -> List[str]:
    """The files sshd reads this user's keys from, tokens expanded (``%h``, ``%u``, ``%U``, ``%%``)."""
    me = pwd.getpwuid(os.getuid())
    home = me.pw_dir  # what sshd expands %h and relative paths with
    out = []
    for word in (_setting(config or _sshd_config()) or DEFAULT_FILES).split():
        if word.lower() == "none":
            continue
        word = word.replace("%%", "\0").replace("%h", home).replace("%u", me.pw_name).replace("%U", str(os.getuid()))
        word = os.path.join(home, word.replace("\0", "%"))  # a relative path is the home folder's
        if word not in out:
            out.append(word)
    return out


def blob(line: str) -> str:
    """A public key line's base64 blob (the field after its type), or ""."""
    words = line.split()
    for i, w in enumerate(words[:-1]):
        if w.startswith(("ssh-", "ecdsa-", "sk-")):
            return words[i + 1]
    return ""


def _holds(data: bytes, blobs: List[str]) -> bool:
    return any(_has(line, blobs) for line in data.splitlines())


def _has(line: bytes, blobs: List[str]) -> bool:
    fields = line.decode("utf-8", "replace").split()
    return any(b and b in fields for b in blobs)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _insert(data: bytes, line: bytes, near: List[str]) -> bytes:
    """``line`` right after the first line of a ``near`` key (else at the end), so that taking it out
    again gives back the very bytes there were (a last line without its newline stays so)."""
    lines = data.splitlines(True)
    at = next((i + 1 for i, x in enumerate(lines) if _has(x, near)), len(lines))
    if at and not lines[at - 1].endswith(b"\n"):
        lines[at - 1] += b"\n"
    return b"".join(lines[:at] + [line] + lines[at:])


def _replace(path: str, data: bytes) -> None:
    """``data`` into ``path`` at once (a temporary file beside it, fsynced, renamed over it), its mode
    and owner kept, the folder fsynced (the rename survives a crash); through a link."""
    real = os.path.realpath(path)
    try:
        st: Optional[os.stat_result] = os.stat(real)
    except FileNotFoundError:
        st = None
    folder = os.path.dirname(real)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gpujob-authkeys.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.chmod(tmp, st.st_mode & 0o7777 if st else 0o600)
            if st and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                try:  # sshd's StrictModes refuses a key file owned by another user: never change owners
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
                except OSError as e:
                    raise AgentError("cannot keep the owner of {} ({}): it was left as it was".format(real, e),
                                     "run gpujob host rekey as the user who owns that file") from None
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # a filesystem that cannot fsync a folder: the rename is as durable as it allows
    finally:
        os.close(dfd)


@contextlib.contextmanager
def _guarded(files: List[str]) -> Iterator[None]:
    """One edit at a time (a lock on the first file's folder: no extra file) with the signals a
    cut login or a Ctrl-C sends held off, so that no edit stops half way."""
    held = {}
    if threading.current_thread() is threading.main_thread():  # (a verb run in a thread cannot set them)
        held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    fd = -1
    try:
        folder = os.path.dirname(os.path.realpath(files[0])) if files else ""
        if folder and os.path.isdir(folder):
            fd = os.open(folder, os.O_RDONLY)
            filelock.lock(fd)
        yield
    finally:
        if fd >= 0:
            os.close(fd)
        for s, h in held.items():
            signal.signal(s, h)


def change(req: Dict[str, Any], config: Optional[str] = None) -> "KeysChanged":
    """``add`` (a key line: put where a ``near`` key's line is, else in the first file), then drop every
    line of the ``remove`` blobs unless that would leave no line of ``keep`` (refused), or ``while_held``
    has no line (nothing removed, ``held_back``). What was done, per file."""
    files = key_files(config)
    with _guarded(files):
        return _change(req, files)


class _Changed(TypedDict):
    files: List[str]  # the authorized_keys files sshd reads
    added: Optional[str]  # the file the new line went to
    removed: Dict[str, int]  # file -> lines taken out


class KeysChanged(_Changed, total=False):
    """What an ``authkeys`` change did (the laptop's rekey reads it)."""

    held_back: bool  # nothing removed: ``while_held`` had no line left


def _change(req: Dict[str, Any], files: List[str]) -> KeysChanged:
    near = [b for b in req.get("near") or [] if isinstance(b, str)]
    remove = [b for b in req.get("remove") or [] if isinstance(b, str)]
    keep = req.get("keep") if isinstance(req.get("keep"), str) else ""
    while_held = req.get("while_held") if isinstance(req.get("while_held"), str) else ""
    held = {p: _read(p) for p in files}
    done: KeysChanged = {"files": files, "added": None, "removed": {}}
    add = req.get("add") if isinstance(req.get("add"), str) else ""
    if add:
        new = blob(add)
        if not new or "\n" in add or "\r" in add:
            raise AgentError("not a public key line: {!r}".format(add[:80]), "run gpujob host rekey again")
        where = next((p for p in files if _holds(held[p], [new])), None)
        if where is None:
            where = next((p for p in files if _holds(held[p], near)), files[0] if files else None)
            if where is None:
                raise AgentError("this host's sshd reads no authorized_keys file (AuthorizedKeysFile none)",
                                 "its keys come from elsewhere (an AuthorizedKeysCommand): change them there by hand")
            os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
            held[where] = _insert(held[where], add.encode() + b"\n", near)
            _replace(where, held[where])
        done["added"] = where
    if remove and while_held and not any(_holds(held[p], [while_held]) for p in files):
        done["held_back"] = True  # that key has no line any more: what is to be removed is the way in
        remove = []
    if remove:
        kept = {p: b"".join(line for line in held[p].splitlines(True) if not _has(line, remove)) for p in files}
        if keep and not any(_holds(kept[p], [keep]) for p in files):
            raise AgentError("removing those keys would leave none the laptop logs in with",
                             "nothing was removed; run gpujob host rekey again")
        for p in files:
            if kept[p] != held[p]:
                _replace(p, kept[p])
                done["removed"][p] = len(held[p].splitlines()) - len(kept[p].splitlines())
    return done
