"""The one-shot GPU check (issue 18): what no CPU can prove, measured in one run.

    bash benchmarks/gpu/run.sh                  # on a machine with an NVIDIA GPU (about 5-7 minutes)
    bash benchmarks/gpu/run.sh --cpu-dry-run    # the same steps with small shapes on a CPU (under a minute)

Steps: install (a CUDA torch and the `train` extra when missing), bench (bench_tokens.py: the
packed template recipe against the seed recipe), bench_compile (the packed recipe under
torch.compile), oom_retry (a real CUDA OOM, then `on_oom: halve_batch` at the same effective
batch), gpu_sampling (gpu.jsonl from nvidia-smi, the agent's CPU share, gpu_idle auto-stop)
and doctor. Each step runs under its own time guard; a failed step is recorded and the next one
runs. Everything lands in ``$OUT/gpu-check.json`` (rewritten after every step), with
``summary.md``, ``gpu.jsonl``, ``doctor.json`` and the jobs' logs beside it. Exit status 1 when
any step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import check_install
import check_steps
from check_jobs import REPO, Gpujob, StepFailed

STAND_INS = REPO / "tests" / "stand_ins"  # the tests' nvidia-smi stand-in: the dry run's GPU
SECTIONS = ["install", "bench", "bench_compile", "oom_retry", "gpu_sampling", "doctor", "preflight"]
# seconds per step: GPU run, dry run. On an H200 with torch present the steps take about 5 minutes
# in all; the overall budget (--total-budget, 8 minutes from run.sh) clips the later guards. A dry
# run takes about 40 s on a quiet 2-core machine; its guards allow for a very busy one.
BUDGETS = {"install": (120, 60), "bench": (120, 120), "bench_compile": (150, 120), "oom_retry": (100, 120),
           "gpu_sampling": (90, 90), "doctor": (45, 90), "preflight": (75, 90)}
RESERVE_S = 20  # kept back from the overall budget for stopping jobs and writing the summary


class StepTimeout(Exception):
    pass


class Terminated(BaseException):
    """SIGTERM (run.sh's overall timeout): stop the step, still write the results."""


def _alarm(signum: int, frame: object) -> None:
    raise StepTimeout()


def _term(signum: int, frame: object) -> None:
    raise Terminated()


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dry = args.cpu_dry_run
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="gpujob-gpucheck-"))
        self.shapes = check_steps.DRY if self.dry else check_steps.GPU
        # the interpreter's folder first: doctor's probe and the jobs' login shells find this python
        prefix = os.pathsep.join([*([str(STAND_INS)] if self.dry else []), str(Path(sys.executable).parent)])
        extra = {"GPUJOB_GPU_SAMPLE": self.shapes.sample_every}
        if self.dry:  # a quicker heartbeat; the GPU run keeps the default, whose CPU cost it measures
            extra.update(GPUJOB_HEARTBEAT="1", CUDA_VISIBLE_DEVICES="")
        self.gj = Gpujob(sys.executable, self.tmp, path_prefix=prefix, extra_env=extra)
        self.doc: dict = {"check": "gpujob GPU check (issue 18)", "mode": "cpu-dry-run" if self.dry else "gpu",
                          "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "started_at": time.time(),
                          "machine": machine(prefix), "total_budget_s": args.total_budget, "steps": {}}
        self.deadline = self.doc["started_at"] + args.total_budget - RESERVE_S

    def save(self) -> None:
        path = self.out / "gpu-check.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str))
        os.replace(tmp, path)

    def step(self, name: str, fn: Callable[[dict, float], None]) -> None:
        if self.args.only and name not in self.args.only:
            self.doc["steps"][name] = {"ok": False, "skipped": "not selected (--only)"}
            return
        left = self.deadline - time.time()
        budget = min(BUDGETS[name][1 if self.dry else 0] * self.args.budget_scale, left)
        rec: dict = {"ok": False, "budget_s": round(budget, 1)}
        self.doc["steps"][name] = rec
        if left < 5:
            rec["error"] = f"not run: the overall budget of {self.args.total_budget:.0f} s is spent"
            say(f"== {name}: {rec['error']}")
            self.save()
            return
        self.save()
        say(f"== {name} (at most {budget:.0f} s)")
        t0 = time.time()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            fn(rec, t0 + budget)
            rec["ok"] = True
        except StepTimeout:
            rec["error"] = f"timed out after {budget:.0f} s (step guard)"
        except Terminated:
            rec["error"] = "terminated (SIGTERM: run.sh's overall timeout, or someone else)"
            raise
        except StepFailed as e:
            rec["error"] = str(e)
        except Exception as e:  # a bug or an unexpected answer: recorded, the next step still runs
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-2000:]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            rec["seconds"] = round(time.time() - t0, 1)
        if not rec["ok"]:
            rec["killed_after_failure"] = self.gj.cleanup()  # a stuck job must not hold the GPU for the next step
        say(f"   {'ok' if rec['ok'] else 'FAILED: ' + rec['error']} ({rec['seconds']} s)")
        self.save()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, _term)
        s, dry, out = self.shapes, self.dry, self.out
        py = sys.executable
        wheels = Path(self.args.wheels).resolve() if self.args.wheels else None
        try:
            self.step("install", lambda r, d: check_install.step(r, py, dry, wheels, d - time.time()))
            self.step("bench", lambda r, d: check_steps.bench(
                r, py, s, "packed,padded", self.tmp / "bench.json", dry, d - time.time()))
            self.step("bench_compile", lambda r, d: check_steps.bench(
                r, py, s, "packed+compile", self.tmp / "bench_compile.json", dry, d - time.time()))
            self.step("oom_retry", lambda r, d: check_steps.oom_retry(r, self.gj, s, dry, d))
            self.step("gpu_sampling", lambda r, d: check_steps.gpu_sampling(r, self.gj, s, out / "gpu.jsonl", dry, d))
            self.step("doctor", lambda r, d: check_steps.doctor(r, self.gj, out / "doctor.json", dry))
            self.step("preflight", lambda r, d: check_steps.preflight(r, self.gj, out / "preflight.json", dry,
                                                                      d - time.time()))
        except Terminated:
            self.doc["terminated"] = True
        finally:
            self.finish()
        return 0 if self.doc["ok"] else 1

    def finish(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # run.sh's SIGKILL follows in 20 s: no polite stops then
        try:
            self.doc["leftover_processes_killed"] = self.gj.cleanup(polite=not self.doc.get("terminated"))
        except Exception as e:  # cleanup must not hide the results
            self.doc["cleanup_error"] = str(e)
        for res in self.gj.submitted:
            log = self.gj.job_dir(res["job_id"]) / "output.log"
            name = "oom-output.log" if res["job_id"].startswith("gpucheck-oom") else "idle-output.log"
            if log.exists():
                (self.out / name).write_text(log.read_text(errors="replace"))
        shutil.rmtree(self.tmp, ignore_errors=True)
        steps = self.doc["steps"]
        for n in SECTIONS:  # never reached (terminated): a section all the same, saying so
            steps.setdefault(n, {"ok": False, "error": "not run: the run was terminated before it"})
        self.doc["skipped"] = [n for n in SECTIONS if steps[n].get("skipped")]
        self.doc["failed"] = [n for n in SECTIONS if not steps[n].get("ok") and n not in self.doc["skipped"]]
        self.doc["ok"] = not self.doc["failed"] and not self.doc["skipped"]  # a partial run proves less
        self.doc["ended_at"] = time.time()
        self.doc["seconds"] = round(self.doc["ended_at"] - self.doc["started_at"], 1)
        self.save()
        text = summary(self.doc)
        (self.out / "summary.md").write_text(text)
        say("\n" + text)


def say(text: str) -> None:
    """Print; a closed stdout (``| head``) must not cost the results, which are on disk anyway."""
    try:
        print(text, flush=True)
    except OSError:
        pass


def machine(prefix: str) -> dict:
    """Host, Python, CPU count and the GPU as nvidia-smi names it (the stand-in in the dry run)."""
    info = {"host": socket.gethostname(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "platform": platform.platform()}
    env = dict(os.environ, PATH=os.pathsep.join(p for p in (prefix, os.environ.get("PATH", "")) if p))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader,nounits"], env=env, capture_output=True, text=True, timeout=30)
        info["gpu"] = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def _fmt(v: object) -> str:
    return "—" if v is None else f"{v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def summary(doc: dict) -> str:
    """A short markdown report: each step's outcome and headline figures, then the targets."""
    steps = doc["steps"]
    outcome = ("all steps passed" if doc["ok"] else "FAILED: " + (", ".join(doc["failed"]) or "none")
               + (f" (skipped: {', '.join(doc['skipped'])})" if doc["skipped"] else ""))
    lines = [f"# gpujob GPU check — {doc['mode']}, {doc['seconds']} s, {outcome}",
             "", f"machine: {doc['machine']}", "", "| step | result | s | figures |", "|---|---|---|---|"]
    for name in SECTIONS:
        rec = steps.get(name)
        if rec is None:
            lines.append(f"| {name} | not run | | |")
            continue
        error = " ".join(str(rec.get("error", "")).replace("|", "/").split())[:300]
        result = "ok" if rec.get("ok") else f"skipped ({rec['skipped']})" if rec.get("skipped") else "FAILED: " + error
        figures = headline(name, rec) if "seconds" in rec else ""
        lines.append(f"| {name} | {result} | {_fmt(rec.get('seconds'))} | {figures} |")
    rows = [r for n in ("bench", "bench_compile") for r in steps.get(n, {}).get("rows", [])]
    if rows:
        lines += ["", "| recipe | precision | useful tokens/s | TFLOP/s | MFU | max memory GiB |", "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['recipe']} | {r['precision']} | {_fmt(r['useful_tokens_per_s'])} | {_fmt(r.get('tflops'))} "
                         f"| {_fmt(r.get('mfu'))} | {_fmt(r.get('max_memory_gib'))} |")
    targets = {k: v for rec in steps.values() for k, v in rec.get("targets", {}).items()}
    if targets:
        lines += ["", "targets:"] + [f"- {k}: {_fmt(v['value'])} — {'met' if v['met'] else 'MISSED'}"
                                     for k, v in targets.items()]
    elif doc["mode"] == "cpu-dry-run":
        lines += ["", "targets: not judged in a CPU dry run (its figures only prove the steps work)"]
    return "\n".join(lines) + "\n"


def headline(name: str, rec: dict) -> str:
    if name == "install":
        return (f"torch {rec.get('torch')} (CUDA {rec.get('cuda')}), {rec.get('device') or 'no GPU'}; "
                f"installed {rec.get('installed') or 'nothing'} in {rec.get('pip_seconds')} s")
    if name in ("bench", "bench_compile"):
        ratio = rec.get("packed_over_padded")
        return f"{len(rec.get('rows', []))} rows" + (f", packed/padded {ratio}x" if ratio else "")
    if name == "oom_retry":
        tries = ", ".join(f"attempt {a.get('n')} divisor {a.get('batch_divisor')} {a.get('reason') or 'ok'}"
                          for a in rec.get("attempts") or [])
        peak = (rec.get("last_metrics") or {}).get("max_memory_gib")
        return (f"batch {rec.get('batch')}: {tries}; state {rec.get('state')}"
                + (f", peak {peak:.1f} GiB" if isinstance(peak, (int, float)) else ""))
    if name == "gpu_sampling":
        cpu, smi = rec.get("agent_cpu") or {}, rec.get("nvidia_smi") or {}
        return (f"agent CPU {cpu.get('percent_of_one_core')} % of a core, nvidia-smi {smi.get('cpu_ms')} ms CPU/call, "
                f"{(rec.get('gpu_jsonl') or {}).get('samples')} samples, idle job {rec.get('state')} "
                f"after {rec.get('idle_seconds')} s")
    if name == "preflight":
        g = (rec.get("gpus") or [{}])[0]
        return (f"bf16 {g.get('bf16_tflops')} TFLOP/s ({g.get('bf16_pct')} % of rated), fp16 {g.get('fp16_tflops')}, "
                f"memory {g.get('mem_gbs')} GB/s, host→GPU {g.get('h2d_gbs')} GB/s, disk write "
                f"{(rec.get('disk') or {}).get('write_mbs')} MB/s; {len(rec.get('warnings') or [])} warning(s)")
    if name == "doctor":
        gpus = (rec.get("nvidia") or {}).get("gpus") or []
        return f"{', '.join(g.get('name', '?') for g in gpus) or 'no GPU'}, driver {(rec.get('nvidia') or {}).get('driver')}"
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-dry-run", action="store_true", help="small shapes on the CPU; the nvidia-smi stand-in")
    p.add_argument("--out", default=os.environ.get("OUT") or None, help="results folder (default $OUT, else a new temp dir)")
    p.add_argument("--wheels", default=os.environ.get("GPUCHECK_WHEELS") or None,
                   help="install these .whl files first (offline machines; see fetch_wheels.sh); default: "
                        "the repository's .whl folder when there is one")
    p.add_argument("--budget-scale", type=float, default=float(os.environ.get("GPUCHECK_BUDGET_SCALE", "1")),
                   help="multiply every step's time guard (a slow machine)")
    p.add_argument("--total-budget", type=float, default=None,
                   help="seconds for the whole run (default 480, dry run 600); later steps' guards are clipped")
    p.add_argument("--only", type=lambda v: v.split(","), default=None,
                   help="run only these steps (comma list of " + ", ".join(SECTIONS) + "); the rest count as failed")
    args = p.parse_args(argv)
    unknown = set(args.only or []) - set(SECTIONS)
    if unknown:
        p.error(f"--only: unknown step(s) {', '.join(sorted(unknown))}; pick from {', '.join(SECTIONS)}")
    args.out = args.out or tempfile.mkdtemp(prefix="gpucheck-out-")
    args.total_budget = args.total_budget or (600.0 if args.cpu_dry_run else 480.0)
    if not args.wheels and (REPO / ".whl").is_dir():
        args.wheels = str(REPO / ".whl")
    check = Check(args)
    say(f"gpujob GPU check ({check.doc['mode']}): results in {check.out}")
    return check.run()


if __name__ == "__main__":
    sys.exit(main())
