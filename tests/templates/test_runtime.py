"""templates/runtime/gpujob_runtime.py: metrics, stop requests, atomic save, resume, ranks."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.train_helpers import REPO, TEMPLATES, job_env, runtime_dir

RUNTIME = TEMPLATES / "runtime" / "gpujob_runtime.py"


def load_runtime_from_checkout():
    """Import the runtime the way a script in a checkout does (gpujob_checkpoints not on the path)."""
    sys.modules.pop("gpujob_checkpoints", None)
    spec = importlib.util.spec_from_file_location("gj_under_test", RUNTIME)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def gj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for k in list(os.environ):
        if k.startswith("GPUJOB_") or k in ("RANK", "WORLD_SIZE"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("GPUJOB_CKPT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("GPUJOB_METRICS_FILE", str(tmp_path / "m" / "metrics.jsonl"))
    monkeypatch.setenv("GPUJOB_STOP_FILE", str(tmp_path / "stop"))
    return load_runtime_from_checkout()


def test_imports_only_stdlib_at_module_level() -> None:
    code = (f"import sys; sys.path.insert(0, {str(RUNTIME.parent)!r}); import gpujob_runtime; "
            "bad = [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_the_shipped_runtime_folder_works_alone(tmp_path: Path) -> None:
    """What the agent puts on a job's PYTHONPATH (bundle.materialize_runtime) is enough: the checkpoint
    package comes as ``gpujob_checkpoints`` with its modules, no ``remote`` package is needed or loaded."""
    from gpujob.bundle import materialize_runtime

    rt = materialize_runtime(tmp_path / "rt")
    ck = tmp_path / "ckpt"
    for step in (1, 2):
        (ck / f"step-{step}").mkdir(parents=True)
        (ck / f"step-{step}" / "state.pt").write_bytes(b"x")
    (ck / "step-1" / ".gpujob-complete").write_text("")
    code = ("import sys, gpujob_runtime as gj, gpujob_checkpoints as gc; "
            f"print(gj.latest_complete({str(ck)!r}).name, gc.__file__, 'remote' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOB_")}
    env["PYTHONPATH"] = str(rt)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["step-1", str(rt / "gpujob_checkpoints" / "__init__.py"), "False"]


def test_defaults_without_variables(gj, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("GPUJOB_CKPT_DIR", "GPUJOB_METRICS_FILE", "GPUJOB_STOP_FILE"):
        monkeypatch.delenv(k)
    assert gj.ckpt_dir() == Path("checkpoints") and gj.tb_dir() == Path("runs")
    assert gj.metrics_file() == Path("metrics.jsonl") and gj.batch_divisor() == 1 and gj.keep_last() == 3
    assert gj.stop_requested() is False
    monkeypatch.setenv("GPUJOB_BATCH_DIVISOR", "4")
    assert gj.split_batch(32, 2) == (8, 8)
    assert gj.split_batch(2, 1) == (1, 4)


def test_report_appends_json_lines_rank0_only(gj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gj.report(step=1, loss=2.5, lr=1e-3)
    gj.report(step=2, loss=float("nan"), note="x")
    monkeypatch.setenv("RANK", "1")
    gj.report(step=3, loss=1.0)
    rows = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["loss"] == 2.5 and isinstance(rows[0]["t"], float)


def test_should_stop_on_stop_file_touches_watch(gj, tmp_path: Path) -> None:
    try:
        assert gj.should_stop() is False
        assert (tmp_path / "stop.watch").exists()
        (tmp_path / "stop").touch()
        assert gj.should_stop() is True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_worker_init_fn_ignores_signals(gj) -> None:
    old = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        gj.worker_init_fn(0)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN == signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])


def test_sigterm_saves_and_exits_zero(tmp_path: Path) -> None:
    """A script polling should_stop() gets SIGTERM, saves a complete checkpoint, exits 0 (no torch)."""
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        sys.modules["torch"] = None          # force the no-torch paths (pickle)
        import gpujob_runtime as gj
        step = 0
        while True:
            step += 1
            gj.report(step=step, loss=1.0 / step)
            if gj.should_stop():
                gj.save({"step": step}, step)
                print("saved", step, flush=True)
                sys.exit(0)
            time.sleep(0.02)
    """))
    rt = runtime_dir(tmp_path)
    env = job_env(tmp_path / "job", rt)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    watch = tmp_path / "job" / "stop.watch"
    from tests.helpers import wait_for

    assert wait_for(watch.exists, timeout=20, interval=0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0 and out.startswith("saved")
    step = int(out.split()[1])
    ck = tmp_path / "job" / "ckpt" / f"step-{step}"
    assert (ck / ".gpujob-complete").exists() and (ck / "state.pt").exists() and (ck / "rng_0.pt").exists()


def test_save_atomic_rotation_resume_and_rng(gj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import random

    monkeypatch.setenv("GPUJOB_KEEP", "2")
    for step in (1, 2, 3):
        torch.manual_seed(step)
        random.seed(step)
        path = gj.save({"w": torch.full((3,), float(step))}, step, **{"meta.json": {"step": step}, "note.txt": "hi"},
                       hf=lambda d: (d / "config.json").write_text("{}"))
    ck = tmp_path / "ckpt"
    assert sorted(p.name for p in ck.iterdir()) == ["step-2", "step-3"]
    assert sorted(gj.files_in(path)) == [".gpujob-complete", "config.json", "meta.json", "note.txt", "rng_0.pt", "state.pt"]
    assert gj.latest_checkpoint() == ck / "step-3"
    # A newer half-written checkpoint (no marker) is skipped, and so is an incomplete GPUJOB_RESUME.
    (ck / "step-4").mkdir()
    (ck / "step-4" / "state.pt").write_bytes(b"partial")
    monkeypatch.setenv("GPUJOB_RESUME", str(ck / "step-4"))
    assert gj.latest_checkpoint() == ck / "step-3"
    monkeypatch.setenv("GPUJOB_RESUME", str(ck / "step-2"))
    assert gj.latest_checkpoint() == ck / "step-2"
    # RNG: restoring step-3's state reproduces what followed it.
    torch.manual_seed(3)
    random.seed(3)
    expected = (torch.rand(2).tolist(), random.random())
    torch.manual_seed(99)
    random.seed(99)
    state = gj.load(ck / "step-3", restore_rng_state=True)
    assert state["w"].tolist() == [3.0, 3.0, 3.0]
    assert (torch.rand(2).tolist(), random.random()) == expected
    best = gj.save_best({"w": state["w"]}, 3, "acc", 0.9)
    assert json.loads((best / "best.json").read_text()) == {"step": 3, "metric": "acc", "value": 0.9}
    assert [p.name for p in gj.list_checkpoints(ck)] == ["step-2", "step-3", "step-4"]
    monkeypatch.setenv("GPUJOB_CKPT_DIR", str(tmp_path / "empty"))
    monkeypatch.delenv("GPUJOB_RESUME")
    assert gj.load() is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stop_agreed_across_ranks_and_per_rank_rng(tmp_path: Path) -> None:
    """Two gloo ranks: only rank 1 gets SIGTERM; both stop at the same step and save together."""
    pytest.importorskip("torch")
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys
        import torch, torch.distributed as dist
        import gpujob_runtime as gj
        dist.init_process_group("gloo")
        r = dist.get_rank()
        for step in range(1, 50):
            if r == 1 and step == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            if gj.should_stop():
                gj.save({"step": step}, step)
                print("stopped", step, flush=True)
                break
        dist.destroy_process_group()
    """))
    rt = runtime_dir(tmp_path)
    port = str(_free_port())
    procs = []
    for r in (0, 1):
        env = job_env(tmp_path / "job", rt, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == ["stopped 3", "stopped 3"]
    ck = tmp_path / "job" / "ckpt" / "step-3"
    assert {"rng_0.pt", "rng_1.pt", "state.pt", ".gpujob-complete"} <= {p.name for p in ck.iterdir()}
    assert not list((tmp_path / "job" / "ckpt").glob(".tmp-*"))


def test_load_runtime_from_package() -> None:
    from gpujob.usecases.init import load_runtime

    mod = load_runtime()
    assert hasattr(mod, "should_stop") and hasattr(mod, "trainer_callback")
