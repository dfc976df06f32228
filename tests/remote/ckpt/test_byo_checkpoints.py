"""Scripts users bring, through the agent: a plain torch.save loop SIGKILLed mid-run restarts from
its newest complete file and ends with the parameters of an uninterrupted run; Lightning and HF
Trainer jobs write where they always write (a folder relative to the code), and `pull --latest` /
`--best` bring files that the libraries load. None of the scripts imports gpujob."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import needs, remote_root, submit, wait_for, wait_state, write_job
from tests.remote.ckpt.test_checkpoints import LIGHTNING_MODEL
from tests.remote.run.test_agent import training_pid

PLAIN = """
    import argparse, os, time
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--resume", default="")
    p.add_argument("--out", default="ckpts")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--slow", type=float, default=0.0)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if a.resume:
        st = torch.load(a.resume)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
        print("resumed at step", start, flush=True)
    os.makedirs(a.out, exist_ok=True)
    for step in range(start + 1, a.steps + 1):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 8, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, "loss %.4f" % loss.item(), flush=True)
        if step % 4 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                       os.path.join(a.out, "checkpoint_%d.pt" % step))
        time.sleep(a.slow)
    torch.save({"model": model.state_dict(), "step": a.steps}, os.path.join(a.out, "final.pt"))
    print("done", flush=True)
"""


def params_equal(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sigkilled_plain_loop_resumes_from_newest_complete_file(any_host: str, tmp_path: Path) -> None:
    needs("torch")
    import torch

    job = write_job(tmp_path, "plain", PLAIN, 'python main.py --slow 0.1 --resume "$GPUJOB_RESUME"',
                    checkpoint={"dir": "ckpts", "keep": 2}, retry={"max_restarts": 1, "backoff": "0s"})
    ref = tmp_path / "ref"                       # the same script, uninterrupted, without gpujob
    ref.mkdir()
    r = subprocess.run([sys.executable, str(job.parent / "main.py")], cwd=ref, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    job_id = submit(any_host, job)["job_id"]
    jd = remote_root(tmp_path, any_host) / "jobs" / job_id
    try:
        wait_for(lambda: "step 10 " in (jd / "output.log").read_text() if (jd / "output.log").exists() else False,
                 90, "step 10")
        os.kill(training_pid(job_id), signal.SIGKILL)  # not gpujob's doing: the host, a watchdog
        st = wait_state(any_host, job_id, ("succeeded", "failed"), 120)
    finally:
        run_cli("stop", job_id, "--host", any_host)
    assert st["state"] == "succeeded", st
    # a recovered job carries nothing of the killed attempt's end; the attempts keep it
    assert st["exit_code"] == 0 and not st.get("reason") and not st.get("diagnosis") and not st.get("lost_reason")
    a1, a2 = st["attempts"]
    assert a1["reason"] == "signal" and "SIGKILL" in a1["summary"] and "from outside gpujob" in a1["summary"]
    log = (jd / "output.log").read_text()
    assert f"attempt 1 failed: {a1['summary']}; restarting" in log   # the log says what status says
    first = log.split("attempt 2 started")[0]
    reached = max(int(line.split()[1]) for line in first.splitlines() if line.startswith("step "))
    resumed = int(Path(a2["resume"]).name.split("_")[1].split(".")[0])
    assert Path(a2["resume"]).parent == jd / "ckpt" and resumed in (reached // 4 * 4, reached // 4 * 4 - 4), (reached, a2)
    assert f"resumed at step {resumed}" in log
    # the run ends with the parameters of the uninterrupted one
    final = torch.load(jd / "ckpt" / "final.pt")
    assert params_equal(final["model"], torch.load(ref / "ckpts" / "final.pt")["model"])
    # the folder the script writes in its code is the job's ckpt; keep 2 of the series, and the one resumed
    assert (jd / "ckpt").is_symlink() and (jd / "code" / "ckpts").resolve() == (jd / "ckpt").resolve()
    assert sorted(p.name for p in (jd / "ckpt").iterdir()) == sorted(
        {f"checkpoint_{resumed}.pt", "checkpoint_20.pt", "checkpoint_24.pt", "final.pt"})
    assert [(c["kind"], c["complete"]) for c in st["checkpoints"]][-1] == ("file", True)
    human = run_cli("status", job_id, "--host", any_host)
    assert "final.pt (file)" in human.stdout and "cause" not in human.stdout, human.stdout
    pulled = json.loads(run_cli("pull", job_id, str(tmp_path / "p"), "--latest", "--host", any_host, "--json").stdout)
    assert pulled["selected"] == "ckpt/final.pt"
    assert params_equal(torch.load(Path(pulled["dest"]) / "ckpt" / "final.pt")["model"], final["model"])


LIGHTNING = """
    import sys, torch
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset
    from model import M
    torch.manual_seed(0)
    X = torch.randn(32, 4)
    dl = DataLoader(TensorDataset(X, X.sum(1, keepdim=True)), batch_size=4)
    cb = ModelCheckpoint(dirpath="lightning_ckpts", filename="{epoch}-{step}-{val_loss:.4f}", monitor="val_loss",
                         save_top_k=-1, save_last=True)
    t = L.Trainer(max_epochs=4, limit_train_batches=4, limit_val_batches=2, logger=False, accelerator="cpu",
                  enable_progress_bar=False, enable_model_summary=False, callbacks=[cb], num_sanity_val_steps=0)
    t.fit(M(), dl, dl, ckpt_path=sys.argv[1] if len(sys.argv) > 1 else None)
