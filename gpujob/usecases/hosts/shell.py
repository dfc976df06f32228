"""``gpujob exec HOST -- CMD`` and ``gpujob ssh HOST``: a command, or a shell, where jobs run.

``exec`` runs one command over gpujob's own connection in the environment a job's run command
gets from the host: the profile's env (pip index, HF endpoint), network_turbo when it applies
to runs, the PATH prefix (the laptop's PATH on ``local``) and a login shell. Its output is
streamed (stderr merged into stdout, in order) and gpujob exits with the command's code. What
the host's login files print themselves (a platform's banner, a pyenv or conda warning) is kept
apart from it, on the channel's stderr: ``nvidia-smi --query... --format=csv`` or ``--json``
output stays the command's own. The command's shell prints a start mark first (cut from the
output): a login file that ends the shell (a MOTD script's ``exit 0``) leaves none, and exec
fails naming the login files instead of reporting the success of a command that never ran.

``ssh`` hands the terminal to OpenSSH, through a ``Host gpujob-NAME`` entry that gpujob keeps
in ``~/.ssh/config`` between marker lines, with gpujob's key and its known_hosts file (so a
changed host key is refused there too).
"""

from __future__ import annotations

import base64
import os
import shlex
import sys
import threading
from pathlib import Path
from typing import Any, Callable, TypedDict

from gpujob.config.hosts import LOCAL, Host, HostStore, check_profile
from gpujob.errors import ConnectError, GpujobError, HostError

BEGIN = "# >>> gpujob hosts (written by `gpujob ssh`; edits between these lines are replaced) >>>"
END = "# <<< gpujob hosts <<<"


def host_env(host: Host) -> dict[str, str]:
    """What a job's run command gets from the host profile (submit sends the same as host_env)."""
    env = dict(host.env)
    if host.kind == LOCAL:
        env.setdefault("GPUJOB_PATH_PREFIX", os.environ.get("PATH", ""))
    return env


def login_script(host: Host, command: str) -> str:
    """``bash -lc`` text: the profile's env, network_turbo (for runs), PATH prefix, then ``command``."""
    return env_script(host) + "\n" + command


def stdin_login(host: Host, command: str, mark: str) -> tuple[str, bytes]:
    """The remote command line for ``command`` and the bytes to write first on its stdin: the
    profile's settings (a pip index URL may carry a token) travel there, never in ``ps``.
    ``mark`` (ASCII, no quote) is printed first on the output once the login files are done:
    a login file that ends with ``exit`` ends the shell before it, and the command never ran."""
    script = base64.b64encode(env_script(host).encode()).decode()  # ASCII: read -N counts characters
    # fd 3 carries stdout past the login files (which print to the channel's stderr); the
    # command's own lines put it back, stderr merged so the two keep their order
    line = (f"printf %s {mark} >&3; exec 1>&3 2>&1 3>&-\n"
            f'IFS= read -r -N {len(script)} __gj && eval "$(printf %s "$__gj" | base64 -d)" && unset __gj || exit 125\n'
            + command)
    return f"cd ~ 2>/dev/null; exec bash -lc {shlex.quote(line)} 3>&1 1>&2", script.encode()


def env_script(host: Host) -> str:
    """Shell lines that give a command what a job's run command gets from the host profile."""
    env = host_env(host)
    lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items()) if k.replace("_", "").isalnum()]
    turbo = (env.get("GPUJOB_NETWORK_TURBO") or "").lower()
    if turbo in ("both", "run", "true", "1", "yes", "on"):
        f = shlex.quote(env.get("GPUJOB_NETWORK_TURBO_FILE") or "/etc/network_turbo")
        lines.append(f"[ -f {f} ] && . {f} >/dev/null 2>&1")
    lines.append('if [ -n "${GPUJOB_PATH_PREFIX:-}" ]; then export PATH="$GPUJOB_PATH_PREFIX:$PATH"; fi')
    return "\n".join(lines)


def command_text(argv: list[str]) -> str:
    """One argument is a shell command line as written; several are quoted word by word."""
    if not argv:
        raise GpujobError("no command given", "gpujob exec HOST -- nvidia-smi   (everything after -- runs there)")
    return argv[0] if len(argv) == 1 else shlex.join(argv)


