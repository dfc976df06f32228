"""The Trainer stop hook (templates/runtime/autohook): inert for other scripts, chains an
existing sitecustomize, off with `runtime: {auto: false}`, and Lightning DDP ranks agree on a
stop. The stop choice for scripts that ignore the stop file (remote/core/procs.py) on real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.byo_helpers import BYO, QUIET, job_dir, log_text
from tests.conftest import REPO, run_cli
from tests.helpers import needs, submit, wait_for, wait_state, write_job

AUTOHOOK = REPO / "templates" / "runtime" / "autohook"
RUNTIME = REPO / "templates" / "runtime"

PROBE = """
    import json, os, sys
    import email.mime.text  # any ordinary import goes through the finder
    print("PROBE " + json.dumps({
        "finder": any(getattr(f, "gpujob", False) for f in sys.meta_path),
        "loaded": sorted(m for m in ("torch", "transformers", "lightning", "gpujob_runtime", "gpujob_checkpoints")
                         if m in sys.modules),
        "modules": sorted(sys.modules),
        "user_site": getattr(__import__("builtins"), "USER_SITE_RAN", False),
        "path": os.environ.get("PYTHONPATH", ""),
    }), flush=True)
"""


def probe(out: str) -> dict:
    line = [x for x in out.splitlines() if x.startswith("PROBE ")][-1]
    return json.loads(line[len("PROBE "):])


def run_probe(tmp_path: Path, *path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(PROBE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)


def user_sitecustomize(folder: Path, body: str = "import builtins; builtins.USER_SITE_RAN = True\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(body)
    return folder


def test_hook_is_inert_for_other_scripts(tmp_path: Path) -> None:
    r = run_probe(tmp_path, AUTOHOOK, RUNTIME)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    p = probe(r.stdout)
    assert p["finder"] is True and p["loaded"] == []
    # the hook adds its sitecustomize and the import machinery that looks for the next one:
    # not even its own patching code is imported
    without = probe(run_probe(tmp_path, RUNTIME).stdout)
    added = set(p["modules"]) - set(without["modules"])
    # (which standard modules those are depends on what ``site`` loaded before: a bare venv loads less)
    assert "sitecustomize" in p["modules"] and not any(m.startswith("gpujob") for m in added), added
    assert all(m == "sitecustomize" or m.split(".")[0] in sys.stdlib_module_names for m in added), added


def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    r = run_probe(tmp_path, AUTOHOOK, RUNTIME, user_sitecustomize(tmp_path / "user"))
    assert r.returncode == 0, r.stderr
    p = probe(r.stdout)
    assert p["user_site"] is True and p["finder"] is True
    # a failing one is reported as site.py would, and the script still runs with the hook
    user_sitecustomize(tmp_path / "bad", "raise RuntimeError('broken site')\n")
    r = run_probe(tmp_path, AUTOHOOK, tmp_path / "bad")
    assert r.returncode == 0 and "Error in sitecustomize" in r.stderr and "broken site" in r.stderr
    assert probe(r.stdout)["finder"] is True


def test_job_gets_the_hook_and_keeps_its_own_path_and_sitecustomize(tmp_path: Path) -> None:
    """Through the agent: the hook first on PYTHONPATH, the job's own PYTHONPATH (with its
    sitecustomize) after it; `runtime: {auto: false}` leaves the hook out."""
    job = write_job(tmp_path, "hookon", PROBE, "python main.py", env={"PYTHONPATH": "libs"})
    user_sitecustomize(job.parent / "libs")
    on = wait_state("local", submit("local", job)["job_id"], ("succeeded", "failed"))
    jd = job_dir(tmp_path, "local", on["job_id"])
    p = probe(log_text(jd))
    assert on["state"] == "succeeded" and p["finder"] and p["user_site"] and p["loaded"] == []
    assert p["path"].split(os.pathsep)[-1] == "libs" and "autohook" in p["path"].split(os.pathsep)[0]

    off = wait_state("local", submit("local", job, "--set", "runtime={auto: false}", "--set", "name=hookoff")["job_id"],
                     ("succeeded", "failed"))
    p = probe(log_text(job_dir(tmp_path, "local", off["job_id"])))
    assert off["state"] == "succeeded" and not p["finder"] and p["user_site"]
    assert "autohook" not in p["path"]


def test_runtime_auto_must_be_a_boolean(tmp_path: Path) -> None:
    job = write_job(tmp_path, "badrt", "print(1)", "python main.py", runtime={"auto": "no"})
    r = run_cli("submit", str(job), "--host", "local")
    assert r.returncode != 0 and "runtime.auto" in r.stderr and "true or false" in r.stderr
    assert "Traceback" not in r.stderr


def hook_job(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A job folder and the environment the agent gives a script: the hook and the runtime on its path."""
    job = tmp_path / "job"
    (job / "ckpt").mkdir(parents=True)
    rt = tmp_path / "rt"
    rt.mkdir()
    (rt / "gpujob_runtime.py").write_bytes((RUNTIME / "gpujob_runtime.py").read_bytes())
    shutil.copytree(REPO / "remote" / "ckpt" / "checkpoints", rt / "gpujob_checkpoints",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return job, dict(os.environ, **QUIET, PYTHONPATH=f"{AUTOHOOK}{os.pathsep}{rt}", GPUJOB_JOB_DIR=str(job),
                     GPUJOB_CKPT_DIR=str(job / "ckpt"), GPUJOB_STOP_FILE=str(job / "STOP"),
                     GPUJOB_METRICS_FILE=str(job / "metrics.jsonl"))


def test_lightning_ddp_ranks_agree_on_the_stop(tmp_path: Path) -> None:
    """Two CPU processes (gloo): the stop file is seen by every rank at the same batch end;
    both save one checkpoint together and leave fit() with exit 0."""
    needs("torch", "lightning")
    job, env = hook_job(tmp_path)
    log = open(tmp_path / "out.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(BYO / "lightning" / "train.py"), "--ckpt_dir", str(job / "ckpt"),
                             "--log_dir", str(tmp_path / "tb"), "--devices", "2", "--max_steps", "400",
                             "--every_n_steps", "1000", "--step_seconds", "0.1"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_for(lambda: (job / "STOP.watch").exists() or proc.poll() is not None, 180)
        (job / "STOP").write_text("stop\n")
        assert proc.wait(timeout=120) == 0, (tmp_path / "out.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    out = (tmp_path / "out.log").read_text()
    steps = [int(x) for x in __import__("re").findall(r"finished at step (\d+)", out)]
    assert len(steps) == 2 and steps[0] == steps[1] and 0 < steps[0] < 400  # both ranks, the same step
    assert sorted(p.name for p in (job / "ckpt").iterdir()) == [f"epoch=0-step={steps[0]}.ckpt", "last.ckpt"]


@pytest.fixture
def tree(tmp_path: Path):  # noqa: ANN201
    """A job-like tree of real processes: a shell running Python that forks a worker, a SIGTERM
    handler, a process ignoring SIGINT, and a torchrun-named parent with a child."""
    jd = f"/gj-test-{os.getpid()}-{time.time_ns()}"
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import os, signal, sys, time
        kind = sys.argv[1]
        if kind == "term":
            signal.signal(signal.SIGTERM, lambda *a: None)
        if kind == "noint":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if kind == "fork":
            os.fork()  # a DataLoader-like worker: the same command line as its parent
        open("ready-%s-%d" % (kind, os.getpid()), "w").close()  # handlers in place
        time.sleep(300)
    """))
    (tmp_path / "torchrun").write_text("import subprocess, sys, time\n"
                                       "subprocess.Popen([sys.executable, sys.argv[1], 'plain'])\ntime.sleep(300)\n")
    env = dict(os.environ, GPUJOB_JOB_DIR=jd, GPUJOB_JOB_ID="tree")
    procs = [subprocess.Popen(["bash", "-c", f"{sys.executable} main.py {k}; true"], cwd=tmp_path, env=env,
                              start_new_session=True) for k in ("fork", "term", "noint")]
    procs.append(subprocess.Popen([sys.executable, str(tmp_path / "torchrun"), "main.py"], cwd=tmp_path, env=env,
                                  start_new_session=True))
    yield jd
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
    from remote.core import procs as rp

    rp.signal_pids(rp.job_pids("tree", None, jd), signal.SIGKILL)


def test_stop_targets_choose_a_signal_per_process(tree: str, tmp_path: Path) -> None:
    from remote.core import procs as rp

    def cmd(pid: int) -> list[str]:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")

    # every process up, with its handlers installed: two forked, term, noint, torchrun's child
    assert wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 5, 60)
    pids = rp.job_pids("tree", None, tree)
    targets = rp.stop_targets(pids)
    by_kind: dict[str, list[int]] = {}
    for p in targets:
        c = cmd(p)
        by_kind.setdefault("torchrun" if c[1].endswith("torchrun") else c[-2], []).append(targets[p])
    names = {k: sorted(signal.Signals(s).name for s in v) for k, v in by_kind.items()}
    # the forked worker, the shells and torchrun's child are left to their parents
    assert names == {"fork": ["SIGINT"], "term": ["SIGTERM"], "noint": ["SIGTERM"], "torchrun": ["SIGINT"]}


MIN_STEPS_SCRIPT = """
import time
import torch
import lightning as L


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        time.sleep(0.05)
        return self.w(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = torch.utils.data.DataLoader(torch.randn(64, 4), batch_size=8)
trainer = L.Trainer(max_steps=2000, min_steps=2000, min_epochs=200, logger=False, enable_progress_bar=False,
                    enable_checkpointing=False, accelerator="cpu")
trainer.fit(Tiny(), data)
print("finished at step", trainer.global_step, flush=True)
"""


def test_lightning_stops_even_before_its_min_steps(tmp_path: Path) -> None:
    """A stop request ends fit() at the next step with a checkpoint, though min_steps/min_epochs
    are not met (Lightning alone would train on until they are)."""
    needs("torch", "lightning")
    job, env = hook_job(tmp_path)
    (tmp_path / "train.py").write_text(MIN_STEPS_SCRIPT)
    log = open(tmp_path / "out.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "train.py"], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_for(lambda: (job / "STOP.watch").exists() or proc.poll() is not None, 180, "the hook watching STOP")
        (job / "STOP").write_text("stop\n")
        assert proc.wait(timeout=60) == 0, (tmp_path / "out.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    out = (tmp_path / "out.log").read_text()
    step = int(__import__("re").search(r"finished at step (\d+)", out).group(1))
    assert 0 < step < 2000, out[-2000:]
    assert [p.name for p in (job / "ckpt").iterdir()] == [f"epoch={(step - 1) // 8}-step={step}.ckpt"]
