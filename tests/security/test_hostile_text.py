"""Text a hostile agent answers never drives the laptop's terminal, whichever command shows it:
rich markup (``[link=…]`` becomes an OSC 8 hyperlink, ``[blink]``) and escape sequences in job
ids, states, currencies, pids and file names, through ``cost``, ``stop``, ``tunnel --stop``,
``resume`` and ``pull``'s notes; a wrong-shaped ``billing`` is exit 3, not an internal error.
The program is put where the agent's interpreter is recorded; each command runs under a pty."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.hostile import install_hostile
from tests.security.test_terminal_injection import on_a_pty

AGENT = r'''#!{python}
import json, sys
replies = json.load(open({replies!r}))
verb = sys.argv[sys.argv.index("--root") + 2]
sys.stdout.write(replies.get(verb, "{{}}") + "\n")
sys.stdout.flush()
if verb == "send":  # pull: the manifest, then the end of an empty stream once the wish list is read
    from remote.stream.format import MAGIC, frame
    sys.stdin.buffer.readline()
    sys.stdout.buffer.write(MAGIC + frame(b"E", {{}}))
'''
LINK = "[link=https://evil.example/]"
OSC = "\x1b]52;c;cHduZWQ=\x07\x1b]0;title\x07"
FORBIDDEN = [b"\x1b]", b"\x07", b"evil.example/\x1b", b"\x1b[5m", b"52;c;"]


@pytest.fixture
def replies(tmp_path: Path) -> Path:
    """The ``local`` host's agent replaced by one answering each verb from ``replies.json``."""
    path = tmp_path / "replies.json"
    install_hostile(tmp_path, "local-root", AGENT.format(python=sys.executable, replies=str(path)))
    return path


def test_host_text_is_shown_as_text(replies: Path) -> None:
    job = {"job_id": f"{LINK}tiny-1{OSC}[/link]", "state": "[blink]running[/]", "host": "local",
           "billing": {"cost": 1.5, "currency": f"{LINK}USD[/link]", "elapsed_s": 10, "price_per_hour": 1}}
    writing = f"logs/{OSC}x.txt"
    replies.write_text(json.dumps({
        "status": json.dumps({"jobs": [job]}), "stop": json.dumps(job), "resume": json.dumps({**job, "previous": OSC}),
        "tb": json.dumps({"job_id": job["job_id"], "stopped": True, "pid": f"{LINK}1{OSC}[/link]"}),
        "send": json.dumps({"job_id": "tiny-1", "files": {writing: [0, 0, 0o644, None]}, "dirs": [],
                            "writing": {writing: [7]}})}))
    for args in (("cost",), ("stop", "tiny-1"), ("resume", "tiny-1"), ("tunnel", "tiny-1", "--stop"),
                 ("pull", "tiny-1", str(replies.parent / "dest"), "--write-wait", "0")):
        rc, out = on_a_pty(*args, "--host", "local")
        assert b"Traceback" not in out and b"internal error" not in out, (args, out)
        assert b"tiny-1" in out, (args, rc, out)
        for bad in FORBIDDEN:
            assert bad not in out, (args, bad, out)
        if args[0] == "cost":
            assert b"[link=https://evil.example/]" in out.replace(b"\r\n", b""), out  # shown as the text it is
    replies.write_text(json.dumps({"status": json.dumps({"jobs": [{"job_id": "ti\u200bny-1", "state": "running"}]})}))
    rc, out = on_a_pty("ls", "--host", "local")  # an id that looked like another (Trojan Source): its code shows
    assert b"ti\\u200bny-1" in out and "\u200b".encode() not in out, out
    job["billing"]["cost"] = "1.5"  # a string where cost sums numbers: the host's fault, said so
    replies.write_text(json.dumps({"status": json.dumps({"jobs": [job]})}))
    rc, out = on_a_pty("cost", "--host", "local")
    assert b"'billing.cost' is not a number" in out and b"internal error" not in out, out
    replies.write_text(json.dumps({"tb": json.dumps({"job_id": "tiny-1", "port": "6006; touch /tmp/x"})}))
    rc, out = on_a_pty("tunnel", "tiny-1", "--host", "local")
    assert rc == 3 and b"'port' is not a port" in out and b"internal error" not in out, (rc, out)