class StartMark:
    """The command's output with the start mark cut from its head: passes on what follows the mark;
    ``before``, what came ahead of it (a login file that wrote to fd 3: the login files' output)."""

    HEAD_KEPT = 64 << 10  # a login file flooding fd 3 is not kept whole

    def __init__(self, mark: bytes, write: Callable[[bytes], None]) -> None:
        self.mark, self.write = mark, write
        self.seen = False
        self.head = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self.seen:
            self.write(chunk)
            return
        self.head += chunk
        at = self.head.find(self.mark)
        if at < 0:
            del self.head[:-self.HEAD_KEPT]
            return
        rest = bytes(self.head[at + len(self.mark):])
        del self.head[at:]
        self.seen = True
        if rest:
            self.write(rest)

    @property
    def before(self) -> str:
        return self.head.decode("utf-8", "replace")


def did_not_run(host: Host, rc: int, printed: str) -> HostError:
    """The login shell ended before the command: a login file ends with ``exit`` (a MOTD script's
    ``exit 0``), ``logout`` or ``exec``. Never the command's success: it never ran."""
    tail = [ln.strip() for ln in printed.splitlines() if ln.strip()][-5:]
    said = f"; they printed: {' | '.join(tail)}" if tail else ""
    where = ("they are this machine's: edit them here" if host.kind == LOCAL
             else f"edit them over gpujob ssh {host.name}, or ask the image's maker")
    return HostError(
        f"the command did not run on {host.name}: the host's login files ended the login shell before it "
        f"(exit status {rc}){said}",
        "remove the exit (or logout, exec) that ends them: a login shell reads /etc/profile (and /etc/profile.d/*), "
        f"then the first of ~/.bash_profile, ~/.bash_login, ~/.profile; {where}")


def run_exec(host: Host, argv: list[str], write: Callable[[bytes], None]) -> tuple[int, str]:
    """Run ``argv`` on ``host`` as described above; the command's exit status and what the
    login files printed before it (the end of it). ``HostError`` when the login files ended the
    shell before the command: no start mark came (it was exit 0 with no output)."""
    import secrets

    from gpujob.transport.agent import connect_agent

    agent = connect_agent(host)
    mark = f"gpujob-exec-starts-{secrets.token_hex(8)}."
    out = StartMark(mark.encode(), write)
    remote, settings = stdin_login(host, command_text(argv), mark)
    try:
        s = agent.t.stream(remote)
        try:
            s.stdin.write(settings)
            s.stdin.flush()
        except OSError:  # the shell is gone already (a login file's exit): the missing mark says so below
            pass
        feeder = None
        if sys.stdin is not None and not sys.stdin.isatty():
            feeder = threading.Thread(target=feed_stdin, args=(s,), daemon=True)
            feeder.start()
        else:
            s.close_stdin()
        try:
            while True:
                chunk = s.read_some()
                if not chunk:
                    break
                out.feed(chunk)
            rc = s.wait()
            profile = s.stderr_text() + out.before
        finally:
            s.kill()
    finally:
        agent.close()
    if rc < 0:
        raise ConnectError(f"the connection to {host.name} dropped before the command ended",
                           "check the network; the command may still be running there")
    if not out.seen:
        raise did_not_run(host, rc, profile)
    return rc, profile


def feed_stdin(s: Any) -> None:
    """Our stdin (a pipe or file) to the command's, then EOF (``exec HOST`` and ``exec JOB``)."""
    buf = sys.stdin.buffer
    read = buf.read1 if hasattr(buf, "read1") else buf.read  # a pipe's bytes as they come
    try:
        while True:
            data = read(65536)
            if not data:
                break
            s.stdin.write(data)
            s.stdin.flush()
    except (OSError, ValueError):
        pass
    s.close_stdin()


# ---- ssh --------------------------------------------------------------------------------
def alias(host: Host) -> str:
    return f"gpujob-{host.name}"


def entry(host: Host) -> str:
    from gpujob.config.keys import client_key_for, known_hosts_path

    key = host.identity_file or str(client_key_for(host.name))
    return "\n".join([
        f"Host {alias(host)}",
        f"    HostName {host.hostname}",
        f"    Port {host.port}",
        f"    User {host.user}",
        f"    IdentityFile {_word(key)}",
        "    IdentitiesOnly yes",
        f"    UserKnownHostsFile {_word(str(known_hosts_path()))}",
        "    StrictHostKeyChecking yes",
        f"    ConnectTimeout {int(host.connect_timeout)}",
    ])


def _word(value: str) -> str:
    """An ssh_config value: quoted when it holds a space (profiles never hold a quote: check_profile)."""
    return f'"{value}"' if any(c.isspace() for c in value) else value


