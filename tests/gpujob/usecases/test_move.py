"""Moving a job between two hosts (two real sshd, separate roots) and placing one where GPUs
are free: the old host reachable, dead with a pulled checkpoint, dead with the checkpoint
on shared storage; the loss curve goes on from the checkpoint's step on the new host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Sshd, run_cli, start_sshd, stop_sshd
from tests.helpers import job_processes, needs, submit, wait_for, wait_state, write_job
from tests.remote.run.test_events import Hook

# plain torch, full-batch gradient descent: deterministic, so a resumed run logs exactly the
# losses an unbroken one would; a checkpoint every 5 steps and on a stop request; a first run holds
# at step HOLD until it is stopped (or killed), a resumed one runs to the end
TRAIN = """
    import json, os, pathlib, time, torch
    torch.manual_seed(0)
    X = torch.linspace(-1, 1, 64).unsqueeze(1)
    Y = 3 * X + 0.5
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ck = pathlib.Path(os.environ["GPUJOB_CKPT_DIR"])
    start = 0
    if os.environ["GPUJOB_RESUME"]:
        state = torch.load(pathlib.Path(os.environ["GPUJOB_RESUME"]) / "state.pt")
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
    pathlib.Path(os.environ["GPUJOB_STOP_FILE"] + ".watch").touch()  # says: this code saves on a stop request
    print("start", start, flush=True)

    def save(step):
        if (ck / f"step-{step}").exists():
            return
        tmp = ck / f".tmp-step-{step}"
        tmp.mkdir(exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp / "state.pt")
        (tmp / ".gpujob-complete").write_text("ok")
        tmp.rename(ck / f"step-{step}")

    for step in range(start + 1, int(os.environ["STEPS"]) + 1):
        loss = torch.nn.functional.mse_loss(model(X), Y)
        opt.zero_grad(); loss.backward(); opt.step()
        with open(os.environ["GPUJOB_METRICS_FILE"], "a") as f:
            f.write(json.dumps({"t": time.time(), "step": step, "loss": loss.item()}) + "\\n")
        if step % 5 == 0:
            save(step)
        while not start and step >= int(os.environ["HOLD"]) and not os.path.exists(os.environ["GPUJOB_STOP_FILE"]):
            time.sleep(0.05)  # the first run is mid-run until the test moves or kills it, however slow the machine
        if os.path.exists(os.environ["GPUJOB_STOP_FILE"]):
            save(step); print("stopped at", step, flush=True); raise SystemExit(0)
        time.sleep(0.0 if start else float(os.environ["STEP_S"]))  # a resumed run only has to finish
    print("done", flush=True)
"""


def add_host(name: str, sshd: Sshd, root: Path, path_prefix: str = "") -> None:
    from gpujob.config.hosts import Host, HostStore
    from gpujob.config.keys import public_key_line

    sshd.authorize(public_key_line())
    prefix = os.pathsep.join(p for p in (path_prefix, str(Path(sys.executable).parent)) if p)
    HostStore().save(Host(name=name, hostname="127.0.0.1", port=sshd.port, user=os.environ.get("USER", "root"),
                          root=str(root), env={"GPUJOB_PATH_PREFIX": prefix}, connect_timeout=5))


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[tuple[Sshd, Sshd]]:
    """Hosts ``a`` and ``b``: their own sshd and root each; no job process outlives the test."""
    a, b = start_sshd(tmp_path / "sshd-a"), start_sshd(tmp_path / "sshd-b")
    add_host("a", a, tmp_path / "root-a")
    add_host("b", b, tmp_path / "root-b")
    yield a, b
    for s in (a, b):
        stop_sshd(s)
    for root in (tmp_path / "root-a", tmp_path / "root-b"):
        for st in root.glob("jobs/*/status.json"):
            pid = json.loads(st.read_text()).get("supervisor_pid")
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    for root in (tmp_path / "root-a", tmp_path / "root-b"):
        for jd in root.glob("jobs/*"):
            for pid in job_processes(jd.name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def metrics(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def submit_training(tmp_path: Path, to: str, steps: int, **extra: object) -> str:
    needs("torch")
    job = write_job(tmp_path, "lin", TRAIN, "python main.py", env={"STEPS": str(steps), "STEP_S": "0.15", "HOLD": "12"}, **extra)
    return submit(to, job)["job_id"]


def reached(job_dir: Path, step: int) -> None:
    wait_for(lambda: any(m["step"] >= step for m in metrics(job_dir / "metrics.jsonl")), 90, f"step {step}")


def kill_instance(sshd: Sshd, job_dir: Path) -> None:
    """The instance goes away: its sshd, the job's supervisor and training, all at once."""
    stop_sshd(sshd)
    pid = json.loads((job_dir / "status.json").read_text())["supervisor_pid"]
    os.kill(pid, signal.SIGKILL)
    for p in job_processes(job_dir.name):
        os.kill(p, signal.SIGKILL)
    wait_for(lambda: not job_processes(job_dir.name), 20, "the job's processes gone")


