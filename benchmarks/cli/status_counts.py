"""What one command of bench_status.py (``--counts``) costs, counted rather than timed (the counts do not move
with the machine's load): CPU seconds of the command and its children, modules imported
(``python -X importtime``: count and the cumulative µs of the top-level imports), and what it
does to files (``strace -f``: opens for writing, renames, unlinks, chmods, fsyncs)."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

WRITES = re.compile(r"\b(rename|renameat2?|unlink|unlinkat|chmod|fchmod|fchmodat|fsync|fdatasync|mkdir|mkdirat)\(")
OPEN_W = re.compile(r"\bopenat\(.*(O_WRONLY|O_RDWR|O_CREAT)")


def cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    """User + system CPU of the command and everything it waited for."""
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        _, _, ru = os.wait4(p.pid, 0)
    finally:
        p.returncode = 0  # reaped here (Popen must not wait for it again)
    return ru.ru_utime + ru.ru_stime


def imports(cmd: list[str], env: dict[str, str]) -> tuple[int, int]:
    """Modules imported by the (Python) command, and the sum of the top-level ones' cumulative µs."""
    if "python" not in Path(cmd[0]).name:
        return 0, 0
    r = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    n = top = 0
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            n += 1
            if len(m.group(3)) == 1:
                top += int(m.group(2))
    return n, top


def file_writes(cmd: list[str], env: dict[str, str]) -> list[str]:
    """The calls by which the command's own process changes files (not followed into children: a first
    command leaves the multiplexer's daemon behind, which lives on for the commands after it)."""
    if not shutil.which("strace"):
        return []
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        subprocess.run(["strace", "-qq", "-o", out.name, "-e",
                        "trace=openat,rename,renameat,renameat2,unlink,unlinkat,chmod,fchmod,fchmodat,fsync,"
                        "fdatasync,mkdir,mkdirat", *cmd], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        return [ln.strip() for ln in out.read().splitlines()
                if (WRITES.search(ln) or OPEN_W.search(ln)) and "= -1" not in ln and "/dev/" not in ln]


def print_counts(cases: dict[str, tuple[list[str], dict[str, str], Any, Any]], runs: int = 5) -> None:
    print(f"\n| command | CPU s (median of {runs}) | modules imported | top-level import µs | file changes |")
    print("|---|---|---|---|---|")
    detail = {}
    for name, (cmd, env, before, after) in cases.items():
        cpu = []
        for _ in range(runs):
            if callable(before):
                before()
            cpu.append(cpu_seconds(cmd, env))
            if callable(after):
                after()
        if callable(before):
            before()
        n, top = imports(cmd, env)
        if callable(after):
            after()
        if callable(before):
            before()
        writes = file_writes(cmd, env)
        if callable(after):
            after()
        detail[name] = writes
        print(f"| `{name}` | {statistics.median(cpu):.3f} | {n} | {top} | {len(writes)} |")
    for name, writes in detail.items():
        if writes:
            print(f"\n{name}: " + "\n  ".join(w[:160] for w in writes))
