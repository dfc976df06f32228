"""The run ledger, ``runs``, ``compare``, ``rerun`` and ``sweep`` (docs/experiments.md), with real
scripts that never import gpujob: an argparse loop that prints its loss, and an HF Trainer."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.byo_helpers import QUIET, job_dir, log_text
from tests.conftest import REPO, run_cli
from tests.helpers import needs, submit, wait_for, wait_state, write_job
from tests.remote.ckpt.test_user_scripts_hf import HF_MODEL

# a plain loop: its arguments are its hyperparameters; Ctrl-C (the agent's stop) saves and leaves
LOOP = """
    import argparse, json, os, signal, time
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--sleep", type=float, default=0.01)
    p.add_argument("--hold-at", type=int, default=0)  # at this step, wait until stopped (or --hold-s)
    p.add_argument("--hold-s", type=float, default=0.0)
    a = p.parse_args()
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    w = 5.0
    for step in range(1, a.steps + 1):
        w -= a.lr * w
        print(f"step {step} loss {w * w + 0.01:.6f}", flush=True)
        time.sleep(a.sleep)
        end = time.time() + (a.hold_s if step == a.hold_at else 0)
        while not stop and time.time() < end:
            time.sleep(0.05)
        if stop:
            break
    with open(os.path.join(os.environ["GPUJOB_CKPT_DIR"], f"ckpt_{step}.json"), "w") as f:
        json.dump({"step": step, "w": w}, f)
    print("saved at step", step, flush=True)
