"""``gpujob host rekey`` (issue 25 leftover): a profile made before per-profile keys logs in with
gpujob's shared key, authorized on every instance; rekey moves it to a key of its own and takes
the shared key's line (that line only) off the host, verified by logging in with each key alone.
The instance is the test's real sshd; its authorized_keys file is the one sshd reads."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Sshd, free_port, run_cli

OTHER = 'from="10.0.0.1",no-pty ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherOtherOtherOtherOtherOtherOtherOth someone@laptop'


def _opens(name: str, key: Path) -> bool:

    from gpujob.config.hosts import HostStore
    from gpujob.usecases.rekey import _opens as opens

    return opens(HostStore().get(name), key) if key.exists() else False


def test_rekey_moves_an_old_profile_off_the_shared_key(ssh_host: str, sshd: Sshd, tmp_path: Path) -> None:
    from gpujob.config import keys
    from gpujob.config.hosts import Host, HostStore

    # the file as a user's instance holds it: their own lines around gpujob's shared one, no final newline
    shared_line = keys.public_key_line()
    sshd.authorized_keys.write_text(f"# added by hand\n{OTHER}\n{shared_line}\n\nssh-rsa AAAAB3Nza notakey")
    before = sshd.authorized_keys.read_text()
    home_keys = Path.home() / ".ssh" / "authorized_keys"  # this machine's own: never the one changed
    home_before = home_keys.read_bytes() if home_keys.exists() else None
    HostStore().save(Host(name="gone", hostname="127.0.0.1", port=free_port(), connect_timeout=3))  # nothing listens
    HostStore().save(Host(name="mine", hostname="127.0.0.1", port=sshd.port, identity_file=str(keys.key_path())))

    r = run_cli("host", "ls")
    assert r.returncode == 0 and "box, gone still log(s) in with gpujob's shared key" in r.stderr, r.stderr
    assert "gpujob host rekey --all" in r.stderr
    shared = {d["name"] for d in json.loads(run_cli("host", "ls", "--json").stdout) if d.get("shared_key")}
    assert shared == {"box", "gone"}  # not `mine`: its key is the user's choice (--identity)
    r = run_cli("doctor", "box")
    assert "gpujob host rekey box" in r.stdout + r.stderr, r.stdout + r.stderr

    r = run_cli("host", "rekey", "mine")
    assert r.returncode == 2 and "your own key" in r.stderr and "Traceback" not in r.stderr, r.stderr

    r = run_cli("host", "rekey", "--all", "--json", env_extra={"GPUJOB_MUX": "0"})
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    done = {d["host"]: d for d in json.loads(r.stdout)}
    assert "error" in done["gone"] and "refused the connection" in done["gone"]["error"], done
    assert not keys.host_key_path("gone").exists() and not keys.pending_key_path("gone").exists()
    box = done["box"]
    assert "error" not in box, box
    assert box["was"] == "shared" and box["removed_lines"] == 1 and box["old_key_refused"] is True, box
    assert box["file"] == str(sshd.authorized_keys)

    own = keys.host_key_path("box")
    assert own.exists() and not keys.pending_key_path("box").exists()
    assert HostStore().get("box").endpoint().client_key == str(own)
    new_line = keys.pub_path(own).read_text().strip()
    after = sshd.authorized_keys.read_text()
    # only the shared key's line went; every other byte stayed, the new line came where it was
    assert after == before.replace(f"{shared_line}\n", "") + f"\n{new_line}\n", (before, after)
    assert not _opens("box", keys.key_path()) and _opens("box", own)
    r = run_cli("ls", "--host", "box")
    assert r.returncode == 0, r.stderr
    r = run_cli("host", "ls")
    assert "box" not in r.stderr.partition("shared key")[0], r.stderr  # only `gone` is left to rekey

    assert (home_keys.read_bytes() if home_keys.exists() else None) == home_before

    # a second rekey rotates the profile's own key: the previous one stops opening the host
    previous = own.read_bytes()
    r = run_cli("host", "rekey", "box")
    assert r.returncode == 0 and "its previous key: 1 line(s) removed" in r.stdout, (r.stdout, r.stderr)
    assert own.read_bytes() != previous and _opens("box", own)
    assert sshd.authorized_keys.read_text().count("gpujob-box") == 1
