"""A command on a real terminal of a given size (tmux), and what the user sees on it.

``Screen(width).run(args)`` starts ``gpujob ARGS`` in a detached tmux session on its own server,
its socket in the test's folder (nothing shared with another test or the user's tmux), with the test's environment; the
screen is read with ``capture-pane`` (each row as the terminal shows it: a line too long for the
width is two rows there). Waits are on what the screen or the exit file shows, never fixed sleeps.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import wait_for

SGR = re.compile(r"\x1b\[[0-9;]*m")


def needs_tmux() -> None:
    if not shutil.which("tmux"):
        pytest.skip("needs tmux (apt-get install tmux)")


class Screen:
    def __init__(self, tmp_path: Path, width: int, height: int = 24) -> None:
        needs_tmux()
        self.width, self.height = width, height
        name = f"gj-{uuid.uuid4().hex[:10]}"
        self.sock = str(tmp_path / f"{name}.sock")  # its own server, its socket in the test's folder
        self.exit_file = tmp_path / f"exit-{name}"
        self.started = False

    def tmux(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", *args], capture_output=True, text=True,
                           timeout=30)
        return r.stdout

    def run(self, *args: str, env: dict[str, str] | None = None) -> Screen:
        """``gpujob ARGS`` on the terminal; its exit status lands in ``exit_file``."""
        environ = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       TERM="xterm-256color", COLUMNS="", LINES="", **(env or {}))
        environ.pop("COLUMNS")  # the terminal's own size decides, as for a user
        environ.pop("LINES")
        environ.pop("NO_COLOR", None)
        cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "gpujob.cli", *args])
        # the shell outlives a Ctrl-C sent to the command (a trap, not an ignore: the command gets its own)
        shell = f"trap true INT; {cmd}; echo $? > {shlex.quote(str(self.exit_file))}; sleep 3600"
        subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", "new-session", "-d", "-x", str(self.width),
                        "-y", str(self.height), "bash", "-c", shell], check=True, env=environ, timeout=30)
        self.tmux("set-option", "-g", "history-limit", "5000")
        self.started = True
        return self

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def rows(self, joined: bool = False) -> list[str]:
        """Every row of the scrollback and the screen, as shown (colours left out), trailing blanks cut;
        ``joined``: a line the terminal wrapped is one row again (longer than the width)."""
        text = self.tmux("capture-pane", "-p", *(["-J"] if joined else []), "-S", "-", "-E", "-")
        rows = [SGR.sub("", r).rstrip() for r in text.split("\n")]
        while rows and not rows[-1]:
            rows.pop()
        return rows

    def text(self) -> str:
        return "\n".join(self.rows())

    def wait_screen(self, pred, timeout: float = 120, what: str = "") -> None:  # type: ignore[no-untyped-def]
        wait_for(lambda: pred(self.text()), timeout, lambda: f"{what}; the screen:\n{self.text()}")

    def wait_exit(self, timeout: float = 180) -> int:
        wait_for(lambda: self.exit_file.exists() and self.exit_file.read_text().strip(), timeout,
                 lambda: f"the command to end; the screen:\n{self.text()}")
        return int(self.exit_file.read_text())

    def close(self) -> None:
        if self.started:
            self.tmux("kill-server")
        Path(self.sock).unlink(missing_ok=True)

    def __enter__(self) -> Screen:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def assert_fits(screen: Screen, ours: Callable[[str], bool] = lambda r: True) -> None:
    """No line (of those ``ours`` says gpujob wrote) was wrapped by the terminal (tmux knows which
    rows continue the one above)."""
    from gpujob.ui.plaintable import width_of

    wrapped = [r for r in screen.rows(joined=True) if width_of(r) > screen.width and ours(r)]
    assert not wrapped, f"lines wider than the {screen.width}-column screen (wrapped):\n" + "\n".join(wrapped)
