"""The profile store answers from a JSON copy of ``hosts.yaml`` only while the file is unchanged."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _age(path: Path) -> None:
    """Date the file's modification a minute back, as one left alone since."""
    old = os.stat(path).st_mtime_ns - 60 * 10**9
    os.utime(path, ns=(old, old))


def test_a_hand_edit_is_seen_and_the_copy_is_private(tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore

    store = HostStore()
    store.save(Host(name="box", hostname="10.0.0.1", port=2222))
    copy = store.path.with_name(".hosts.yaml.json")
    assert store.get("box").port == 2222
    assert not copy.exists()  # a file just written gets no copy yet (a same-size edit in the same tick)
    _age(store.path)
    assert store.get("box").port == 2222
    assert copy.exists() and stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    # an editor changing one digit in place: same size, same inode
    text = store.path.read_text()
    with open(store.path, "r+") as f:
        f.write(text.replace("2222", "2223"))
    assert store.get("box").port == 2223
    assert HostStore().get("box").port == 2223  # parsed again: the edited file is too fresh for a copy
    store.remove("box")
    assert [h.name for h in HostStore().all()] == ["local"]


def test_values_json_cannot_hold_are_read_from_the_yaml(tmp_path: Path) -> None:
    from gpujob.config.hosts import HostStore

    store = HostStore()
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text("hosts:\n  box:\n    hostname: 10.0.0.2\n    port: 2200\n    added: 2024-01-01\n")
    _age(store.path)
    for _ in range(2):
        assert store.get("box").port == 2200
    assert not store.path.with_name(".hosts.yaml.json").exists()  # a date: no copy, the YAML is read each time