"""


def cli_json(*args: str) -> dict:
    r = run_cli(*args, "--json", timeout=180)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def test_ledger_holds_arguments_compare_shows_the_one_that_differs_rerun_runs_the_same_code(
        any_host: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, "ledgerq", LOOP, "python main.py --lr 0.1 --steps 12", env=QUIET,
                    checkpoint={"pattern": "ckpt_*.json"})
    a = submit(any_host, job)["job_id"]
    wait_state(any_host, a, ("succeeded",), 90, root=job_dir(tmp_path, any_host, a).parent.parent)
    (row,) = cli_json("runs")["runs"]
    assert row["job_id"] == a and row["params"] == {"lr": 0.1, "steps": 12} and row["state"] == "succeeded"
    assert row["code_hash"] and row["env_hash"] and row["final"]["loss"] < 25

    # the script changes after A: rerun restores A's code (its kept snapshot) with the new argument
    main = job.parent / "main.py"
    main.write_text(main.read_text() + "\nprint('EDITED AFTER A')\n")
    b_doc = cli_json("rerun", a, "--set", "lr=0.3")
    b = b_doc["job_id"]
    assert b_doc["parent"] == a and b_doc["restored"] is True and b_doc["host"] == any_host
    wait_state(any_host, b, ("succeeded",), 90, root=job_dir(tmp_path, any_host, b).parent.parent)
    assert "EDITED" not in log_text(job_dir(tmp_path, any_host, b))
    runs = {r["job_id"]: r for r in cli_json("runs", "--name", "ledgerq")["runs"]}
    assert runs[b]["code_hash"] == runs[a]["code_hash"] and runs[b]["parent"] == a
    assert runs[b]["params"] == {"lr": 0.3, "steps": 12}
    assert [r["job_id"] for r in cli_json("runs", "--where", "lr>0.2")["runs"]] == [b]
    assert [r["job_id"] for r in cli_json("runs", "--sort", "loss")["runs"]] == [b, a]  # lr 0.3 ends lower

    cmp = cli_json("compare", a, b)
    assert cmp["params"] == {"lr": [0.1, 0.3]}, cmp  # the one argument that differs, and nothing else
    assert cmp["code"] == {} and cmp["env"] == {} and cmp["same_params"] == {"steps": 12}
    assert cmp["final"]["loss"][1] < cmp["final"]["loss"][0] and len(cmp["series"]["loss"][0]) >= 10
    drawn = run_cli("compare", a, b)
    assert drawn.returncode == 0 and "lr" in drawn.stdout and "▁" in drawn.stdout, drawn.stdout + drawn.stderr
    import importlib.util

    if importlib.util.find_spec("matplotlib"):
        assert cli_json("compare", a, b, "--plot", str(tmp_path / "cmp.png"))["plot"] == str(tmp_path / "cmp.png")
        assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"
    # the Python API's results are the commands' --json
    import gpujob

    with gpujob.Client() as c:
        assert c.runs(name="ledgerq").to_json() == cli_json("runs", "--name", "ledgerq")
        assert c.compare(a, b).to_json() == cmp

    # the ledger outlives the host's record: rm, then runs and cost still know A
    assert run_cli("rm", a).returncode == 0
    assert a in [r["job_id"] for r in cli_json("runs")["runs"]]
    cost = cli_json("cost")
    assert {j["job_id"]: j.get("source") for j in cost["jobs"]}[a] == "ledger"


STEPS = 25
SWEEP_LOOP_RUN = f"python main.py --lr 0.1 --steps {STEPS} --sleep 0.1"
# a trial past the pruner's warmup (3 steps) holds at step 5 until it is stopped, or 20 s: on a
# loaded machine a round of the sweep's polls (an agent call per trial) may take longer than the
# 2.5 s a whole trial runs, and the pruner only stops a trial it has seen running past its warmup
PRUNABLE_LOOP_RUN = SWEEP_LOOP_RUN + " --hold-at 5 --hold-s 20"


def _priced_local_host(tmp_path: Path, name: str, price: float) -> None:
    """A host profile of this machine (kind local) with a price (what the budget counts) and a
    shutdown command that only leaves a line in ``tmp_path/off`` (the stand-in for a power switch)."""
    from gpujob.config.hosts import Host, HostStore

    HostStore().save(Host(name=name, kind="local", hostname="localhost", root=str(tmp_path / "local-root"),
                          price_per_hour=price, currency="CNY", shutdown_command=f"echo off >> {tmp_path / 'off'}"))


@pytest.mark.slow
def test_sweep_prunes_gracefully_resumes_and_ends_within_its_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           hook: Any) -> None:
    needs("optuna")
    monkeypatch.setenv("GPUJOB_METRICS_EVERY", "0.2")  # the agent reads the log's loss this often
    monkeypatch.setenv("GPUJOB_SWEEP_POLL", "0.3")
    _priced_local_host(tmp_path, "priced", 360.0)  # 0.1 CNY a second
    sweep = {"method": "grid", "parallel": 2, "pruner": "median", "startup_trials": 2, "warmup_steps": 3, "seed": 10,
             "params": {"lr": [0.4, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005]}}
    job = write_job(tmp_path, "sw", LOOP, PRUNABLE_LOOP_RUN, env=QUIET, checkpoint={"pattern": "ckpt_*.json"}, sweep=sweep,
                    notify={"channels": [{"type": "webhook", "url": hook.url}]})
    # the driver is interrupted once two trials run (the laptop closing): they run on; resume goes on
    driver = subprocess.Popen([sys.executable, "-m", "gpujob.cli", "sweep", str(job), "--hosts", "priced", "--name",
                               "sw-grid"], env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(cli_json("runs", "--sweep", "sw-grid")["runs"]) == 2, 90, "two trials submitted")
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 130 and "sweep resume" in err, err
    left = cli_json("sweep", "status", "sw-grid")
    assert left["state"] == "running" and len(left["trials"]) == 2, left
    doc = cli_json("sweep", "resume", "sw-grid")
    assert doc["state"] == "done" and len(doc["trials"]) == 8, doc
    assert {t["job_id"] for t in left["trials"]} <= {t["job_id"] for t in doc["trials"]}
    # one notification for the sweep (none per trial), with the leaderboard
    assert len(hook.got) == 1 and "sw-grid" in json.dumps(hook.got[0]["body"]), hook.got
    assert f"lr={doc['best']['params']['lr']}" in json.dumps(hook.got[0]["body"])
    pruned = [t for t in doc["trials"] if t["state"] == "pruned"]
    assert pruned and doc["best"]["state"] == "complete", doc["trials"]
    saved = []
    for t in pruned:  # stopped gracefully: the job saved its checkpoint before it left
        st = cli_json("status", t["job_id"], "--host", "priced")
        assert st["state"] == "stopped" and st["checkpoints"], st
        saved.append(int(log_text(job_dir(tmp_path, "local", t["job_id"])).split("saved at step")[1].split()[0]))
    assert min(saved) < STEPS and doc["spent"]["steps"] < 8 * STEPS, (saved, doc["trials"])
    assert cli_json("sweep", "status", "sw-grid")["best"] == doc["best"]
    assert {r["sweep"] for r in cli_json("runs", "--sweep", "sw-grid", "--limit", "0")["runs"]} == {"sw-grid"}

    # a budget of 2 CNY (20 trial-seconds at this price) ends the sweep with its trials stopped cleanly;
    # after: shutdown powers the host off once, after the last trial (never after each)
    assert not (tmp_path / "off").exists()
    budget = 2.0
    doc = cli_json("sweep", str(job), "--hosts", "priced", "--name", "sw-budget", "--budget", str(budget),
                   "--set", "run=python main.py --steps 400 --sleep 0.05", "--set", "autostop.after=shutdown",
                   "--trials", "6")
    assert doc["ended"].startswith("budget"), doc
    assert (tmp_path / "off").read_text() == "off\n" and doc["shutdown"]["priced"].startswith("shutdown command ran")
    assert doc["spent"]["cost"] <= budget * 1.05, doc["spent"]
    assert all(t["state"] in ("stopped", "complete", "pruned") for t in doc["trials"]), doc["trials"]
    stopped = [t for t in doc["trials"] if t["state"] == "stopped"]
    assert stopped
    for t in stopped:
        assert cli_json("status", t["job_id"], "--host", "priced")["checkpoints"]



def test_a_sweep_whose_trials_never_ran_fails_naming_the_host(tmp_path: Path) -> None:
    """issue 34: a host refusing every connection: each trial "not submitted", and the sweep says it
    failed (exit 3, naming the host), never "(done) ... trial(s) done" with exit 0."""
    needs("optuna")
    from gpujob.config.hosts import Host, HostStore
    from tests.conftest import free_port

    HostStore().save(Host(name="dead", hostname="127.0.0.1", port=free_port(), connect_timeout=3))  # nothing listens
    job = write_job(tmp_path, "swdead", LOOP, SWEEP_LOOP_RUN, env=QUIET,
                    sweep={"method": "grid", "params": {"lr": [0.1, 0.2]}})
    r = run_cli("sweep", str(job), "--hosts", "dead", "--name", "sw-dead", timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 3, (r.returncode, out)
    assert "no trial of sweep sw-dead ran" in r.stderr and "to dead (" in r.stderr, out
    assert "trial(s) done" not in out and "(done)" not in out and "Traceback" not in out, out
    assert r.stderr.count("not submitted") == 2, out  # each trial said why, then the sweep
    doc = cli_json("sweep", "status", "sw-dead")
    assert doc["state"] == "failed" and doc["ended"].startswith("no trial of sweep sw-dead ran"), doc



@pytest.mark.slow  # ~50 s: the new host's preflight, one trial that runs
def test_a_partly_failed_sweep_says_how_many_trials_ran(tmp_path: Path) -> None:
    """A trial whose interpreter the host lacks is refused there; the other runs: "1 of 2 trial(s) ran"."""
    needs("optuna")
    _priced_local_host(tmp_path, "half", 36.0)
    job = write_job(tmp_path, "swhalf", LOOP, "python main.py --steps 3 --sleep 0", env=QUIET,
                    sweep={"method": "grid", "params": {"run": ["python main.py --steps 3 --sleep 0",
                                                                "python9.9 main.py --steps 3"]}})
    r = run_cli("sweep", str(job), "--hosts", "half", "--name", "sw-half", "--json", timeout=180,
                env_extra={"GPUJOB_SWEEP_POLL": "0.3"})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["ended"].startswith("1 of 2 trial(s) ran; 1 not submitted (") and "python9.9" in doc["ended"], doc
    assert [t["state"] for t in doc["trials"]] == ["complete", "failed"], doc["trials"]


HF_HPARAMS = HF_MODEL + """
    args = TrainingArguments(output_dir="./results", max_steps=4, learning_rate=3e-4, warmup_steps=1,
                             logging_steps=1, per_device_train_batch_size=4, report_to="none", use_cpu=True,
                             save_strategy="no")
    Trainer(model=model, args=args, train_dataset=Data()).train()