def test_a_host_cannot_make_the_laptop_forget_another_hosts_job(replies: Path) -> None:
    from gpujob.config import index

    index.record("other-1-ab12c", "box", "other")  # a job of another host, in this laptop's index
    replies.write_text(json.dumps({"rm": json.dumps({"job_id": "other-1-ab12c", "removed": True, "stopped": False,
                                                     "bytes": 1}),
                                   "gc": json.dumps({"items": 5, "bytes": 1, "busy": [], "dry_run": False})}))
    r = run_cli("rm", "mine-1", "--host", "local")
    assert r.returncode == 0, r.stderr
    assert index.host_of("other-1-ab12c") == "box"  # the answer named it; the index forgets only local's
    r = run_cli("gc", "local")
    assert r.returncode == 3 and "'items' is not a list" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_a_sync_manifest_of_the_wrong_shape_is_the_hosts_fault(replies: Path, tmp_path: Path) -> None:
    from tests.helpers import write_job

    # placement reads the gpus answer before anything is sent: {"gpus": 5} was TypeError: len(5)
    replies.write_text(json.dumps({"gpus": json.dumps({"gpus": 5})}))
    r = run_cli("submit", str(write_job(tmp_path, "gpus", "print(1)\n", "python main.py", gpus=1)), "--host", "local",
                "--wait-gpus", "0")
    assert r.returncode != 0 and "'gpus' is not a list of GPUs" in r.stderr and "internal error" not in r.stderr, r

    replies.write_text(json.dumps({"sync": json.dumps({"free_bytes": 1 << 40}),
                                   "manifest": json.dumps({"free_bytes": 1 << 40})}))
    r = run_cli("submit", str(write_job(tmp_path, "shape", "print(1)\n", "python main.py")), "--host", "local")
    assert r.returncode == 3 and "no manifest of 'projects/shape/code'" in r.stderr, (r.returncode, r.stderr)
    assert "internal error" not in r.stderr


def test_a_log_reply_without_its_header_is_not_retried_for_minutes(replies: Path) -> None:
    replies.write_text(json.dumps({"logs": json.dumps({"job_id": "j-1"})}))
    for args in (("tail", "j-1"), ("tail", "j-1", "-f")):
        r = run_cli(*args, "--host", "local", timeout=30)  # it was retried 30 times with backoff
        assert r.returncode == 3 and "a log stream without its header" in r.stderr, (args, r.returncode, r.stderr)


def test_impossible_figures_are_unknown_not_an_internal_error(replies: Path) -> None:
    """NaN, Infinity, 1e308 and a 400-digit integer where a time, a count or a rate goes (a host's
    reply, or a job's own metrics line): ``ls`` and ``cost`` were internal errors (int(inf), SQLite's
    64-bit column), ``status JOB`` too (a progress total of Infinity). Such a figure is shown as
    unknown; a field of the wrong kind (``progress: 5``, ``gpu.now: "x"``) is the host's fault, exit 3."""
    big = "9" * 400
    job = ('{"job_id": "odd-1-ab12c", "state": "running", "host": "local", "started_at": -Infinity, '
           f'"ended_at": 1e400, "now": NaN, "eta_s": {big}, "attempt": 1e308, '
           f'"last_metrics": {{"loss": NaN, "step": {big}}}, "billing": {{"cost": Infinity, "eta_s": NaN}}}}')
    watch = ('{"job": ' + job + ', "progress": {"total": Infinity, "step": ' + big + ', "rate": NaN}, '
             f'"latest": {{"step": {big}, "loss": 1.5}}, "rate": 1e308, "series": {{"loss": [[1, NaN]]}}}}')
    # and a record whose state is null (ls: len(None)), a count of older jobs that is Infinity
    replies.write_text(json.dumps({"status": '{"jobs": [' + job + ', {"job_id": "nul-1", "state": null}], "older": Infinity}',
                                   "watch": watch}))
    for args in (("ls",), ("cost",), ("status", "odd-1-ab12c")):
        r = run_cli(*args, "--host", "local")
        assert r.returncode == 0 and "odd-1-ab12c" in r.stdout and "internal error" not in r.stderr, (args, r)
    for wrong, said in (('"progress": 5', "'progress' is not an object"),
                        ('"series": {"loss": [1]}', "'series' is not a map of point lists")):
        replies.write_text(json.dumps({"watch": '{"job": {"job_id": "odd-1-ab12c"}, ' + wrong + "}"}))
        r = run_cli("status", "odd-1-ab12c", "--host", "local")
        assert r.returncode == 3 and said in r.stderr and "internal error" not in r.stderr, (wrong, r)
    for reply, said in (('{"jobs": [{"job_id": null}]}', "without its 'job_id'"),  # was TypeError: len(None)
                        ('{"jobs": [], "older": "x"}', "'older' is not a number")):
        replies.write_text(json.dumps({"status": reply}))
        r = run_cli("ls", "--host", "local")
        assert r.returncode == 3 and said in r.stderr and "internal error" not in r.stderr, (reply, r)
    replies.write_text(json.dumps({"stop": '{"job_id": "odd-1-ab12c", "state": "stopped", "survivors": null}'}))
    r = run_cli("stop", "odd-1-ab12c", "--host", "local")  # was TypeError: not iterable
    assert r.returncode == 3 and "'survivors' is not a list" in r.stderr and "internal error" not in r.stderr, r
    replies.write_text(json.dumps({"agentlog": '{"lines": 5, "path": "/x"}'}))
    r = run_cli("agent-log", "local")
    assert r.returncode == 3 and "'lines' is not a list" in r.stderr and "internal error" not in r.stderr, r
    replies.write_text(json.dumps({"doctor": '{"disks": {"data": "x"}, "agent": [1]}'}))
    r = run_cli("doctor", "local")  # its checks read the report field by field
    assert r.returncode == 3 and "a doctor report of the wrong shape" in r.stderr and "internal error" not in r.stderr, r