def move(job_id: str, to: str) -> dict:
    r = run_cli("move", job_id, "--to", to, "--json", timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def check_resumed(new_dir: Path, ck_step: int, reference: dict[int, float], steps: int) -> None:
    """The new host's run starts at the step after the checkpoint and logs the losses an unbroken
    run logs (``reference``: step → loss from the old host)."""
    log = (new_dir / "output.log").read_text()
    assert f"start {ck_step}" in log and "done" in log
    lines = metrics(new_dir / "metrics.jsonl")
    resumed = lines[[i for i, m in enumerate(lines) if m["step"] == ck_step + 1][-1]:]
    assert [m["step"] for m in resumed] == list(range(ck_step + 1, steps + 1))
    for m in resumed:
        if m["step"] in reference:
            assert m["loss"] == pytest.approx(reference[m["step"]], rel=1e-5)
    losses = [m["loss"] for m in resumed]
    assert all(x >= y for x, y in zip(losses, losses[1:])) and losses[0] < reference[1]


def test_move_mid_run_with_the_old_host_answering(two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    job_id = submit_training(tmp_path, "a", 40)
    old_dir, new_dir = tmp_path / "root-a" / "jobs" / job_id, tmp_path / "root-b" / "jobs" / job_id
    reached(old_dir, 8)
    res = move(job_id, "a,b")  # a list: the first other host that fits
    assert res["source"] == "host" and res["old_marked"] and res["from"] == "a" and res["to"] == "b"
    ck_step = int(res["checkpoint"].split("-")[1])
    assert ck_step >= 8 and res["files"] >= 3
    # the laptop's index follows the job: status without --host asks b
    st = wait_state("b", job_id, ("succeeded", "failed"), 120)
    r = run_cli("status", job_id, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "succeeded", (st, r.stderr)
    old = json.loads((old_dir / "status.json").read_text())
    assert old["state"] == "moved" and old["moved_to"] == "b"
    # one curve: the old host's steps up to the checkpoint, then the new host's, no gap, no repeat
    steps = [m["step"] for m in metrics(new_dir / "metrics.jsonl")]
    assert steps == list(range(1, 41)), steps
    losses = [m["loss"] for m in metrics(new_dir / "metrics.jsonl")]
    assert all(x >= y for x, y in zip(losses, losses[1:]))  # a restart from scratch would jump back up
    log = (new_dir / "output.log").read_text()
    assert f"stopped at {ck_step}" in log and f"start {ck_step}" in log and "done" in log
    events = [json.loads(x)["event"] for x in (new_dir / "events.jsonl").read_text().splitlines()]
    assert events.index("submitted") < events.index("moved") < len(events) - 1
    assert st["moves"][-1]["from"] == "a" and st["moves"][-1]["source"] == "host"
    # the old host refuses to run it again; a finished job has nothing to move
    r = run_cli("status", job_id, "--host", "a", "--json")
    assert json.loads(r.stdout)["state"] == "moved"
    agent = subprocess.run([sys.executable, "-m", "remote", "--root", str(tmp_path / "root-a"), "resume", "--job", job_id],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert agent.returncode != 0 and "moved to b" in agent.stdout
    r = run_cli("move", job_id, "--to", "a")
    assert r.returncode != 0 and "succeeded" in r.stderr and "Traceback" not in r.stderr


def test_move_from_a_pulled_checkpoint_when_the_host_is_dead(two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    job_id = submit_training(tmp_path, "a", 25)
    old_dir, new_dir = tmp_path / "root-a" / "jobs" / job_id, tmp_path / "root-b" / "jobs" / job_id
    reached(old_dir, 6)
    pulls = tmp_path / "pulls"
    r = run_cli("pull", job_id, str(pulls), "--latest", "--json")
    assert r.returncode == 0, r.stderr
    pulled = json.loads(r.stdout)["selected"]
    reference = {m["step"]: m["loss"] for m in metrics(old_dir / "metrics.jsonl")}
    kill_instance(two_hosts[0], old_dir)
    r = run_cli("ls", "--json")  # host a is away: its job as this laptop last knew it, marked so
    assert r.returncode == 3 and "a" in json.loads(r.stdout)["errors"], r.stderr + r.stdout
    row = next(j for j in json.loads(r.stdout)["jobs"] if j["job_id"] == job_id)
    assert row["host"] == "a" and row["state"] == "running" and row["unreachable"] and row["last_seen"], row
    r = run_cli("ls", env_extra={"COLUMNS": "200"})
    assert "running?" in r.stdout and "host unreachable: state as last known, seen so" in r.stdout, r.stdout
    assert "its jobs above are as this laptop last knew them" in r.stdout, r.stdout
    r = run_cli("resume", job_id, "--host", "b", "--json", timeout=300)  # another host: resume moves it
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["source"] == "pull" and res["checkpoint"] == pulled and not res["old_marked"]
    assert "does not answer" in res["old_unreachable"]
    st = wait_state("b", job_id, ("succeeded", "failed"), 120)
    assert st["state"] == "succeeded", st
    check_resumed(new_dir, int(pulled.split("-")[1]), reference, 25)
    # the old instance comes back: guard tells it the job left, so it cannot run it a second time
    assert json.loads((old_dir / "status.json").read_text())["state"] != "moved"
    revived = start_sshd(tmp_path / "sshd-a", host_key=two_hosts[0].host_key, port=two_hosts[0].port)
    try:
        r = run_cli("guard", job_id, "--once")
        assert r.returncode == 0 and "marked moved on a" in r.stdout, r.stderr
        assert json.loads((old_dir / "status.json").read_text())["state"] == "moved"
    finally:
        stop_sshd(revived)


def test_guard_moves_a_job_whose_host_stays_away_checkpoint_on_shared_storage(
        two_hosts: tuple[Sshd, Sshd], tmp_path: Path, hook: Hook) -> None:
    shared = tmp_path / "shared-fs"
    notify = {"on": ["lost", "succeeded"], "channels": [{"type": "webhook", "url": hook.url}]}
    job_id = submit_training(tmp_path, "a", 25, checkpoint={"dir": str(shared)}, host=["a", "b"],
                             retry={"move_after": "1s"}, notify=notify)
    old_dir, new_dir = tmp_path / "root-a" / "jobs" / job_id, tmp_path / "root-b" / "jobs" / job_id
    reached(old_dir, 6)
    reference = {m["step"]: m["loss"] for m in metrics(old_dir / "metrics.jsonl")}
    r = run_cli("guard", job_id, "--once", "--json")  # the host answers: nothing to do yet
    assert r.returncode == 0 and json.loads(r.stdout)["outcomes"] == [], r.stderr
    kill_instance(two_hosts[0], old_dir)
    from remote.ckpt.checkpoints import latest_complete

    ck = latest_complete(shared / job_id)
    assert ck is not None
    outcomes: list[dict] = []

    def moved() -> bool:  # the first look sees a silent host, a later one (1 s on) moves the job
        r = run_cli("guard", job_id, "--once", "--json", timeout=300)
        assert r.returncode == 0, r.stderr
        outcomes[:] = json.loads(r.stdout)["outcomes"]
        return bool(outcomes)

    wait_for(moved, 120, "the guard's move")
    res = outcomes[0]["move"]
    assert outcomes[0]["action"] == "moved" and res["source"] == "shared" and res["files"] == 0 and res["to"] == "b"
    lost = hook.wait_for("lost", 20)["body"]
    assert lost["job_id"] == job_id and "moved to b" in lost["text"]
    st = wait_state("b", job_id, ("succeeded", "failed"), 120)
    assert st["state"] == "succeeded", st
    assert hook.wait_for("succeeded", 30)["body"]["job_id"] == job_id  # its notifications go on from b
    assert (new_dir / "ckpt").resolve() == (shared / job_id).resolve()
    check_resumed(new_dir, int(ck.name.split("-")[1]), reference, 25)


SMI = '#!/bin/sh\ncat "$(dirname "$0")/figures.csv"\n'


def test_placement_skips_a_busy_host_and_one_that_does_not_answer(two_hosts: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    from gpujob.config.hosts import Host, HostStore
    from tests.conftest import free_port

    for name, figures in (("a", "0, 97, 50000, 81920, 300.0, 70\n"), ("b", "0, 0, 5, 81920, 60.0, 30\n")):
        bindir = tmp_path / f"bin-{name}"
        bindir.mkdir()
        (bindir / "nvidia-smi").write_text(SMI)
        (bindir / "nvidia-smi").chmod(0o755)
        (bindir / "figures.csv").write_text(figures)  # a: someone else's process fills GPU 0
        add_host(name, two_hosts[0 if name == "a" else 1], tmp_path / f"root-{name}", str(bindir))
        (tmp_path / f"root-{name}").mkdir()  # the agent's own gpus verb finds the stand-in too
        (tmp_path / f"root-{name}" / "agent.env").write_text(f"GPUJOB_PATH_PREFIX={bindir}\n")
    HostStore().save(Host(name="gone", hostname="127.0.0.1", port=free_port(), user="root", connect_timeout=2))
    job = write_job(tmp_path, "place", "print('placed')\n", "python main.py", gpus=1, host=["gone", "a", "b"])
    r = run_cli("submit", str(job), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    assert res["host"] == "b"
    why = {s["host"]: s["why"] for s in res["skipped"]}
    assert "does not answer" in why["gone"] and "1 of 1 GPU(s) busy" in why["a"]
    assert wait_state("b", res["job_id"], ("succeeded", "failed"))["state"] == "succeeded"
    # the same from the command line, and nothing free anywhere: a clear refusal, nothing sent
    (tmp_path / "bin-b" / "figures.csv").write_text("0, 99, 70000, 81920, 300.0, 70\n")
    r = run_cli("submit", str(job), "--host", "a,b")
    assert r.returncode != 0 and "no host has the job's GPUs free" in r.stderr and "--wait-gpus" in r.stderr
    assert "Traceback" not in r.stderr
    # --wait-gpus: polls until b frees up, then lands there
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_PLACE_POLL="0.5")
    waiting = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "submit", str(job), "--host", "a,b", "--wait-gpus",
                                "2m"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: (waiting.stderr.readline() or "").startswith("waiting"), 60, "the first wait")
        (tmp_path / "bin-b" / "figures.csv").write_text("0, 0, 5, 81920, 60.0, 30\n")
        out, err = waiting.communicate(timeout=120)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert "submitted to b" in out and "skipped a: 1 of 1 GPU(s) busy" in err


def test_a_cut_move_resumes_asking_only_for_what_is_missing(tmp_path: Path) -> None:
    """The new host's wish list after a cut stream: whole files it has are not asked again,
    a cut large file only from its first missing chunk; the second stream completes it."""
    import io

    from remote import stream
    from remote.data import transfer
    from remote.jobs import move

    job = tmp_path / "old" / "j1"
    (job / "ckpt" / "step-5").mkdir(parents=True)
    big = os.urandom(3 * stream.CHUNK + 12345)
    (job / "ckpt" / "step-5" / "state.pt").write_bytes(big)
    (job / "ckpt" / "step-5" / ".gpujob-complete").write_text("ok")
    (job / "metrics.jsonl").write_text('{"step": 5, "loss": 0.5}\n')
    (job / "status.json").write_text("{}")
    offered = transfer.select(job, "latest")
    inbox = tmp_path / "incoming" / "j1"
    first = move.wanted(stream.tree(inbox), offered, skip_ckpt=False)
    assert "status.json" not in first and "metrics.jsonl" in first
    out = io.BytesIO()
    transfer.send_list(job, first, out)
    cut = out.getvalue()[: 2 * stream.CHUNK + 4096]  # the link drops inside the third chunk
    with pytest.raises(stream.TransferError):
        stream.read_items(inbox, io.BytesIO(cut), links_out=False)
    again = move.wanted(stream.tree(inbox), offered, skip_ckpt=False)
    assert "ckpt/step-5/.gpujob-complete" not in again and "metrics.jsonl" in again  # came whole / never came
    resumed = [w for w in again if isinstance(w, list)]
    assert resumed and resumed[0][0] == "ckpt/step-5/state.pt" and len(resumed[0][1]) >= 1
    out = io.BytesIO()
    transfer.send_list(job, again, out)
    assert len(out.getvalue()) < len(big)  # only the rest travels
    stream.read_items(inbox, io.BytesIO(out.getvalue()), links_out=False)
    assert (inbox / "ckpt" / "step-5" / "state.pt").read_bytes() == big
    assert move.wanted(stream.tree(inbox), offered, skip_ckpt=False) == []
    # a shared checkpoint is never asked for
    assert all(not str(w).startswith("ckpt") for w in move.wanted(stream.tree(tmp_path / "none"), offered, True))


def test_a_refused_adopt_gives_the_sync_lease_back(tmp_path: Path) -> None:
    """A move refused on the new host before the job exists there lets the project's next
    submit sync at once instead of waiting out the lease."""
    import io

    from remote.core import locks
    from remote.core.errors import AgentError
    from remote.core.layout import Root
    from remote.jobs import move

    root = Root(str(tmp_path / "root"))
    (root.jobs / "j1").mkdir(parents=True)  # a job of this id already lives here
    (root.jobs / "j1" / "status.json").write_text(json.dumps({"state": "running", "job_id": "j1"}))
    assert locks.try_lease(root.root, "proj", "tok-move") is None
    assert locks.try_lease(root.root, "proj", "tok-other") is not None  # held by the move
    request = {"job_id": "j1", "project": "proj", "lease": "tok-move", "spec": {"name": "proj"}}
    with pytest.raises(AgentError, match="already exists"):
        move.adopt(root, io.BytesIO(json.dumps(request).encode() + b"\n"), io.BytesIO())
    assert locks.try_lease(root.root, "proj", "tok-other") is None  # given back