"""


@pytest.mark.slow
def test_hf_trainer_arguments_reach_the_ledger_through_the_hook(tmp_path: Path) -> None:
    needs("torch", "transformers", "accelerate")
    job = write_job(tmp_path, "hfhp", HF_HPARAMS, "python main.py --tag first", env=QUIET)
    jid = submit("local", job)["job_id"]
    wait_state("local", jid, ("succeeded",), 120, root=tmp_path / "local-root")
    cli_json("status", jid)  # the laptop learns the job's state: the ledger row is brought up to date
    (row,) = cli_json("runs")["runs"]
    p = row["params"]
    assert p["tag"] == "first" and p["learning_rate"] == 3e-4 and p["max_steps"] == 4 and p["warmup_steps"] == 1
    assert p["per_device_train_batch_size"] == 4 and "output_dir" not in p


def test_the_ledger_takes_concurrent_writers(tmp_path: Path) -> None:
    """Four gpujob processes writing at once (a sweep, status polls, submits): every row lands."""
    code = ("import sys; from gpujob.config.ledger import open_ledger\n"
            "with open_ledger() as lg:\n"
            "    for i in range(50):\n"
            "        lg.put(f'w{sys.argv[1]}-{i}', name='c', state='running', params={'i': i})\n"
            "        lg.put(f'w{sys.argv[1]}-{i}', state='succeeded', final={'loss': i})\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], env=env) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    doc = cli_json("runs", "--name", "c", "--where", "state=succeeded", "--limit", "0")
    assert doc["total"] == 200 and {r["final"]["loss"] for r in doc["runs"]} == set(range(50))



def test_rerun_rebuilds_code_from_git_commit_and_diff_when_no_snapshot_is_kept(tmp_path: Path) -> None:
    """A tree in git is kept as its commit and its uncommitted diff (no tarball), and rebuilt from them,
    new files included: it hashes as the run's did."""
    from gpujob.config.ledger import open_ledger
    from gpujob.config.ledger.code import code_hash, snapshot_path, tree_files
    from gpujob.config.spec import load_spec
    from gpujob.usecases.experiments.record import code_of, record_submit
    from gpujob.usecases.experiments.rerun import plan

    repo = tmp_path / "repo"
    proj = repo / "proj"
    proj.mkdir(parents=True)
    (proj / "main.py").write_text("print('v1')\n")
    (proj / "job.yaml").write_text("name: gitrun\nrun: python main.py --lr 0.1\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "v1"]):
        subprocess.run(git + args, check=True)
    (proj / "main.py").write_text("print('v2, uncommitted')\n")  # the run's code: the commit plus a diff
    (proj / "extra.py").write_text("X = 1\n")  # and a new file
    spec = load_spec(proj / "job.yaml")
    code = code_of(spec)
    assert code["git_commit"] and code["diff_hash"] and "extra.py" in code["diff"] and code["snapshot"] is False
    record_submit({"job_id": "gitrun-1", "host": "local", "state": "running"}, spec, code,
                  str((proj / "job.yaml").resolve()), [])
    assert not snapshot_path(code["code_hash"]).exists()
    (proj / "main.py").write_text("print('v3, later')\n")
    p = plan("gitrun-1", ["lr=0.2"])
    restored = Path(p["job_file"]).parent
    assert p["restored"] and restored != proj and (restored / "main.py").read_text() == "print('v2, uncommitted')\n"
    assert code_hash(restored, tree_files(restored, [])) == code["code_hash"]
    assert 'run="python main.py --lr 0.2"' in p["set"], p["set"]
    with open_ledger() as lg:
        assert lg.diff(code["diff_hash"]) == code["diff"]



def test_rerun_runs_exactly_the_code_of_the_run_it_repeats(tmp_path: Path) -> None:
    """issue 34: A's code, restored under gpujob's cache folder, was withheld as "gpujob's own files":
    the rerun ran the host's copy (B's, submitted after A) while the ledger said A's code_hash.
    Now it sends A's tree, and the host checks the code it got hashes as sent before the job exists."""
    import gpujob
    from gpujob.errors import GpujobError

    job = write_job(tmp_path, "exact", "print('CODE', 'v1', open('data/x.txt').read(), flush=True)\n", "python main.py",
                    env=QUIET, data=["./data/x.txt"])  # a data: file inside the workdir: data, never code
    (job.parent / "lib").mkdir()
    (job.parent / "lib" / "util.py").write_text("X = 1\n")
    (job.parent / "data").mkdir()
    (job.parent / "data" / "x.txt").write_text("DATA-1")
    a = submit("local", job)["job_id"]
    wait_state("local", a, ("succeeded",), 90, root=tmp_path / "local-root")
    (job.parent / "main.py").write_text("print('CODE', 'v2', flush=True)\n")  # B: the newer edit, on the host now
    (job.parent / "lib" / "new.py").write_text("Y = 2\n")
    b = submit("local", job)["job_id"]
    wait_state("local", b, ("succeeded",), 90, root=tmp_path / "local-root")
    doc = cli_json("rerun", a)
    c = doc["job_id"]
    assert doc["restored"] is True and doc["parent"] == a, doc
    wait_state("local", c, ("succeeded",), 90, root=tmp_path / "local-root")
    assert "CODE v1 DATA-1" in log_text(job_dir(tmp_path, "local", c)), log_text(job_dir(tmp_path, "local", c))
    assert not (job_dir(tmp_path, "local", c) / "code" / "lib" / "new.py").exists()  # exactly A's tree
    runs = {r["job_id"]: r for r in cli_json("runs", "--name", "exact")["runs"]}
    assert runs[c]["code_hash"] == runs[a]["code_hash"] != runs[b]["code_hash"]

    # the host refuses a job whose code does not hash as expected: no job is created
    before = {j["job_id"] for j in cli_json("ls", "--host", "local")["jobs"]}
    with gpujob.Client() as cl, pytest.raises(GpujobError, match="hashes .*, not 0000000000000000"):
        cl.submit(str(job), host="local", expect_code="0" * 16)
    assert {j["job_id"] for j in cli_json("ls", "--host", "local")["jobs"]} == before


def test_the_hosts_code_hash_is_the_ledgers(tmp_path: Path) -> None:
    """The agent's hash of a job's code (remote/data/codehash.py) is the laptop's code_hash of the same tree:
    nested folders, a name sorting before its folder's, an exec bit, a link."""
    from gpujob.config.ledger.code import code_hash, tree_files
    from remote.data.codehash import tree_hash

    t = tmp_path / "t"
    for rel, text in {"a.txt": "1", "a/b.py": "2", "a/c/d.py": "3", "z/y.py": "4", "b-": "5", "b/x": "6"}.items():
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        (t / rel).write_text(text)
    (t / "a" / "b.py").chmod(0o755)
    (t / "link").symlink_to("a/b.py")
    assert tree_hash(str(t)) == code_hash(t, tree_files(t, [])), [r for r, _ in tree_files(t, [])]


def test_a_rerun_whose_code_cannot_be_rebuilt_submits_nothing(tmp_path: Path) -> None:
    """issue 34: a run in git whose uncommitted change was too large to keep (and its tree too large
    for a snapshot) was rebuilt from its commit alone and submitted. Now: refused, nothing submitted."""
    from gpujob.config.ledger.code import DIFF_MAX, SNAPSHOT_MAX
    from gpujob.config.spec import load_spec
    from gpujob.usecases.experiments.record import code_of, record_submit

    repo = tmp_path / "big"
    repo.mkdir()
    (repo / "main.py").write_text("print('v1')\n")
    (repo / "job.yaml").write_text("name: bigrun\nrun: python main.py\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "v1"]):
        subprocess.run(git + args, check=True)
    (repo / "weights.bin").write_bytes(os.urandom(max(DIFF_MAX, SNAPSHOT_MAX) + (1 << 20)))  # untracked, not ignored
    spec = load_spec(repo / "job.yaml")
    code = code_of(spec)
    assert code["diff_hash"] and not code["diff"] and not code["snapshot"], {k: code[k] for k in code if k != "diff"}
    record_submit({"job_id": "bigrun-1", "host": "local", "state": "succeeded"}, spec, code,
                  str((repo / "job.yaml").resolve()), [])
    (repo / "weights.bin").unlink()  # the tree changed since
    r = run_cli("rerun", "bigrun-1", "--host", "local")
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert "the code of bigrun-1 cannot be rebuilt exactly" in r.stderr and "too large to keep" in r.stderr, r.stderr
    assert "nothing was submitted" in r.stderr
    assert [x["job_id"] for x in cli_json("runs", "--name", "bigrun")["runs"]] == ["bigrun-1"]


def test_a_job_file_with_literal_secrets_stays_out_of_the_ledger(tmp_path: Path) -> None:
    """Its snapshot and its row hold no secret value (the job file is neither sent nor kept)."""
    import tarfile

    from gpujob.config.ledger import ledger_path
    from gpujob.config.ledger.code import snapshot_path
    from gpujob.config.spec import load_spec
    from gpujob.usecases.experiments.record import code_of, record_submit

    secret = "ledger-secret-4f2a9c"
    proj = tmp_path / "sec"
    proj.mkdir()
    (proj / "main.py").write_text("print(1)\n")
    (proj / "job.yaml").write_text(json.dumps({"name": "sec", "run": "python main.py --lr 0.1", "notify": {
        "channels": [{"type": "webhook", "url": "http://127.0.0.1:9/hook", "secret": secret}]}}))
    spec = load_spec(proj / "job.yaml")
    code = code_of(spec)
    record_submit({"job_id": "sec-1", "host": "local", "state": "running"}, spec, code, str(proj / "job.yaml"), [])
    with tarfile.open(snapshot_path(code["code_hash"])) as tar:
        assert tar.getnames() == ["main.py"]
    written = [p.read_bytes() for p in ledger_path().parent.glob("ledger.sqlite*")]  # the WAL too
    assert written and not any(secret.encode() in b for b in written)


# a Lightning module whose width is a hyperparameter only save_hyperparameters() records (the run
# line differs by --tag alone); never imports gpujob
LIGHTNING_HP = """
    import argparse, torch, lightning as L
    p = argparse.ArgumentParser()
    p.add_argument("--tag")
    a = p.parse_args()

    class M(L.LightningModule):
        def __init__(self, width, lr=0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 1))
        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), self.hparams.lr)

    x = torch.randn(32, 4)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False, log_every_n_steps=2)
    trainer.fit(M(4 if a.tag == "a" else 8), dl)
"""


@pytest.mark.slow
def test_lightning_hparams_reach_the_ledger_and_live_views_keep_it_up_to_date(tmp_path: Path) -> None:
    """No command but the live views looks at the jobs: ``status A -w`` follows A to its end, ``ls --watch``
    sees B end; the ledger has both (A's Lightning hparams with them), and compare tells them apart."""
    needs("torch", "lightning")
    job = write_job(tmp_path, "plhp", LIGHTNING_HP, "python main.py --tag a", env=QUIET)
    a = submit("local", job)["job_id"]
    b = submit("local", job, "--set", "run=python main.py --tag b")["job_id"]
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    cli = [sys.executable, "-m", "gpujob.cli"]
    lsw = subprocess.Popen(cli + ["ls", "--watch", "--interval", "0.5"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        live = subprocess.run(cli + ["status", a, "-w", "--interval", "0.5"], env=env, capture_output=True,
                              text=True, timeout=150)  # returns once A has ended
        assert live.returncode == 0 and "succeeded" in live.stdout, live.stdout[-2000:] + live.stderr
        runs = {}
        def both_ended() -> bool:
            runs.update({r["job_id"]: r for r in cli_json("runs")["runs"]})
            return runs[a]["state"] == runs[b]["state"] == "succeeded"
        wait_for(both_ended, 120, lambda: json.dumps(runs), interval=1.0)  # B's end: from ls --watch alone
    finally:
        lsw.send_signal(signal.SIGINT)
        _, err = lsw.communicate(timeout=30)
    assert "Traceback" not in err, err
    assert runs[a]["params"] == {"tag": "a", "width": 4, "lr": 0.05}, runs[a]  # status -w's look brought hparams
    assert runs[a]["final"]["train_loss"] >= 0 and runs[b]["final"], runs
    cmp = cli_json("compare", a, b)  # B's curve and hparams: compare asks its status once
    assert cmp["params"] == {"tag": ["a", "b"], "width": [4, 8]} and cmp["same_params"] == {"lr": 0.05}, cmp
    assert all(len(pts) >= 2 for pts in cmp["series"]["train_loss"]), cmp["series"]


def test_a_look_that_learns_nothing_new_writes_nothing(tmp_path: Path) -> None:
    """A live view looks every few seconds: the ledger is written when the state or metrics changed."""
    from gpujob.config.ledger import open_ledger
    from gpujob.usecases.experiments import record

    def row() -> dict:
        with open_ledger() as lg:
            return lg.get("look-1") or {}

    job = {"job_id": "look-1", "name": "look", "state": "running", "last_metrics": {"step": 1, "loss": 2.0, "t": 1.0},
           "billing": {"elapsed_s": 5.0, "cost": 0.01, "currency": "CNY"}}
    record.observe([job], "local")
    first = row()["updated_at"]
    record.observe([dict(job, last_metrics={"step": 1, "loss": 2.0, "t": 2.0},
                         billing={"elapsed_s": 7.0, "cost": 0.014, "currency": "CNY"})], "local")
    assert row()["updated_at"] == first  # same metrics, a few seconds' more cost: not written
    record.observe([dict(job, last_metrics={"step": 2, "loss": 1.5})], "local")
    assert row()["final"] == {"step": 2, "loss": 1.5} and row()["updated_at"] > first
    record.observe([dict(job, state="succeeded", last_metrics={"step": 2, "loss": 1.5},
                         billing={"elapsed_s": 9.0, "cost": 0.018, "currency": "CNY"})], "local")
    assert row()["state"] == "succeeded" and row()["cost"] == 0.018


def test_best_goes_each_metrics_way_and_is_never_worse_than_the_last_value(tmp_path: Path) -> None:
    """A loss's best is its lowest, an accuracy's and a throughput's their highest, a name the job
    file lists under ``metrics.maximize`` its highest; ``runs`` says which way each went, and
    ``compare`` shows cost in its currency."""
    from gpujob.config.ledger import open_ledger
    from gpujob.config.spec import load_spec
    from gpujob.errors import SpecError
    from gpujob.usecases.experiments import record

    job = write_job(tmp_path, "ways", "print('hi')", "python main.py", metrics={"maximize": ["bleurt_gain"]})
    record.record_submit({"job_id": "ways-1", "host": "local", "state": "queued"}, load_spec(job), None, str(job), [])
    series = {"loss": [[1, 3.0, 1.0], [2, 1.0, 2.0], [3, 2.0, 3.0]], "eval_loss": [[1, float("nan"), 1.0], [2, 4.0, 2.0]],
              "train_samples_per_second": [[1, 10.0, 1.0], [2, 30.0, 2.0], [3, 20.0, 3.0]],
              "eval_accuracy": [[1, 0.5, 1.0], [2, 0.9, 2.0], [3, 0.7, 3.0]], "bleurt_gain": [[1, 1.0, 1.0], [2, 5.0, 2.0]]}
    record.observe([{"job_id": "ways-1", "state": "running", "series": series, "latest_metrics": {"step": 3, "loss": 2.0}}],
                   "local")
    (row,) = cli_json("runs")["runs"]
    assert row["best"] == {"loss": 1.0, "eval_loss": 4.0, "train_samples_per_second": 30.0, "eval_accuracy": 0.9,
                           "bleurt_gain": 5.0}, row
    assert row["directions"] == {"loss": "minimize", "eval_loss": "minimize", "train_samples_per_second": "maximize",
                                 "eval_accuracy": "maximize", "bleurt_gain": "maximize"}, row
    assert [r["job_id"] for r in cli_json("runs", "--sort", "bleurt_gain")["runs"]] == ["ways-1"]
    # a light look (ls) past the last curve: the best follows the last value it cannot be worse than
    record.observe([{"job_id": "ways-1", "state": "running", "last_metrics": {"step": 4, "loss": 0.5}}], "local")
    (row,) = cli_json("runs")["runs"]
    assert row["final"] == {"step": 4, "loss": 0.5} and row["best"]["loss"] == 0.5, row

    with open_ledger() as lg:  # two priced runs side by side
        for i in (2, 3):
            lg.put(f"ways-{i}", name="ways", host="box", state="succeeded", submitted_at=1000.0 + i, cost=0.5 * i,
                   currency="CNY", series={"loss": [[1, 1.0 / i, 1.0]]}, best={"loss": 1.0 / i}, loss_key="loss")
    cmp = run_cli("compare", "ways-2", "ways-3")
    assert cmp.returncode == 0 and re.search(r"cost\s+1\.00 CNY\s+1\.50 CNY", cmp.stdout), cmp.stdout + cmp.stderr
    assert re.search(r"loss \(min\)", cmp.stdout), cmp.stdout
    assert cli_json("compare", "ways-2", "ways-3")["currency"] == ["CNY", "CNY"]

    both = write_job(tmp_path, "both", "print('hi')", "python main.py", metrics={"maximize": ["f"], "minimize": ["f"]})
    with pytest.raises(SpecError, match="'f' is under maximize too"):
        load_spec(both)


def test_a_status_that_learns_nothing_new_changes_no_file(tmp_path: Path) -> None:
    """Every ``status`` is a process of its own: a second look at an ended job finds its look in the
    ledger and changes nothing on disk (no row written, no -wal/-shm file made and removed, no chmod
    of the ledger or the state folder), and still answers with the job."""
    from gpujob.config.ledger import ledger_path, open_ledger

    jid = submit("local", write_job(tmp_path, "quiet", "print('step 1 loss 0.5')", "python main.py"))["job_id"]
    wait_state("local", jid, ("succeeded",))
    assert cli_json("status", jid)["state"] == "succeeded"  # a look after the end: its row is written
    ledger = ledger_path()

    def stamps() -> dict[str, tuple[int, ...]]:
        out = {}
        for p in (ledger, ledger.parent):
            st = p.stat()
            out[p.name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
        return out

    before, names = stamps(), sorted(p.name for p in ledger.parent.iterdir())
    for _ in range(2):
        assert cli_json("status", jid)["state"] == "succeeded"
    assert stamps() == before and sorted(p.name for p in ledger.parent.iterdir()) == names
    with open_ledger() as lg:  # the row is there (read after the stamps were compared)
        assert lg.get(jid)["state"] == "succeeded"


def test_runs_draws_plain_columns_without_rich_or_a_client(tmp_path: Path) -> None:
    """``runs`` reads the ledger alone: no API client, no transport, no rich (half its start-up);
    its table still cleans what a host or a run line put in it."""
    from gpujob.config.ledger import open_ledger
    from tests.gpujob.cli.test_cli_startup import imported

    with open_ledger() as lg:
        for i, lr in enumerate((0.1, 0.3)):
            lg.put(f"plain-{i}", name="plain", host="local", state="succeeded", submitted_at=1000.0 + i,
                   params={"lr": lr, "tag": "\x1b]52;c;aGk=\x07x"}, final={"loss": 1.0 - lr}, loss_key="loss")
    out = run_cli("runs", "--limit", "1", env_extra={"COLUMNS": "100"})
    assert out.returncode == 0, out.stderr
    head, row, more = out.stdout.splitlines()
    assert head.split() == ["RUN", "HOST", "STATE", "STARTED", "lr", "tag", "BEST", "LOSS", "LAST", "LOSS", "COST"]
    assert row.split()[:3] == ["plain-1", "local", "succeeded"] and "0.7" in row and "\x1b" not in out.stdout
    assert more == "1 of 2 runs (--limit 0: all)"
    narrow = run_cli("runs", "--limit", "1", env_extra={"COLUMNS": "56"}).stdout.splitlines()
    # whole columns give way (the date first), named below; the state and the numbers are never cut
    assert narrow[0].split() == ["RUN", "HOST", "STATE", "lr", "tag", "BEST", "LOSS", "COST"], narrow
    assert narrow[1].split()[:3] == ["plain-1", "local", "succeeded"] and "0.7" in narrow[1], narrow
    assert narrow[2].startswith("not shown at 56 columns: STARTED, LAST LOSS"), narrow
    mods = imported("runs", full=True)
    assert not {"rich", "gpujob.api.client", "gpujob.transport", "optuna"} & mods


@pytest.mark.parametrize("damage", ["not-a-database", "malformed-page"])
def test_a_damaged_ledger_is_named_kept_aside_and_replaced(tmp_path: Path, damage: str) -> None:
    """``runs``, ``compare`` and ``rerun`` over a damaged ``ledger.sqlite`` name the file, keep it aside
    (``ledger.sqlite.damaged-<time>``, byte for byte) and say how to go on, exit 2, never 70; the next
    command starts a new ledger; a submit goes on with a warning naming the file."""
    from gpujob.config.ledger import ledger_path, open_ledger

    with open_ledger() as lg:
        for i in range(400):  # enough pages that a damaged one in the middle is read by a query, not at open
            lg.put(f"dmg-{i}", name="dmg", host="local", state="succeeded", submitted_at=1000.0 + i,
                   params={"lr": i, "pad": "x" * 300}, final={"loss": 1.0})
        lg.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = ledger_path()
    raw = bytearray(path.read_bytes())
    if damage == "not-a-database":
        raw[:100] = b"\x00garbage" * 12 + b"\x00" * 4
    else:
        page = int.from_bytes(raw[16:18], "big")
        for n in range(2, len(raw) // page):  # every page after the schema's: b-tree headers of nonsense
            raw[n * page:n * page + 16] = b"\xff" * 16
    path.write_bytes(bytes(raw))
    for k in ("-wal", "-shm"):
        path.with_name(path.name + k).unlink(missing_ok=True)
    for args in (("runs", "--name", "dmg"), ("compare", "dmg-1", "dmg-2"), ("rerun", "dmg-3")):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert "internal error" not in r.stderr and "bug" not in r.stderr and "Traceback" not in r.stderr
        assert str(path) in r.stderr and "damaged" in r.stderr, r.stderr
        assert "run the command again" in r.stderr, r.stderr
        aside = sorted(path.parent.glob("ledger.sqlite.damaged-*"))
        aside = [p for p in aside if not p.name.endswith(("-wal", "-shm"))]
        assert aside and aside[-1].read_bytes() == bytes(raw), aside  # nothing of it lost
        assert str(aside[-1]) in r.stderr or "another gpujob command" in r.stderr
        for p in aside:
            p.rename(tmp_path / p.name)
        raw_again = run_cli("runs", "--name", "dmg")  # the next command has a new, empty ledger
        assert raw_again.returncode == 0, raw_again.stderr
        path.write_bytes(bytes(raw))  # damaged again for the next command
    # a submit records nothing but goes on, saying which file and what to do
    job = write_job(tmp_path, "dmgsub", LOOP, "python main.py --steps 2", env=QUIET)
    r = run_cli("submit", str(job), "--host", "local", "--json")
    assert r.returncode == 0, r.stderr
    assert str(path) in r.stderr and "damaged" in r.stderr and "Traceback" not in r.stderr
    wait_state("local", json.loads(r.stdout)["job_id"], ("succeeded",))
