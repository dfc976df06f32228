"""``pull``: a job's checkpoints and logs from the host into a local folder, safely."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from gpujob.agent import Agent
from gpujob.errors import GpujobError, RemoteError


def safe_member(dest: Path, m: tarfile.TarInfo) -> Path:
    """Where ``m`` lands under ``dest``; refuses absolute paths, ``..`` and links that point out."""
    name = PurePosixPath(m.name)
    if name.is_absolute() or ".." in name.parts:
        raise GpujobError(f"refusing {m.name!r}: it would land outside {dest}", "the remote tree is not trusted; nothing more was written")
    target = (dest / Path(*name.parts)).resolve() if name.parts else dest.resolve()
    root = dest.resolve()
    if target != root and root not in target.parents:
        raise GpujobError(f"refusing {m.name!r}: it resolves outside {dest}", "a symlink in the way points out; remove it")
    if m.issym() or m.islnk():
        link = PurePosixPath(m.linkname)
        resolved = (target.parent / Path(*link.parts)).resolve() if not link.is_absolute() else Path(m.linkname)
        if link.is_absolute() or (resolved != root and root not in resolved.parents):
            raise GpujobError(f"refusing link {m.name!r} -> {m.linkname!r}: it points outside {dest}", "nothing more was written")
    if not (m.isfile() or m.isdir() or m.issym()):
        raise GpujobError(f"refusing {m.name!r}: not a file, folder or symlink", "nothing more was written")
    return target


def extract(stream: Any, dest: Path) -> dict[str, int]:
    """Unpack a tar stream under ``dest`` (files via a temporary name, then rename)."""
    dest.mkdir(parents=True, exist_ok=True)
    files = nbytes = 0
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for m in tar:
            target = safe_member(dest, m)
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".gpujob-part")
            if m.issym():
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                os.symlink(m.linkname, tmp)
            else:
                src = tar.extractfile(m)
                assert src is not None
                with open(tmp, "wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                os.chmod(tmp, m.mode & 0o777)
                os.utime(tmp, (m.mtime, m.mtime))
                nbytes += m.size
            os.replace(tmp, target)
            files += 1
    return {"files": files, "bytes": nbytes}


def pull(agent: Agent, job: str, dest: Path, what: list[str] | None = None) -> dict[str, Any]:
    """Copy the job's ``ckpt/`` and logs into ``dest/<job_id>/``."""
    st = agent.call("status", ["--job", job])["jobs"][0]
    job_id = st["job_id"]
    target = dest / job_id
    members = what or ["ckpt", "output.log", "metrics.jsonl", "events.jsonl", "status.json"]
    with agent.stream("send", ["--job", job_id, "--what", ",".join(members)]) as s:
        s.close_stdin()
        try:
            res = extract(s.stdout, target)
        except tarfile.TarError as e:
            s.wait()
            raise RemoteError(f"pull from {agent.host.name} broke off: {e} {s.stderr_text()[-500:]}", "run pull again") from None
        rc = s.wait()
    if rc != 0:
        raise RemoteError(f"pull failed on {agent.host.name}: {s.stderr_text()[-500:]}", "run pull again")
    return {"job_id": job_id, "dest": str(target), **res}