"""


def test_lightning_job_checkpoints_rotate_and_pull(tmp_path: Path) -> None:
    needs("torch", "lightning")
    job = write_job(tmp_path, "light", LIGHTNING, "python main.py ${GPUJOB_RESUME:+$GPUJOB_RESUME}",
                    checkpoint={"dir": "lightning_ckpts", "keep": 2})
    (job.parent / "model.py").write_text(LIGHTNING_MODEL)
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("succeeded", "failed"), 180)
    assert st["state"] == "succeeded", st
    ck = st["checkpoints"]
    assert {c["kind"] for c in ck} == {"lightning"} and all(c["complete"] for c in ck)
    names = sorted(c["name"] for c in ck)
    # keep 2 of epoch=E-step=S-val_loss=V.ckpt (the last two are also the best), and last.ckpt
    assert names == sorted(["last.ckpt", *(c["name"] for c in ck if c["step"] in (12, 16))]), names
    dest = tmp_path / "pulls"
    latest = json.loads(run_cli("pull", job_id, str(dest / "l"), "--latest", "--json").stdout)
    best = json.loads(run_cli("pull", job_id, str(dest / "b"), "--best", "val_loss", "--json").stdout)
    assert latest["selected"] == "ckpt/last.ckpt" and "step=16" in best["selected"]
    sys.path.insert(0, str(job.parent))
    try:
        from model import M  # type: ignore[import-not-found]

        for doc in (latest, best):
            m = M.load_from_checkpoint(str(Path(doc["dest"]) / doc["selected"]))
            assert m.net.weight.shape == (1, 4)
    finally:
        sys.path.remove(str(job.parent))
        sys.modules.pop("model", None)


HF = """
    import sys, torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=16))
    rows = [{"input_ids": torch.randint(0, 32, (8,))} for _ in range(16)]
    for r in rows:
        r["labels"] = r["input_ids"]
    args = TrainingArguments(output_dir="outputs", max_steps=6, save_steps=2, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, logging_steps=1, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=rows).train(resume_from_checkpoint=sys.argv[1] if len(sys.argv) > 1 else None)
