"""A provider for the pool tests, at the same boundary as a real one's command line: ``create`` starts a
new OpenSSH sshd (its own port, host key, authorized key from GPUJOB_PUBLIC_KEY) and prints its id and
login line; ``release ID`` ends it; ``list`` and ``stock`` answer from the folder's files.

    python provider.py DIR create|release ID|list|stock

Files of DIR that change its answers (the tests write them): ``stock`` (printed by stock),
``fail-after-id`` (create prints the id, then fails), ``hang-after-id`` (then never answers), ``release-hangs`` (release never answers),
``json`` (create answers in JSON, with a root folder of the instance's own).
Each instance is a folder DIR/<id> with its sshd's pid; ``released`` lists the ids released.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def create(base: Path) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ident = f"sshd-{port}"
    d = base / ident
    d.mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True)
    ak = d / "authorized_keys"
    ak.write_text(os.environ["GPUJOB_PUBLIC_KEY"] + "\n")
    ak.chmod(0o600)
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nAuthorizedKeysFile {ak}\n"
        f"PidFile {d / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nMaxSessions 50\nMaxStartups 50\n"
        # the sessions' shell as tests/conftest.py LOGIN_ENV leaves it (no pyenv init a login)
        f"SetEnv OMP_NUM_THREADS=1 SHLVL=1 PATH={Path(sys.executable).parent}:/usr/bin:/bin\nLogLevel ERROR\n")
    (d / "env").write_text(f"{os.environ.get('GPUJOB_REGION', '')} {os.environ.get('GPUJOB_GPU', '')}\n")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=open(d / "sshd.log", "ab"), start_new_session=True)
    (d / "pid").write_text(str(proc.pid))
    print(f"id: {ident}", flush=True)
    (d / "said-id").touch()  # the id is out: a test may interrupt the submit now
    if (base / "hang-after-id").exists():
        time.sleep(600)
    if (base / "fail-after-id").exists():
        print(f"quota exceeded while attaching the disk (token {os.environ.get('PROVIDER_TOKEN')})", file=sys.stderr)
        return 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    user = os.environ.get("USER", "root")
    if (base / "json").exists():  # the other shape: JSON, with a disk of the instance's own
        print(json.dumps({"host": "127.0.0.1", "port": port, "user": user, "id": ident, "root": str(d / "root")}))
    else:
        print(f"ssh -p {port} {user}@127.0.0.1")
    return 0


def release(base: Path, ident: str) -> int:
    if (base / "release-hangs").exists():
        time.sleep(600)
    assert os.environ["GPUJOB_INSTANCE_ID"] == ident
    pid = int((base / ident / "pid").read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and b"Z" not in _state(pid):
        time.sleep(0.05)
    with open(base / "released", "a") as f:
        f.write(ident + "\n")
    return 0


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"Z"


def main(argv: list[str]) -> int:
    base, verb = Path(argv[0]), argv[1]
    if verb == "create":
        return create(base)
    if verb == "release":
        return release(base, argv[2])
    if verb == "list":
        gone = set((base / "released").read_text().split()) if (base / "released").exists() else set()
        print("\n".join(d.name for d in sorted(base.glob("sshd-*")) if d.name not in gone))
        return 0
    if verb == "stock":
        print((base / "stock").read_text() if (base / "stock").exists() else "")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
