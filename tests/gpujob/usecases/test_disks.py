"""A powered-off host's disk: its platform's release countdown in ``host ls``, and the warnings 3 days
and 1 day before it, sent once each to a real HTTP server, naming the checkpoints only there.

Two tiny jobs run on the test's sshd (``box``) and each writes a complete checkpoint; the laptop reads
their status once (the ledger keeps the newest checkpoint), one is pulled here; then ``box`` is marked
powered off 13 days ago in hosts.yaml, as an AutoDL-style profile (released after 15 days)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import submit, wait_state, write_job

CKPT = ('mkdir -p "$GPUJOB_CKPT_DIR/step-1" && echo w > "$GPUJOB_CKPT_DIR/step-1/w.bin" '
        '&& touch "$GPUJOB_CKPT_DIR/step-1/.gpujob-complete"')
DAY = 86400.0
NOW = {"GPUJOB_DISKS_CHECK_EVERY": "0"}  # every look checks (the throttle is tested apart)


def powered_off(name: str, days_ago: float) -> float:
    """Mark profile ``name`` powered off ``days_ago`` days ago in hosts.yaml, as gpujob's power commands do."""
    from gpujob.config.hosts import HostStore

    store = HostStore()
    host = store.get(name)
    host.powered_off_at = time.time() - days_ago * DAY
    store.save(host)
    return host.powered_off_at


def warnings(hook: object) -> list[dict]:
    return [g["body"] for g in hook.got if g["body"].get("event") == "disk_release"]  # type: ignore[attr-defined]


def test_powered_off_host_warns_3_then_1_day_before_release(ssh_host: str, tmp_path: Path, hook: object) -> None:
    notify = {"channels": [{"type": "webhook", "url": hook.url}]}  # type: ignore[attr-defined]
    saved = submit(ssh_host, write_job(tmp_path, "saved", "", CKPT, notify=notify))["job_id"]
    alone = submit(ssh_host, write_job(tmp_path, "alone", "", CKPT, notify=notify))["job_id"]
    for job in (saved, alone):  # its status read once: the laptop knows its newest checkpoint
        assert [c["name"] for c in wait_state(ssh_host, job, ("succeeded",))["checkpoints"]] == ["step-1"]
    r = run_cli("pull", saved, str(tmp_path / "pulls"), "--latest", "--json")
    assert r.returncode == 0, r.stderr

    r = run_cli("host", "set", ssh_host, "--released-after", "15d")
    assert r.returncode == 0, r.stderr
    off = powered_off(ssh_host, 13)
    r = run_cli("host", "ls", "--json", env_extra=NOW)
    assert r.returncode == 0, r.stderr
    rel = next(h for h in json.loads(r.stdout) if h["name"] == ssh_host)["release"]
    assert rel["powered_off_at"] == off and rel["released_at"] == off + 15 * DAY
    assert 2 * DAY - 60 < rel["left_s"] <= 2 * DAY and rel["left"] == "1 day 23 h"
    assert [j["job_id"] for j in rel["only_there"]] == [alone]  # the pulled one is safe here
    [ev] = warnings(hook)
    assert ev["host"] == ssh_host and ev["days"] == 3 and "gpujob" in ev["title"] and ssh_host in ev["title"]
    assert ev["only_there"] == [f"alone ({alone}), succeeded: step-1"], ev
    assert f"gpujob pull {alone} --latest" in ev["commands"] and not any(saved in c for c in ev["commands"])
    assert f"alone ({alone}), succeeded: step-1" in ev["text"] and "in 1 day 23 h" in ev["text"]
    assert {c["job_id"]: c["elsewhere"] for c in ev["checkpoints"]}[saved].startswith("pulled to ")
    assert "sent to 1 of 1 channel" in r.stderr, r.stderr

    r = run_cli("host", "ls", env_extra=NOW)  # the same period: said once
    assert r.returncode == 0 and "off, 1 day 23 h" in r.stdout, r.stdout + r.stderr
    assert len(warnings(hook)) == 1

    powered_off(ssh_host, 14.2)  # found off again, longer ago: the 1-day warning, from `ls`
    r = run_cli("ls", "--json", env_extra=NOW)
    assert r.returncode == 0, r.stderr
    assert [(e["days"], e["left"]) for e in warnings(hook)] == [(3, "1 day 23 h"), (1, "19 h")]
    assert warnings(hook)[1]["only_there"] == [f"alone ({alone}), succeeded: step-1"]  # ls's own look kept it
    assert run_cli("ls", env_extra=NOW).returncode == 0 and len(warnings(hook)) == 2

    r = run_cli("host", "set", ssh_host, "--released-after", "off")  # a platform that never releases it
    assert r.returncode == 0, r.stderr
    assert "release" not in next(h for h in json.loads(run_cli("host", "ls", "--json").stdout) if h["name"] == ssh_host)


def test_released_after_is_checked_and_the_preset_gives_autodls(tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore

    HostStore().save(Host(name="a100", hostname="10.255.255.1", preset="autodl"))
    powered_off("a100", 9.5)
    r = run_cli("host", "ls", "--json")
    assert next(h for h in json.loads(r.stdout) if h["name"] == "a100")["release"]["left"] == "5 days"
    for bad, says in (("15 days", "is not a duration"), ("30m", "out of range")):
        r = run_cli("host", "set", "a100", "--released-after", bad)
        assert r.returncode != 0 and says in r.stderr and "--released-after 15d" in r.stderr and "Traceback" not in r.stderr
    assert run_cli("host", "set", "a100", "--released-after", "20d").returncode == 0
    assert "off, 10 days" in run_cli("host", "ls", "--wide").stdout
    assert run_cli("host", "set", "a100", "--released-after", "").returncode == 0  # the preset's again
    assert "off, 5 days" in run_cli("host", "ls", "--wide").stdout


def test_which_warning_is_due() -> None:
    from gpujob.usecases.disks.countdown import Release
    from gpujob.usecases.disks.warn import due

    def rel(days_left: float) -> Release:
        return {"left_s": days_left * DAY}

    assert [due(rel(d), []) for d in (5, 3.5, 2.9, 1.5, 0.9, 0, -0.5, -1.5)] == [None, None, 3, 3, 1, 1, 1, None]
    assert due(rel(2), [3]) is None and due(rel(0.5), [3]) == 1 and due(rel(0.5), [3, 1]) is None
