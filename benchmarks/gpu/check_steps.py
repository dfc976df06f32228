"""Steps 2-4 of the GPU check: training throughput, the OOM halve-batch retry, GPU sampling
(gpu.jsonl, the agent's CPU share, gpu_idle auto-stop) and doctor. Each fills its record as it
goes, so a failure still leaves what was measured, and raises StepFailed when a check fails."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from check_jobs import REPO, Gpujob, StepFailed, run_cmd

sys.path.insert(0, str(REPO / "benchmarks" / "agent"))
from overhead import cpu_seconds  # noqa: E402  (utime+stime and reaped children of a pid)

HERE = Path(__file__).resolve().parent
MFU_TARGET = 0.45
CPU_SHARE_TARGET = 1.0  # percent of one core


@dataclass
class Shapes:
    """What differs between the GPU run and the CPU dry run."""

    bench: list[str]            # bench_tokens.py arguments
    compile_backend: str
    oom_batch: int
    oom_seq: int | None         # None: probe the GPU for it
    oom_width: int
    oom_layers: int             # more layers, smaller tensors: each stays under 2^31 elements on 141 GB
    sample_every: str           # GPUJOB_GPU_SAMPLE
    cpu_window: float           # seconds of the agent's CPU measured while it samples
    idle_for: float             # gpu_idle's window, seconds
    check_every: str
    idle_hold_mib: int          # GPU memory the idle job takes


GPU = Shapes(bench=["--max-steps", "60", "--repeat", "40", "--warmup", "10"], compile_backend="inductor",
             oom_batch=16, oom_seq=None, oom_width=1024, oom_layers=8, sample_every="5", cpu_window=30.0, idle_for=45.0,
             check_every="5s", idle_hold_mib=1024)
DRY = Shapes(bench=["--block-size", "64", "--batch-size", "4", "--max-steps", "6", "--warmup", "2"],
             compile_backend="eager", oom_batch=8, oom_seq=64, oom_width=64, oom_layers=2, sample_every="0.5", cpu_window=3.0,
             idle_for=6.0, check_every="1s", idle_hold_mib=0)


def child_env(dry_run: bool) -> dict[str, str]:
    # nothing here needs the model hub: offline, so a machine without internet never waits on it
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


# ---- 2. throughput -----------------------------------------------------------------------
def bench(rec: dict, python: str, shapes: Shapes, recipes: str, out: Path, dry_run: bool, timeout: float) -> None:
    """bench_tokens.py with ``recipes``; rows, env and the MFU target into ``rec``."""
    cmd = [python, str(REPO / "benchmarks" / "train" / "bench_tokens.py"), "--recipes", recipes,
           "--compile-backend", shapes.compile_backend, "--json", str(out), *shapes.bench]
    rec["command"] = " ".join(cmd[1:])
    rc, text = run_cmd(cmd, child_env(dry_run), timeout)
    rec["output_tail"] = text[-1500:]
    if rc != 0 or not out.exists():
        raise StepFailed(f"bench_tokens.py exited {rc}: {text[-800:]}")
    doc = json.loads(out.read_text())
    rec["env"], rec["rows"] = doc["env"], doc["rows"]
    if doc.get("ratio") is not None:
        rec["packed_over_padded"] = round(doc["ratio"], 2)
    for row in doc["rows"]:
        if not row.get("useful_tokens_per_s"):
            raise StepFailed(f"{row['recipe']}: no tokens/s measured")
        want = "fp32" if dry_run else "bf16" if row["recipe"].startswith("packed") else "fp16"
        if row["precision"] != want or (row["recipe"].startswith("packed") and row.get("attention") != "sdpa"):
            raise StepFailed(f"{row['recipe']}: ran {row['precision']} with {row.get('attention')} attention, "
                             f"not the recipe's {want} (SDPA for packed)")
    if not dry_run and not doc["env"].get("tf32"):
        raise StepFailed("TF32 matmuls were off")
        if row["recipe"].startswith("packed") and not dry_run:
            rec.setdefault("targets", {})[f"mfu {row['recipe']} >= {MFU_TARGET:.0%}"] = {
                "value": row.get("mfu"), "met": bool(row.get("mfu") and row["mfu"] >= MFU_TARGET)}


# ---- 3. a CUDA OOM, then the same effective batch at half the per-device batch --------------
def oom_probe(python: str, shapes: Shapes, timeout: float) -> dict:
    """Sequence length at which ``oom_batch`` samples need about 1.4x the free GPU memory."""
    rc, text = run_cmd([python, str(HERE / "oom_train.py"), "--probe", "--seq", "8192", "--width",
                        str(shapes.oom_width), "--layers", str(shapes.oom_layers)], child_env(False), timeout)
    if rc != 0:
        raise StepFailed(f"oom_train.py --probe exited {rc}: {text[-800:]}")
    probe = json.loads(text.strip().splitlines()[-1])
    budget = 1.4 * (probe["free_bytes"] - probe["fixed_bytes"])
    probe["seq"] = max(1024, int(budget / shapes.oom_batch / probe["bytes_per_token"]) // 1024 * 1024)
    probe["need_full_batch_gib"] = round(
        (probe["fixed_bytes"] + shapes.oom_batch * probe["seq"] * probe["bytes_per_token"]) / 2**30, 1)
    probe["free_gib"] = round(probe["free_bytes"] / 2**30, 1)
    return probe


def oom_retry(rec: dict, gj: Gpujob, shapes: Shapes, dry_run: bool, deadline: float) -> None:
    seq = shapes.oom_seq
    if seq is None:
        rec["probe"] = oom_probe(gj.python, shapes, 120)
        seq = rec["probe"]["seq"]
    batch = rec["batch"] = shapes.oom_batch
    env = {"GPUJOB_CHECK_OOM_ABOVE": str(batch // 2)} if dry_run else {}
    res = gj.submit("gpucheck-oom", HERE / "oom_train.py",
                    ["--batch-size", str(batch), "--seq", str(seq), "--width", str(shapes.oom_width),
                     "--layers", str(shapes.oom_layers), "--steps", "3"],
                    gpus=1, env=env, retry={"max_restarts": 1, "on": ["oom"], "on_oom": "halve_batch", "backoff": "0s"})
    job = rec["job_id"] = res["job_id"]
    st = gj.wait(job, ("succeeded", "failed", "stopped", "autostopped"), deadline - time.time())
    log = (gj.job_dir(job) / "output.log").read_text(errors="replace")
    rec["log_tail"] = log[-3000:]
    configs = [json.loads(ln.split("[gpucheck] config ", 1)[1]) for ln in log.splitlines() if "[gpucheck] config " in ln]
    rec["attempts"] = [{k: a.get(k) for k in ("n", "exit_code", "reason", "summary", "batch_divisor")}
                       for a in st.get("attempts", [])]
    rec["configs"] = configs
    rec["state"], rec["status_batch_divisor"] = st.get("state"), st.get("batch_divisor")
    rec["oom_line"] = next((ln.strip() for ln in log.splitlines() if "CUDA out of memory" in ln
                            and not ln.startswith("==>")), None)
    metrics = gj.job_dir(job) / "metrics.jsonl"
    last = json.loads(metrics.read_text().splitlines()[-1]) if metrics.exists() and metrics.read_text().strip() else {}
    rec["last_metrics"] = last
    rec["gpu_jsonl_max_mem_used_mib"] = max_mem_used(read_samples(gj.job_dir(job) / "gpu.jsonl"))  # 5 s samples
    if st.get("state") != "succeeded":
        raise StepFailed(f"job ended {st.get('state')}: {st.get('reason')}")
    if [a["reason"] for a in rec["attempts"]][:1] != ["oom"] or [a["batch_divisor"] for a in rec["attempts"]] != [1, 2]:
        raise StepFailed(f"expected an OOM at divisor 1 then success at divisor 2, got {rec['attempts']}")
    if "restarting with GPUJOB_BATCH_DIVISOR=2" not in log or not rec["oom_line"]:
        raise StepFailed("the log lacks the OOM line or the agent's halve-batch marker")
    if len(configs) != 2 or configs[1]["per_device_batch"] != batch // 2 or configs[1]["effective_batch"] != batch:
        raise StepFailed(f"attempt 2 should run per-device {batch // 2} x 2 accumulation = {batch}: {configs}")
    if last.get("effective_batch") != batch:
        raise StepFailed(f"metrics.jsonl's last step has effective batch {last.get('effective_batch')}, not {batch}")
    if not dry_run and ("Tried to allocate" not in rec["oom_line"] or "dry run" in rec["oom_line"]):
        raise StepFailed("the OOM was not the CUDA allocator's own message")


# ---- 4. gpu.jsonl, the agent's CPU share while sampling, gpu_idle ---------------------------
def smi_cost(path_prefix: str, calls: int = 5) -> dict:
    """Wall and CPU time of one `nvidia-smi --query-gpu` call, as the sampler makes it."""
    import resource

    exe = shutil.which("nvidia-smi", path=os.pathsep.join(p for p in (path_prefix, os.environ.get("PATH", "")) if p))
    if not exe:
        raise StepFailed("no nvidia-smi on PATH")
    query = "--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    for _ in range(calls):
        rc, text = run_cmd([exe, query, "--format=csv,noheader,nounits"], dict(os.environ), 30)
        if rc != 0:
            raise StepFailed(f"nvidia-smi exited {rc}: {text[-300:]}")
    r1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"path": exe, "wall_ms": round(1000 * (t1 - t0) / calls, 1), "cpu_ms": round(1000 * cpu / calls, 1),
            "sample": text.strip()}


def read_samples(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def max_mem_used(recs: list[dict]) -> float | None:
    return max((g.get("mem_used") or 0 for r in recs for g in r.get("gpus", [])), default=None)


def check_samples(path: Path) -> dict:
    """gpu.jsonl parsed as the agent wrote it: counts, fields and figures of the last sample."""
    recs = read_samples(path)
    gpus = [g for r in recs for g in r.get("gpus", [])]
    nulls = {k: sum(1 for g in gpus if g.get(k) is None) for k in ("util", "mem_used", "mem_total", "power", "temp")}
    info = {"samples": len(recs), "null_fields": nulls, "last": recs[-1] if recs else None,
            "max_mem_used_mib": max_mem_used(recs),
            "max_util": max((g.get("util") or 0 for g in gpus), default=None)}
    if len(recs) < 2:
        raise StepFailed(f"gpu.jsonl has {len(recs)} samples")
    if nulls["util"] or nulls["mem_used"] or nulls["mem_total"]:
        raise StepFailed(f"gpu.jsonl has samples without utilisation or memory: {nulls}")
    return info


def gpu_sampling(rec: dict, gj: Gpujob, shapes: Shapes, out: Path, dry_run: bool, deadline: float) -> None:
    rec["nvidia_smi"] = smi_cost(gj.path_prefix)
    res = gj.submit("gpucheck-idle", HERE / "idle_job.py", ["--hold-mib", str(shapes.idle_hold_mib)], gpus=1,
                    stop={"grace": "20s"}, autostop={"gpu_idle": {"below": 5, "for": f"{shapes.idle_for:g}s"},
                                                     "check_every": shapes.check_every})
    job, pid = rec["job_id"], rec["supervisor_pid"] = res["job_id"], res["supervisor_pid"]
    t_sub = time.time()
    when = rec["timeline_s"] = {}  # seconds after submit: where a slow or stuck run spent its time
    gj.wait(job, ("running",) + ("succeeded", "failed", "stopped", "autostopped"), 60)
    when["running"] = round(time.time() - t_sub, 1)
    log = gj.job_dir(job) / "output.log"
    while "[gpucheck] idle on" not in (log.read_text(errors="replace") if log.exists() else ""):
        if gj.status(job).get("state") != "running" or time.time() > deadline - shapes.cpu_window:
            raise StepFailed(f"the idle job never reported that it holds its memory ({gj.status(job).get('reason')})")
        time.sleep(0.3)
    when["idle_reported"] = round(time.time() - t_sub, 1)
    # the window ends before gpu_idle can fire: the supervisor must still be there to be read
    started = float(gj.status(job).get("started_at") or time.time())
    window = max(0.5, min(shapes.cpu_window, started + shapes.idle_for - 0.5 - time.time()))
    (s0, c0), t0 = cpu_seconds(pid), time.time()
    time.sleep(window)
    (s1, c1), t1 = cpu_seconds(pid), time.time()
    share = 100 * (s1 - s0 + c1 - c0) / (t1 - t0)
    rec["agent_cpu"] = {"window_s": round(t1 - t0, 1), "supervisor_cpu_s": round(s1 - s0, 3),
                        "children_cpu_s": round(c1 - c0, 3), "percent_of_one_core": round(share, 3),
                        "sample_every_s": float(shapes.sample_every)}
    if not dry_run:
        rec.setdefault("targets", {})[f"agent CPU < {CPU_SHARE_TARGET}% of a core"] = {
            "value": round(share, 3), "met": share < CPU_SHARE_TARGET}
    when["cpu_window_done"] = round(time.time() - t_sub, 1)
    st = gj.wait(job, ("succeeded", "failed", "stopped", "autostopped"), max(10.0, deadline - time.time()))
    when["ended"] = round(time.time() - t_sub, 1)
    rec["state"], rec["reason"] = st.get("state"), st.get("reason")
    rec["idle_seconds"] = round((st.get("ended_at") or 0) - (st.get("started_at") or 0), 1)
    rec["log_tail"] = log.read_text(errors="replace")[-1500:]
    samples = gj.job_dir(job) / "gpu.jsonl"
    if not samples.exists():
        raise StepFailed("the agent wrote no gpu.jsonl")
    shutil.copyfile(samples, out)
    rec["gpu_jsonl"] = info = check_samples(samples)
    if (info["max_mem_used_mib"] or 0) < shapes.idle_hold_mib:  # the real driver's figures, parsed right
        raise StepFailed(f"gpu.jsonl shows at most {info['max_mem_used_mib']} MiB used while the job held "
                         f"{shapes.idle_hold_mib} MiB")
    if st.get("state") != "autostopped" or not str(st.get("reason", "")).startswith("autostop: gpu_idle"):
        raise StepFailed(f"the idle job ended {st.get('state')} ({st.get('reason')}), not autostopped by gpu_idle")


# ---- doctor ---------------------------------------------------------------------------------
def doctor(rec: dict, gj: Gpujob, out: Path, dry_run: bool) -> None:
    # doctor exits 1 when a line is ✗ (docs/cli.md): its document still says which, and the checks below judge it
    rc, text = run_cmd([gj.python, "-m", "gpujob.cli", "doctor", "local", "--torch-timeout", "90", "--json"], gj.env(), 150)
    try:
        rep = json.loads(text)
    except ValueError:
        raise StepFailed(f"gpujob doctor exited {rc} without JSON: {text[-800:]}") from None
    out.write_text(json.dumps(rep, indent=1))
    nv, tr = rep.get("nvidia") or {}, rep.get("torch") or {}
    rec["nvidia"] = {k: nv.get(k) for k in ("nvidia_smi", "driver", "cuda", "gpus", "error")}
    rec["torch"] = {k: tr.get(k) for k in ("version", "cuda", "cuda_available", "devices", "error")}
    rec["checks"] = {c["name"]: f"{c['level']}: {c['message']}" for c in rep.get("checks", [])}
    if not nv.get("gpus"):
        raise StepFailed(f"doctor found no GPU: {nv.get('error')}")
    if not dry_run and not tr.get("cuda_available"):
        raise StepFailed(f"doctor: torch {tr.get('version')} sees no CUDA device ({tr.get('error')})")
    if not dry_run and rep["checks"] and any(c["name"] == "gpu" and c["level"] == "error" for c in rep["checks"]):
        raise StepFailed("doctor's gpu check is an error: " + rec["checks"].get("gpu", ""))


def preflight(rec: dict, gj: Gpujob, out: Path, dry_run: bool, left: float) -> None:
    """``gpujob doctor local --bench`` (issue 28): matmul TFLOP/s against the card's rated figure, memory and
    host-to-device bandwidth, disk, ECC/Xid; exit 1 means warnings (recorded, not a failure of the step)."""
    t0 = time.time()
    rc, text = run_cmd([gj.python, "-m", "gpujob.cli", "doctor", "local", "--bench", "--json"], gj.env(), max(10.0, left))
    rec["seconds_measured"] = round(time.time() - t0, 1)
    try:
        rep = json.loads(text)
    except ValueError:
        raise StepFailed(f"doctor --bench exited {rc} without JSON: {text[-800:]}") from None
    out.write_text(json.dumps(rep, indent=1))
    rec.update({k: rep.get(k) for k in ("gpus", "disk", "versions", "warnings", "seconds")})
    rec["not_measured"] = rep.get("skipped")  # "skipped" is the check's own word for a step not run
    if rc not in (0, 1):
        raise StepFailed(f"doctor --bench exited {rc}: {rep.get('error')}")
    if rep.get("seconds", 0) > 60:
        raise StepFailed(f"the preflight took {rep['seconds']} s, over its minute")
    if not dry_run and not any(g.get("bf16_tflops") for g in rep.get("gpus") or []):
        raise StepFailed(f"no GPU was measured: {rep.get('skipped')}")
