"""Network namespaces for tests: "instances" on a bridge of their own, with links to take down.

Every name carries the creating process's pid (``gj<kind><pid>x<n>``: kind b bridge, n
namespace, v veth), and the subnet is a random 10.x.y.0/24 that no interface or route here
uses, so runs side by side never collide. Leftovers of a run that was killed before its
cleanup (its pid is gone) are removed by the next one. Needs root and iproute2; without them
the test skips (fails under CI, where .ci/run installs iproute2 and runs as root).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

import pytest

from remote.core.procs import pid_alive

NAME = re.compile(r"^gj[bnv](\d+)x\d+$")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def require_root_and_ip() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None or ip("netns", "list", check=False).returncode != 0:
        msg = "network namespaces need root and iproute2 (apt-get install iproute2)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def kill_netns(ns: str) -> None:
    for pid in ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    ip("netns", "del", ns, check=False)


def clean_stale() -> list[str]:
    """Remove namespaces and links named by this module whose creating process is dead."""
    removed = []
    for line in ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        m = NAME.match(ns)
        if m and not pid_alive(int(m.group(1))):
            kill_netns(ns)
            removed.append(ns)
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = NAME.match(name)
        if m and not pid_alive(int(m.group(1))):
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def free_subnet() -> str:
    """A 10.x.y (the first three octets) that no address or route here uses."""
    used = ip("-o", "addr", "show", check=False).stdout + ip("route", "show", "table", "all", check=False).stdout
    for _ in range(200):
        net = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
        if f"{net}." not in used:
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet found")


@dataclass
class Lab:
    """A bridge (``net``.254) and ``n`` namespaces at ``net``.1, .2, ... (``gjeth0`` inside)."""

    net: str
    bridge: str
    namespaces: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)

    def addr(self, i: int) -> str:
        return f"{self.net}.{i + 1}"

    def link(self, i: int, up: bool) -> None:
        """Take namespace ``i``'s link down (every packet to and from it dropped) or up again."""
        ip("link", "set", self.veths[i], "up" if up else "down")

    def close(self) -> None:
        for ns in self.namespaces:
            kill_netns(ns)
        for v in self.veths:
            ip("link", "del", v, check=False)
        ip("link", "del", self.bridge, check=False)


def make_lab(n: int) -> Lab:
    """``n`` namespaces on a fresh bridge; leftovers of killed earlier runs are removed first."""
    require_root_and_ip()
    clean_stale()
    pid = os.getpid()
    seq = random.randint(0, 899)  # names stay within 15 bytes (IFNAMSIZ)
    lab = Lab(free_subnet(), f"gjb{pid}x{seq}")
    try:
        ip("link", "add", lab.bridge, "type", "bridge")
        ip("addr", "add", f"{lab.net}.254/24", "dev", lab.bridge)
        ip("link", "set", lab.bridge, "up")
        for i in range(n):
            ns, veth = f"gjn{pid}x{seq + i}", f"gjv{pid}x{seq + i}"
            ip("netns", "add", ns)
            lab.namespaces.append(ns)
            ip("link", "add", veth, "type", "veth", "peer", "name", "gjeth0", "netns", ns)
            lab.veths.append(veth)
            ip("link", "set", veth, "master", lab.bridge, "up")
            ip("-n", ns, "addr", "add", f"{lab.addr(i)}/24", "dev", "gjeth0")
            ip("-n", ns, "link", "set", "gjeth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except BaseException:
        lab.close()
        raise
    return lab
