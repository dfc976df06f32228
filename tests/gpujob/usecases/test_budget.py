"""``gpujob budget``: the account's limits across jobs, on a real SSH host priced at 1 CNY a second, tiny
loops that save a checkpoint every half second, real notifications to a real HTTP server."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpujob.config.budget import Budget
from gpujob.usecases.budget.charges import Charge, period_start, spent
from gpujob.usecases.budget.gate import job_bound
from tests.conftest import run_cli
from tests.helpers import ENDED, status, submit, wait_for, wait_state
from tests.remote.run.test_events import Hook

# a plain loop: a checkpoint every 5 steps (0.5 s), never on a signal
SAVER = """
import os, signal, time, zipfile
signal.signal(signal.SIGINT, signal.SIG_IGN)
ck = os.environ["GPUJOB_CKPT_DIR"]
step = 0
while True:
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(0.1)
    if step % 5 == 0:
        with zipfile.ZipFile(os.path.join(ck, "tmp"), "w") as z:  # a torch.save file is a zip
            z.writestr("step", str(step))
        os.rename(os.path.join(ck, "tmp"), os.path.join(ck, f"ckpt_{step}.pt"))
"""


def job(tmp_path: Path, name: str, **autostop: object) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "main.py").write_text(SAVER)
    spec = {"name": name, "run": "python main.py", "stop": {"grace": "5s"},
            "autostop": {"check_every": "1s", **autostop}}
    (d / "job.yaml").write_text(json.dumps(spec))
    return d / "job.yaml"


def budget(*args: str) -> dict:
    r = run_cli("budget", *args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def month(doc: dict) -> dict:
    return next(r for r in doc["currencies"]["CNY"] if r["period"] == "month")


def test_periods_and_bounds() -> None:
    now = time.mktime((2026, 12, 9, 15, 0, 0, 0, 0, -1))  # a Wednesday
    assert period_start("week", now) == time.mktime((2026, 12, 7, 0, 0, 0, 0, 0, -1))  # its Monday
    assert period_start("month", now) == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1))
    # a charge is clipped to the period; another currency is not counted
    day = period_start("day", now)
    cs = [Charge("a", "h", day - 3600, day + 3600, 10.0, "CNY"), Charge("b", "h", day, None, 10.0, "USD")]
    assert spent(cs, "CNY", "day", now) == 10.0 and spent(cs, "CNY", "month", now) == 20.0
    from gpujob.config.spec import JobSpec

    spec = JobSpec(name="x", run="true", workdir=".", autostop={"max_runtime": "30m", "budget": 7})
    assert job_bound(spec, 10.0) == (5.0, "autostop.max_runtime 30m x 10.00/h")
    assert Budget().limit("CNY", "day") is None


def test_a_month_limit_refuses_a_submit_and_stops_jobs_that_pass_it_after_their_checkpoint(
        ssh_host: str, tmp_path: Path, hook: Hook) -> None:
    assert run_cli("host", "set", ssh_host, "--price", "3600").returncode == 0  # 1 CNY a second
    channels = tmp_path / "notify.yaml"
    channels.write_text(json.dumps({"notify": {"channels": [{"type": "webhook", "url": hook.url}]}}))
    balance = tmp_path / "balance"
    balance.write_text("500.00\n")
    doc = budget("set", "--month", "16", "--notify", str(channels), "--balance", f"echo hello; cat {balance}",
                 "--balance-below", "100")
    assert month(doc)["limit"] == 16 and doc["balance"]["value"] == 500 and not doc["balance"]["low"]

    # a job whose own bound would pass the limit: refused before anything is sent, with the figures
    r = run_cli("submit", str(job(tmp_path, "long", max_runtime="1h")), "--host", ssh_host)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "would pass the month limit: 0.00 CNY spent this month" in r.stderr and "of its limit of 16.00 CNY" in \
        r.stderr and "may cost 3600.00 CNY (autostop.max_runtime 1h x 3600.00/h on box)" in r.stderr, r.stderr
    assert "gpujob budget set --month 3600" in r.stderr and "nothing was sent" in r.stderr, r.stderr

    # two jobs without a bound go, each capped by its agent at what was left; together they pass the limit
    r = run_cli("submit", str(job(tmp_path, "a")), "--host", ssh_host, "--json")
    assert "a has no autostop bound: its agent stops it at 16.00 CNY, what is left of the month limit" in r.stderr
    a = json.loads(r.stdout)["job_id"]
    b = submit(ssh_host, job(tmp_path, "b"))["job_id"]
    caps = [status(ssh_host, j)["spec"]["autostop"]["budget"] for j in (a, b)]
    assert caps[0] == 16 and 0 < caps[1] < 16, caps
    wait_for(lambda: budget()["actions"], 60, "the laptop seeing the month limit passed")
    for j in (a, b):
        st = wait_state(ssh_host, j, ENDED, 60)
        assert st["state"] == "stopped" and st["reason"].startswith("budget: the month limit of 16.00 CNY is passed"), st
        assert "(after checkpoint ckpt_" in st["reason"], st["reason"]
    said = hook.wait_for("budget", 30)
    text = said["body"]["text"]
    assert "the month limit of 16.00 CNY is passed" in text and a in text and b in text, text

    # the limit reached: every submit is refused; the crossing was said once
    r = run_cli("submit", str(job(tmp_path, "late", budget=1)), "--host", ssh_host)
    assert r.returncode == 2 and "the month limit is reached" in r.stderr, r.stderr
    assert month(budget())["left"] <= 0
    assert hook.events().count("budget") == 1, hook.events()

    # raised a little: a job alone stops (its agent's cap) after its next checkpoint
    budget("set", "--month", str(month(budget())["spent"] + 2))
    c = submit(ssh_host, job(tmp_path, "c"))["job_id"]
    st = wait_state(ssh_host, c, ENDED, 60)
    assert st["state"] == "autostopped" and st["reason"].startswith("autostop: budget"), st
    assert "(after checkpoint ckpt_" in st["reason"], (st["reason"], (tmp_path / "remote-root/jobs" / c / "output.log").read_text())

    # the balance under its threshold: one notification, not one per look
    balance.write_text("42.5\n")
    assert budget()["balance"]["low"] and budget()["balance"]["value"] == 42.5
    assert hook.events().count("balance_low") == 1, hook.events()
    low = hook.wait_for("balance_low", 5)["body"]["text"]
    assert "balance is 42.50 CNY, under 100.00 CNY" in low and "hello" not in low, low


def test_what_budget_cannot_use_is_refused_or_said(tmp_path: Path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text("name: x\nrun: true\n")
    for args, said in ((("--month", "-3"), "--month '-3': expected an amount"), ((), "nothing to set"),
                       (("--notify", str(bare)), "has no notify: channels")):
        r = run_cli("budget", "set", *args)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    secrets = tmp_path / "config" / "secrets.env"  # the provider's token, as the power commands get it
    secrets.parent.mkdir(mode=0o700, exist_ok=True)
    secrets.write_text("SECRET_T=s3cr3t-value\n")
    secrets.chmod(0o600)
    doc = budget("set", "--day", "5", "--balance", "echo token-$SECRET_T; echo nope")
    assert doc["balance_command"] == "echo token-$SECRET_T; echo nope"
    assert doc["balance"]["error"].startswith("the balance command printed 'nope' as its last line, not a number")
    r = run_cli("budget", "set", "--balance", "sleep 30", env_extra={"GPUJOB_BALANCE_TIMEOUT": "1"})
    assert r.returncode == 0 and "balance: not read: the balance command did not finish in 1 s" in r.stdout, r
    r = run_cli("budget", "set", "--balance", "echo $SECRET_T >&2; exit 3")
    assert "exit 3" in r.stdout and "s3cr3t-value" not in r.stdout + r.stderr, r.stdout
    assert (tmp_path / "config" / "budget.json").stat().st_mode & 0o777 == 0o600
