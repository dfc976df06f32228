"""The agent's pure parts: diagnosis rules, gpu.jsonl downsampling, cost projection."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from remote.host import gpus
from remote.run import diagnose
from remote.view import cost

TB = '''Traceback (most recent call last):
  File "/job/code/train.py", line 40, in <module>
    main()
  File "/job/code/model.py", line 12, in forward
    x = self.net(x)
'''


def diag(tmp_path: Path, text: str, rc: int | None = 1, **kw: object) -> dict:
    log = tmp_path / "output.log"
    log.write_text(text)
    return diagnose.diagnose(log, rc, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, rc, cause, in_summary", [
    (TB + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", 1, "oom", "CUDA out of memory"),
    ("step 10 loss nan\nValueError: boom\n", 1, "nan", "NaN"),
    ("[rank1]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: WorkNCCL(...)\n", 1, "nccl", "NCCL"),
    ("torch.distributed.DistBackendError: NCCL error in: ../nccl.cpp, unhandled system error\n", 1, "nccl", "NCCL"),
    (TB + "ModuleNotFoundError: No module named 'flash_attn'\n", 1, "missing_module", "flash_attn"),
    (TB + "OSError: [Errno 28] No space left on device\n", 1, "disk_full", "disk is full"),
    # torch.save on a full disk (measured on a full tmpfs: neither ENOSPC nor "space" in its words)
    (TB + "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598\n", 1, "write_failed",
     "full disk"),
    (TB + "RuntimeError: [enforce fail at inline_container.cc:337] . PytorchStreamWriter failed writing file data/0: "
          "file write failed\n", 1, "write_failed", "could not write the checkpoint"),
    ("step 10\n", 137, "signal", "SIGKILL (exit 137) from outside gpujob"),  # OOM killer only on evidence
    ("step 10\n", -15, "signal", "killed by SIGTERM"),
    (TB + "KeyError: 'labels'\n", 1, "error", "KeyError: 'labels'"),
])
def test_rules(tmp_path: Path, text: str, rc: int, cause: str, in_summary: str) -> None:
    d = diag(tmp_path, text, rc)
    assert d["cause"] == cause, d
    assert in_summary in d["summary"], d
    assert d["remedy"]
    assert d["gpu"] is (cause == "oom" and rc == 1)


def test_last_frame_and_only_the_last_attempt(tmp_path: Path) -> None:
    text = ("==> gpujob: attempt 1 started [x]\n" + TB + "torch.OutOfMemoryError: CUDA out of memory.\n"
            "==> gpujob: attempt 1 ended with exit code 1 [x]\n==> gpujob: attempt 2 started [x]\n"
            + TB + "KeyError: 'labels'\n==> gpujob: attempt 2 ended with exit code 1 [x]\n")
    d = diag(tmp_path, text)
    assert d["cause"] == "error" and d["where"] == "/job/code/model.py:12 in forward"
    assert d["remedy"] == f"read the traceback: gpujob tail {tmp_path.name} -n 50"  # the job's folder is its id


def test_oom_killer_known_from_cgroup_counter(tmp_path: Path) -> None:
    d = diag(tmp_path, "x\n", 137, oom_killed=True)
    assert d["cause"] == "oom" and "the kernel's out-of-memory killer" in d["summary"]
    d = diag(tmp_path, "x\n", 137, oom_killed=False)
    assert d["cause"] == "signal" and "out-of-memory killer left no trace" in d["summary"]


def test_nan_from_metrics(tmp_path: Path) -> None:
    m = tmp_path / "metrics.jsonl"
    m.write_text(json.dumps({"step": 3, "loss": math.nan}) + "\n")
    assert diag(tmp_path, "torch.OutOfMemoryError: CUDA out of memory.\n", 1, metrics=m)["cause"] == "oom"  # log rules first
    d = diag(tmp_path, "Traceback...\nRuntimeError: x\n", 1, metrics=m)
    assert d["cause"] == "nan" and "loss=nan" in d["summary"]


def test_week_of_gpu_samples_stays_small() -> None:
    now = 1_000_000.0
    recs = [{"t": now - i * 5, "gpus": [{"index": g, "util": 90, "mem_used": 70000, "mem_total": 81920,
                                         "power": 300.5, "temp": 70} for g in range(1)]}
            for i in range(7 * 86400 // 5, -1, -1)]
    out = gpus.downsample(recs, now)
    assert 2800 < len(out) < 3100  # 720 full + 1380 minutes + ~865 ten-minute means
    assert [r["t"] for r in out] == sorted(r["t"] for r in out)
    assert out[0]["w"] == 600 and out[0]["gpus"][0] == {"index": 0, "util": 90.0, "mem_used": 70000.0,
                                                       "mem_total": 81920.0, "power": 300.5, "temp": 70.0}
    # compacting again does not grow it
    assert len(gpus.downsample(out, now)) <= len(out)


def test_cost_projection(tmp_path: Path) -> None:
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(json.dumps({"t": 1000 + s, "step": s, "max_steps": 100}) + "\n" for s in range(0, 21, 5)))
    st = {"state": "running", "started_at": 900, "attempts": [{"started_at": 990}]}
    est = cost.estimate(st, {"price_per_hour": 3.6}, m, now=1020)
    assert est["cost"] == pytest.approx(0.12) and est["elapsed_s"] == 120
    assert est["eta_s"] == pytest.approx(80) and est["projected_cost"] == pytest.approx(0.2)
    assert est["step"] == 20 and est["max_steps"] == 100
    # max_steps from the job's env when the metrics do not say
    m.write_text(json.dumps({"t": 1000, "step": 0}) + "\n" + json.dumps({"t": 1010, "step": 10}) + "\n")
    est = cost.estimate(st, {"price_per_hour": 3.6, "env": {"GPUJOB_MAX_STEPS": "30"}}, m, now=1020)
    assert est["eta_s"] == pytest.approx(20)


def test_compact_rewrites_gpu_jsonl_in_place(tmp_path: Path) -> None:
    f = tmp_path / "gpu.jsonl"
    now = 2_000_000.0
    f.write_text("".join(json.dumps({"t": now - i * 5, "gpus": [{"index": 0, "util": i % 100}]}) + "\n"
                         for i in range(2 * 3600 // 5, -1, -1)) + "not json\n")
    gpus.compact(f, now)
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    minutes = sum(1 for r in recs if r.get("w") == 60)
    assert minutes in (60, 61) and len(recs) == 720 + minutes  # the last hour as is, the hour before in 1-minute means


def test_gpus_verb_with_a_stand_in(tmp_path: Path) -> None:
    """``python -m remote gpus``: a fresh sample and the queue; on PATH, an nvidia-smi stand-in."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho '0, 12, 300, 81920, 61.5, 40'\necho '1, 99, 70000, 81920, [N/A], 80'\n")
    (bindir / "nvidia-smi").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "remote", "--root", str(tmp_path / "root"), "gpus"], env=env,
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    assert doc["gpus"][0] == {"index": 0, "util": 12, "mem_used": 300, "mem_total": 81920, "power": 61.5, "temp": 40}
    assert doc["gpus"][1]["power"] is None and doc["queue"] == [] and doc["held"] == {}
    env["PATH"] = "/usr/bin:/bin"
    out = subprocess.run([sys.executable, "-m", "remote", "--root", str(tmp_path / "root"), "gpus"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["gpus"] is None  # a CPU host


def test_a_restarted_job_shows_only_the_current_attempts_metrics(tmp_path: Path) -> None:
    from remote.core.jobrecord import JobRecord
    from remote.core.layout import Root
    from remote.view import status as jobs
    from remote.view import watch as observe

    root = Root(str(tmp_path / "root"))
    job = root.job("j-1")
    job.path.mkdir(parents=True)
    job.write_record(JobRecord({"job_id": "j-1", "state": "running", "attempt": 2, "heartbeat": 1e12,
                                "attempts": [{"n": 1, "started_at": 100.0}, {"n": 2, "started_at": 200.0}]}))
    job.metrics.write_text(json.dumps({"t": 150, "step": 50, "loss": 9.0, "eval_loss": 8.0}) + "\n")
    assert jobs.describe(root, "j-1")["last_metrics"] is None          # the killed attempt's: not shown
    assert observe.watch(root, "j-1")["latest"] == {}
    with open(job.metrics, "a") as f:
        f.write(json.dumps({"t": 210, "step": 41, "loss": 1.0}) + "\n")
    assert jobs.describe(root, "j-1")["last_metrics"]["step"] == 41
    w = observe.watch(root, "j-1")
    assert w["latest"]["loss"] == 1.0 and "eval_loss" not in w["latest"]
    assert [p[0] for p in w["series"]["loss"]] == [50, 41]               # the history keeps both attempts


def test_a_restart_shows_the_log_until_the_events_have_the_new_attempt_and_keeps_the_total(tmp_path: Path) -> None:
    """The new attempt's event file has no record yet: its steps come from the log (as a first
    attempt's do); the total the log stated (``step N/200``) stays known once the events are the
    source again, and the rate is the new attempt's alone (a restart's gap is no step)."""
    from remote.core.jobrecord import JobRecord
    from remote.core.layout import Root
    from remote.view import status as jobs
    from remote.view import watch as observe

    root = Root(str(tmp_path / "root"))
    job = root.job("j-1")
    job.path.mkdir(parents=True)
    job.write_record(JobRecord({"job_id": "j-1", "state": "running", "attempt": 2, "heartbeat": 1e12, "started_at": 100.0,
                                "attempts": [{"n": 1, "started_at": 100.0}, {"n": 2, "started_at": 200.0}]}))
    tb, log = job.path / "metrics.tb.jsonl", job.path / "metrics.log.jsonl"

    def add(path: Path, t: float, step: int, **extra: object) -> None:
        with open(path, "a") as f:
            f.write(json.dumps({"t": t, "step": step, "loss": 1 / step, **extra}) + "\n")

    for step in range(1, 42, 10):  # attempt 1: steps 1..41 by t=150
        add(tb, 109 + step, step)
        add(log, 109 + step, step, max_steps=200)
    (job.path / "metrics.state.json").write_text(json.dumps({"total": 200}))  # what the Collector kept
    add(log, 205, 42, max_steps=200)
    add(log, 210, 52, max_steps=200)
    def shown() -> tuple[str, int, dict, str, int, float, dict]:
        """status's (source, step, billing) and watch's (source, step, rate, progress), their shapes checked."""
        st, w = jobs.describe(root, "j-1"), observe.watch(root, "j-1")
        last, bill, latest, prog = st["last_metrics"], st["billing"], w["latest"], w["progress"]
        assert isinstance(last, dict) and isinstance(bill, dict) and isinstance(latest, dict) and isinstance(prog, dict)
        assert isinstance(w["rate"], float), w
        return str(st["metrics_source"]), last["step"], bill, str(w["source"]), latest["step"], w["rate"], prog

    source, step, bill, wsource, wstep, rate, prog = shown()
    assert (source, step, wsource, wstep) == ("log", 52, "log", 52)
    assert bill["max_steps"] == 200 and bill["steps_per_s"] == 2.0 and bill["eta_s"] == 74.0, bill
    assert rate == 2.0 and prog["total"] == 200

    add(tb, 206, 42)  # the new event file's records: no total in them
    add(tb, 211, 52)
    source, step, bill, wsource, wstep, rate, prog = shown()
    assert (source, step, wsource, wstep) == ("tensorboard", 52, "tensorboard", 52)
    assert bill["max_steps"] == 200 and bill["eta_s"] == 74.0, bill
    assert rate == 2.0 and prog["total"] == 200  # this attempt's rate, not (52-1)/(211-110)


def test_an_index_url_is_shown_without_its_credentials() -> None:
    from remote.view.tensorboard import _without_credentials

    assert _without_credentials("https://user:tok3n@mirror.example/simple") == "https://***@mirror.example/simple"
    assert _without_credentials("https://mirror.example/simple") == "https://mirror.example/simple"
    assert _without_credentials(None) is None


def test_tensorboard_serves_every_folder_holding_the_jobs_events(tmp_path: Path) -> None:
    """The job's tb folder and the writers' default folders always (runs written later show up); a run
    found elsewhere through its parent (``code/results/runs``), never the job or code folder whole, unless
    events lie right in it; events synced from the laptop before the submit are not the job's."""
    import time

    from remote.core.layout import Root
    from remote.view import tblogdir

    root = Root(str(tmp_path / "root"))
    job = root.job("hf-12071200-abcde")
    job.path.mkdir(parents=True)
    (job.path / "spec.json").write_text('{"name": "hf"}')
    now = time.time()
    (job.path / "status.json").write_text(json.dumps({"state": "running", "job_id": job.id, "submitted_at": now}))

    def events(rel: str, t: float = now) -> None:
        (job.path / rel).mkdir(parents=True, exist_ok=True)
        f = job.path / rel / f"events.out.tfevents.{int(t)}.box.1.0"
        f.write_bytes(b"")
        os.utime(f, (t, t))  # a sync keeps the laptop's times

    args, names, note = tblogdir.arguments(job)
    assert names == ["tb", "ckpt/runs", "code/runs", "code/lightning_logs"] and args[0] == "--logdir_spec"
    assert note is not None and "looked in tb, code (4 levels), ckpt/runs" in note
    events("code/old_runs/x", now - 86400)  # the laptop's, synced with the code
    events("ckpt/runs/Dec07_box")
    events("code/lightning_logs/version_0")
    events("code/results/runs/Dec07_box")
    args, names, note = tblogdir.arguments(job)
    assert names == ["tb", "ckpt/runs", "code/runs", "code/lightning_logs", "code/results/runs"] and note is None
    assert args == ["--logdir_spec", ",".join(f"{n}:{job.path / n}" for n in names)]
    events("code")  # right in the code folder: served whole, and the folders inside it through it
    assert tblogdir.arguments(job)[1] == ["tb", "ckpt/runs", "code"]


def test_an_empty_job_reference_matches_no_job(tmp_path: Path) -> None:
    """The agent's own check (the laptop refuses "" too): ``rm ""`` must not pick the only job."""
    from remote.core.errors import AgentError
    from remote.core.layout import Root
    from remote.jobs import store as jobs

    root = Root(str(tmp_path / "root"))
    jd = root.jobs / "solo-11301200-abcde"
    jd.mkdir(parents=True)
    (jd / "spec.json").write_text('{"name": "solo"}')
    (jd / "status.json").write_text('{"state": "succeeded", "job_id": "solo-11301200-abcde", "name": "solo"}')
    assert jobs.resolve(root, "solo") == "solo-11301200-abcde"
    for ref in ("", " "):
        with pytest.raises(AgentError, match="no job given"):
            jobs.resolve(root, ref)


def test_every_verb_has_its_handler_in_the_table() -> None:
    """remote/__main__.py's table names a handler in remote/verbs/ for every verb its parser takes."""
    from remote.__main__ import VERBS, build_parser, handler

    sub = next(a for a in build_parser()._actions if a.choices and "serve" in a.choices)
    assert set(sub.choices) == set(VERBS)
    for verb in VERBS:
        assert callable(handler(verb)), verb


def test_the_active_source_skips_a_metrics_file_made_but_not_yet_written(tmp_path: Path) -> None:
    """A job's first metrics file exists empty before its first record (the collector made it): status of a
    restarted attempt takes the next source with records, or none, and never fails on the empty one."""
    from remote.core.layout import Root
    from remote.metrics import metricsrc

    job = Root(str(tmp_path / "root")).job("j-1")
    job.path.mkdir(parents=True)
    (job.path / "metrics.jsonl").write_text("")
    assert metricsrc.active(job, 100.0) == (None, job.metrics)
    assert metricsrc.active(job) == (None, job.metrics)
    log = job.path / "metrics.log.jsonl"
    log.write_text(json.dumps({"t": 90.0, "step": 1}) + "\n")  # a record of the earlier attempt only
    assert metricsrc.active(job, 100.0) == ("log", log)
    assert metricsrc.active(job) == ("log", log)