"""


def test_hf_trainer_job_pull_latest_loads(tmp_path: Path) -> None:
    needs("torch", "transformers")
    from transformers import AutoModelForCausalLM

    job = write_job(tmp_path, "hfjob", HF, "python main.py ${GPUJOB_RESUME:+$GPUJOB_RESUME}",
                    checkpoint={"dir": "outputs", "keep": 2}, env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    (job.parent / "outputs").mkdir()
    (job.parent / "outputs" / "notes.txt").write_text("synced with the code")  # moved into the job's ckpt
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("succeeded", "failed"), 180)
    assert st["state"] == "succeeded", st
    assert [(c["name"], c["kind"], c["complete"]) for c in st["checkpoints"]] == [
        ("checkpoint-4", "hf", True), ("checkpoint-6", "hf", True)]
    jd = tmp_path / "local-root" / "jobs" / job_id
    assert (jd / "ckpt").is_symlink() and (jd / "ckpt" / "notes.txt").read_text() == "synced with the code"
    doc = json.loads(run_cli("pull", job_id, str(tmp_path / "p"), "--latest", "--json").stdout)
    assert doc["selected"] == "ckpt/checkpoint-6"
    m = AutoModelForCausalLM.from_pretrained(str(Path(doc["dest"]) / doc["selected"]))
    assert m.config.n_embd == 16


@pytest.mark.parametrize("events, kmsg, cause", [
    ("oom 0\noom_kill 0\n", "", "signal"),
    ("oom 1\noom_kill 1\n", "", "oom"),       # the cgroup counted a kill during the attempt
    ("oom 0\noom_kill 0\n", "KERNEL", "oom"),  # the kernel log names a process of the job
])
def test_oom_named_only_on_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: str, kmsg: str,
                                    cause: str) -> None:
    import time

    from remote.host import oom
    from remote.run import diagnose

    ev, km = tmp_path / "memory.events", tmp_path / "kmsg"
    ev.write_text("oom 0\noom_kill 0\n")
    km.write_text(f"6,1,{int((time.monotonic() - 100) * 1e6)},-;unrelated\n")
    monkeypatch.setenv("GPUJOB_MEMORY_EVENTS", str(ev))
    monkeypatch.setenv("GPUJOB_KMSG", str(km))
    w = oom.Watch()
    w.pids.add(4242)
    ev.write_text(events)
    if kmsg:
        km.write_text(km.read_text() + f"3,2,{int(time.monotonic() * 1e6)},-;Out of memory: Killed process 4242 (python) total-vm:1kB\n")
    killed = w.killed()
    assert killed is (cause == "oom")
    log = tmp_path / "output.log"
    log.write_text("step 3\n")
    d = diagnose.diagnose(log, 137, oom_killed=killed)
    assert d["cause"] == cause
    assert ("out-of-memory killer" in d["summary"]) and (("left no trace" in d["summary"]) is (cause == "signal"))
    monkeypatch.setenv("GPUJOB_MEMORY_EVENTS", str(tmp_path / "none"))
    monkeypatch.setenv("GPUJOB_KMSG", str(tmp_path / "none"))
    assert oom.Watch().killed() is None                                   # nothing readable: no verdict
    assert diagnose.diagnose(log, 137, oom_killed=None)["cause"] == "signal"


def test_checkpoint_keys_in_the_job_file(tmp_path: Path) -> None:
    from gpujob.config.spec import load_spec
    from gpujob.errors import SpecError

    f = tmp_path / "job.yaml"
    f.write_text("run: python train.py\ncheckpoint: {dir: outputs/run1, pattern: '*.pt', keep: 2}\n")
    spec = load_spec(f)
    assert (spec.checkpoint_dir, spec.checkpoint_pattern, spec.checkpoint_keep) == ("outputs/run1", "*.pt", 2)
    assert spec.retry.on == ["error", "oom", "signal"]      # a kill gpujob did not send restarts by default
    assert spec.to_remote()["checkpoint_pattern"] == "*.pt" and spec.to_remote()["checkpoint_backup"] is True
    for bad, words in (("{dir: ../elsewhere}", "inside the code"), ("{pattern: /abs/*.pt}", "relative to the checkpoint"),
                       ("{dir: x, patern: '*.pt'}", "pattern"), ("{backup: 'no'}", "true or false")):
        f.write_text(f"run: python train.py\ncheckpoint: {bad}\n")
        with pytest.raises(SpecError) as e:
            load_spec(f)
        assert words in str(e.value) and "job.yaml:2" in str(e.value)


RMTREE = """
    import os, shutil, zipfile
    shutil.rmtree("out")  # a fresh output folder at start, as many scripts do
    os.makedirs("out")
    for step in (5, 10):
        with zipfile.ZipFile("out/tmp.zip", "w") as z:
            z.writestr("weights", "step %d" % step)
        os.rename("out/tmp.zip", "out/ckpt_%d.pt" % step)
    print("saved", flush=True)
"""


def test_a_script_may_rmtree_its_checkpoint_dir(tmp_path: Path) -> None:
    """Issue 24 item 10: ``checkpoint.dir`` is a real folder of the code (``<job>/ckpt`` links to
    it), so ``shutil.rmtree`` of it works as without gpujob and the checkpoints stay the job's."""
    job = write_job(tmp_path, "rmtree", RMTREE, "python main.py", checkpoint={"dir": "out", "pattern": "ckpt_*.pt"})
    job_id = submit("local", job)["job_id"]
    st = wait_state("local", job_id, ("succeeded", "failed"), 60)
    assert st["state"] == "succeeded", st
    assert [c["name"] for c in st["checkpoints"] if c["complete"]] == ["ckpt_5.pt", "ckpt_10.pt"]
    doc = json.loads(run_cli("pull", job_id, str(tmp_path / "p"), "--latest", "--json").stdout)
    assert doc["selected"] == "ckpt/ckpt_10.pt" and (Path(doc["dest"]) / "ckpt" / "ckpt_10.pt").is_file()
    everything = json.loads(run_cli("pull", job_id, str(tmp_path / "all"), "--json").stdout)
    assert (Path(everything["dest"]) / "ckpt" / "ckpt_5.pt").is_file()  # the folder, not a link to it