def config_block(hosts: list[Host]) -> str:
    """gpujob's block of ~/.ssh/config; a profile with a value that could add a line is refused."""
    return "\n".join([BEGIN, *(entry(check_profile(h)) + "\n" for h in hosts if h.kind != LOCAL), END]) + "\n"


def updated_config(text: str, block: str) -> str:
    """``text`` (an ssh_config) with gpujob's block replaced, or appended when absent."""
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0 and end > start:
        return text[:start] + block + text[end + len(END):].lstrip("\n")
    sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + block


def ssh_config_path() -> Path:
    return Path.home() / ".ssh" / "config"


def refresh_ssh_config() -> str | None:
    """Rewrite gpujob's block of ~/.ssh/config where one is kept (a profile's key changed: ``host rekey``),
    so ``ssh gpujob-NAME`` offers the new key; the file's path when it was rewritten."""
    path = ssh_config_path()
    try:
        if BEGIN not in path.read_text():
            return None
    except OSError:
        return None
    keep_block(path, config_block(HostStore().all()))
    return str(path)


def keep_block(path: Path, block: str) -> None:
    """Put gpujob's ``block`` into the ssh_config at ``path`` (read, changed and written under its lock:
    two ``gpujob ssh`` at once keep the user's lines and one block)."""
    from gpujob.config.paths import atomicfile

    def change(raw: bytes | None) -> bytes:
        return updated_config((raw or b"").decode("utf-8", "surrogateescape"), block).encode("utf-8", "surrogateescape")

    atomicfile().update(path, change, 0o600)


def openssh_reads() -> Path:
    """The ssh_config OpenSSH reads without ``-F``: under the account's home in the password database,
    whatever ``$HOME`` says (a HOME set elsewhere would leave ``gpujob-NAME`` unknown to it)."""
    import pwd

    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh" / "config"
    except KeyError:
        return ssh_config_path()


def ssh_argv(host: Host, command: list[str], config: Path | None = None) -> list[str]:
    """OpenSSH's command line; ``config``: a file other than ~/.ssh/config (``-F``)."""
    opts = ["-F", str(config)] if config is not None else []
    return ["ssh", *opts, *(["-t"] if not command and sys.stdin.isatty() else []), alias(host), *command]


def local_shell_argv(host: Host, command: list[str]) -> list[str]:
    """``local``: an interactive shell (or ``command``) here, after a login shell set up what jobs get."""
    return ["bash", "-lc", login_script(host, command_text(command) if command else "exec bash -i")]


class SshPlan(TypedDict):
    """What ``gpujob ssh`` runs (``argv``), and the entry it keeps (``block``, in ``ssh_config``; none for ``local``)."""

    argv: list[str]
    ssh_config: str | None
    block: str


class HostSshPlan(SshPlan):
    """``ssh --print --json``: the plan and the host's name."""

    host: str


def ssh_plan(host: Host, hosts: list[Host], command: list[str], ssh_config: str | None = None) -> SshPlan:
    """{argv, ssh_config, block}: what ``gpujob ssh`` runs and the entry it keeps (none for ``local``)."""
    if host.kind == LOCAL:
        return {"argv": local_shell_argv(host, command), "ssh_config": None, "block": ""}
    if not host.hostname:
        raise HostError(f"host {host.name} has no address", f"gpujob host set {host.name} --ssh \"ssh -p PORT root@HOST\"")
    path = Path(ssh_config).expanduser() if ssh_config else ssh_config_path()
    own = ssh_config or path != openssh_reads()
    return {"argv": ssh_argv(host, command, path if own else None), "ssh_config": str(path),
            "block": config_block(hosts)}


def ssh_plan_for(host: Host, command: list[str], ssh_config: str | None = None) -> HostSshPlan:
    """``ssh_plan`` with every saved profile's entry, and the host's name (what ``ssh --print --json`` prints)."""
    return {"host": host.name, **ssh_plan(host, HostStore().all(), command, ssh_config)}


def hand_over(plan: SshPlan) -> None:
    """Write the entry, then become OpenSSH (or the local shell)."""
    import shutil

    if plan["ssh_config"]:
        if not shutil.which("ssh"):
            raise GpujobError("OpenSSH's ssh is not installed here",
                              "install it (apt-get install openssh-client), or use gpujob exec HOST -- CMD")
        path = Path(plan["ssh_config"])
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        keep_block(path, plan["block"])
    sys.stdout.flush()
    os.execvp(plan["argv"][0], plan["argv"])


def join(argv: list[str]) -> str:
    return shlex.join(argv)
