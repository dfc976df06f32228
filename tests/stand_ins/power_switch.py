#!/usr/bin/env python3
"""A provider's power switch for one "instance" (a network namespace), as its CLI would be:

    power_switch.py STATE_DIR on|off|state|address

``on`` starts a real sshd in the namespace on a new port each time (a second later, as an
instance that reports running before it accepts logins); the first ``fail_ons`` calls are
refused with "no GPU available". ``state`` says "starting" for the first ``lie`` asks after
a power-on, then "running" (whether sshd listens yet or not); "stopped" when off. ``address``
prints the login line; ``off`` kills every process in the namespace, as a power-off does. Settings in STATE_DIR/conf.json: ns, addr, user, sshd, fail_ons, lie,
stock_out (refuse every power-on), hang (verbs that never answer, as a provider's API call that hangs: the
switch writes its pid to STATE_DIR/VERB.pid, starts a ``sleep`` child whose pid goes to VERB.child, and waits).
"""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path


def bump(path: Path) -> int:
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


def main() -> int:
    d, verb = Path(sys.argv[1]), sys.argv[2]
    conf = json.loads((d / "conf.json").read_text())
    with open(d / "calls.log", "a") as f:
        f.write(verb + "\n")
    if verb in conf.get("hang", ()):
        child = subprocess.Popen(["sleep", "3600"])  # in the switch's own process group, as bash -c's children are
        (d / f"{verb}.child").write_text(str(child.pid))
        (d / f"{verb}.pid").write_text(str(os.getpid()))
        child.wait()
        return 0
    if verb == "on":
        n = bump(d / "ons")
        if conf.get("stock_out") or n <= conf.get("fail_ons", 0):
            print("Error: no GPU available on this machine, try again later", file=sys.stderr)
            return 1
        port = random.randint(20000, 60000)
        (d / "port").write_text(str(port))
        (d / "asks").write_text("0")
        cfg = d / "sshd_config"
        cfg.write_text(
            f"Port {port}\nListenAddress {conf['addr']}\nHostKey {d / 'hostkey'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
            f"PidFile {d / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "PermitRootLogin prohibit-password\nMaxSessions 50\nMaxStartups 50\n"
            # the sessions' shell as tests/conftest.py LOGIN_ENV leaves it (no pyenv init a login)
            f"SetEnv SHLVL=1 PATH={Path(sys.executable).parent}:/usr/bin:/bin\nLogLevel ERROR\n")
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        # boots a second later: sshd daemonizes inside the namespace (ip netns pids finds it)
        subprocess.Popen(["bash", "-c", f"sleep 1; exec ip netns exec {conf['ns']} {conf['sshd']} -f {cfg} -E {d / 'sshd.log'}"],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        (d / "on").write_text("1")
        print("starting instance")
        return 0
    if verb == "off":  # power lost: every process of the "instance" (sshd, the agent, the job) dies
        pids = subprocess.run(["ip", "netns", "pids", conf["ns"]], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        (d / "on").unlink(missing_ok=True)
        print("stopping instance")
        return 0
    if verb == "state":
        if not (d / "on").exists():
            print("stopped")
        else:
            print("starting" if bump(d / "asks") <= conf.get("lie", 0) else "running")
        return 0
    if verb == "address":
        print(f"ssh -p {(d / 'port').read_text()} {conf['user']}@{conf['addr']}")
        return 0
    print(f"unknown verb {verb}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
