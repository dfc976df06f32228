"""A job's status as readers see it (``gpujob status`` and each row of ``ls``): the record, what a
reader concludes from it (lost, a silent supervisor), the newest metrics of this attempt, GPU use,
billing, a pending stop, and with ``detail`` the diagnosis, checkpoints, stray ones and artifacts."""

import json
from pathlib import Path
from typing import Dict, Mapping, Optional, TypeVar

from remote.core import procs
from remote.core.errors import AgentError
from remote.core.jobrecord import JobRecord
from remote.core.jsontypes import JSONObject
from remote.core.layout import JobDir, Root, agent_log, now, read_json, screen_lines, tail_lines
from remote.core.liveness import SlurmVerdict, heartbeat_age
from remote.core.protocol import TERMINAL
from remote.jobs import saved
from remote.jobs import store as jobs

Line = TypeVar("Line", bound=Mapping[str, object])  # a metrics line, as its reader types it


def live_status(root: Root, job: JobDir, boot: str) -> JobRecord:
    """The record as a reader concludes it (remote/core/liveness.py), and a note when its supervisor
    lives but is silent: "running" alone would hide that nothing records the job's end."""
    st, verdict = jobs.judged(root, job, boot)
    if verdict.silent and st.supervisor_pid:
        # a Slurm job's supervisor runs on a compute node: this machine's /proc cannot tell if it is frozen
        st.doc["supervisor_note"] = supervisor_silent(st, st.supervisor_pid, here=not isinstance(verdict, SlurmVerdict))
    return st


def supervisor_silent(st: JobRecord, sup: int, here: bool = True) -> str:
    """What status says of a supervisor that lives but has written no heartbeat for a while (``here``:
    it runs on this machine, whose process table may say it is stopped)."""
    from remote.stopping.find import frozen

    how = frozen(sup) if here else ""
    how = "is " + how if how else "has written no heartbeat for {:.0f} s (a full disk, or stuck)".format(
        heartbeat_age(st))
    return "its supervisor (pid {}) {}: the job's end, restarts and autostop are not recorded until it goes on; " \
           "gpujob stop ends the job (the stop command acts itself)".format(sup, how)


def attempt_start(st: JobRecord) -> float:
    """When the current attempt started, once there was an earlier one (0: every record counts)."""
    attempts = st.attempts
    return float(attempts[-1].get("started_at") or 0) if len(attempts) > 1 else 0.0


def this_attempt(st: JobRecord, rec: Optional[Line]) -> Optional[Line]:
    """``rec`` if the current attempt wrote it: a restarted job shows no metrics of a killed attempt."""
    t = rec.get("t") if isinstance(rec, dict) else None
    return None if isinstance(t, (int, float)) and t < attempt_start(st) else rec


def recent_metrics(st: JobRecord, path: Path, n: int = 20) -> Optional[JSONObject]:
    """The newest value of each key over the last ``n`` records the current attempt wrote: one record
    alone often lacks the loss (a bar's record, an eval or learning-rate line printed last)."""
    out = None  # type: Optional[JSONObject]
    for line in tail_lines(path, n, 16384):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and this_attempt(st, rec) is not None:
            out = dict(out or {})
            out.update(rec)
    return out


def describe(root: Root, job_id: str, detail: bool = False) -> Dict[str, object]:
    """The job's status as readers show it. A record no writer of ours made (a hand edit, a
    damaged file) is refused naming the job, not met as an "agent error" halfway through."""
    try:
        return _describe(root, job_id, detail)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError) as e:
        import traceback

        agent_log(root, "job {}: damaged record: {}\n{}".format(job_id, e, traceback.format_exc()))
        raise AgentError("the record of job {} is damaged ({}: {})".format(job_id, type(e).__name__, e),
                         "gpujob rm {} --force removes it (its files: {})".format(job_id, root.job(job_id).path),
                         "damaged") from None


def _describe(root: Root, job_id: str, detail: bool = False) -> Dict[str, object]:
    job = root.job(job_id)
    rec = live_status(root, job, procs.boot_id())
    st = rec.doc  # the reader's document: the record, and what this look adds (read through ``rec``)
    st["job_id"] = job_id  # the folder's name, whatever a damaged or hand-edited record says
    try:
        st["log_size"] = job.log.stat().st_size
    except OSError:
        st["log_size"] = 0
    from remote.ckpt import disk

    low = disk.report(root.root)
    if low:
        st["disk"] = low
    from remote.metrics import metricsrc

    spec = job.job_spec()
    source, metrics = metricsrc.active(job, attempt_start(rec))  # a restart: the source with its records
    st["last_metrics"] = recent = recent_metrics(rec, metrics)
    if not detail and rec.state == "running" and source in (None, "log"):  # ls: the log's newest step, as
        # status shows it, from a bounded tail (a metrics file or events are read whole, not lagging)
        last, _, took = metricsrc.with_unread(job, spec, source, recent or {}, metricsrc.LS_TAIL)
        if took:
            st["last_metrics"], source = last, source or "log"
    st["metrics_source"] = source
    st["last_line"] = (tail_lines(job.log, 1) or [""])[0][-200:]
    if rec.state == "running":  # GPU use for every row of ls (the dashboard's table): the newest sample
        from remote.host import gpus

        sample = gpus.latest(job.gpu, max(attempt_start(rec), float(rec.started_at or 0)))
        if sample:
            st["gpu_now"] = sample
    mirror = read_json(job.path / "mirror.json")  # the supervisor's mirror thread (remote/mirror)
    if isinstance(mirror, dict):
        st["mirror"] = mirror
    st["now"] = t = now()
    if rec.state in TERMINAL and job.record().state not in TERMINAL:
        jobs.mark_lost(root, job, rec)  # the record stops claiming to run
    if rec.state == "queued" and rec.waiting_for_gpus:
        from remote.host import gpus

        st["queue_position"] = gpus.position(root, job_id)
    from remote.view import cost

    st["billing"] = cost.estimate(rec, spec, metrics, t, metricsrc.progress(job), metricsrc.known_total(job))
    if rec.state not in TERMINAL:
        from remote.stopping import after

        pending = after.describe(job, job.ckpt, spec.checkpoint.pattern,
                                 lambda: procs.job_pids(job.id, job_dir=str(job.path)))
        if pending:
            st["stop_after_checkpoint"] = pending
    if detail:
        st["spec"] = shown = {k: v for k, v in spec.doc.items() if k not in ("host_env",)}
        if "price_per_hour" in shown:  # the price billing used: a hand-edited "abc" shows as none, as billed
            shown["price_per_hour"] = spec.price_per_hour
        hp = hparams(job)
        if hp:
            st["hparams"] = hp
        if rec.state in ("failed", "restarting"):
            from remote.run import diagnose

            if rec.diagnosis:  # the supervisor's, from the attempt's end (what the log says too)
                pass
            elif rec.exit_code is None and rec.reason:  # it never ran: the agent said why
                st["diagnosis"] = {"cause": "not_started", "summary": rec.reason, "where": None, "line": None,
                                   "remedy": rec.remedy or "see the agent's log: gpujob agent-log HOST",
                                   "gpu": False}
            elif rec.reason and not rec.attempts:  # its setup: commands failed; the run never started
                st["diagnosis"] = {"cause": "not_started", "where": None, "line": None, "gpu": False,
                                   "summary": "{} with exit code {}".format(rec.reason, rec.exit_code),
                                   "remedy": rec.remedy or "read the setup's output: gpujob tail {} -n 50".format(job.id)}
            else:
                st["diagnosis"] = diagnose.diagnose(job.log, rec.exit_code, metrics=metrics)
            st["log_tail"] = screen_lines(job.log, 20)
        st["checkpoints"] = saved.checkpoint_list(job, spec, live=rec.state not in TERMINAL or rec.state == "lost")
        stray = saved.stray_checkpoints(job, spec, rec)
        if stray:
            st["stray_checkpoints"] = stray
        found = saved.artifacts(job, rec)
        if found:
            st["artifacts"] = found
    return st


HPARAMS = "hparams.json"  # beside GPUJOB_METRICS_FILE: a Trainer's arguments, written by the autohook


def hparams(job: JobDir) -> JSONObject:
    """The hyperparameters the training code reported (HF TrainingArguments, Lightning hparams):
    passed through to the laptop's run ledger; scalars only, {} when none or damaged."""
    try:
        with open(str(job.path / HPARAMS)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): v for k, v in doc.items() if isinstance(v, (int, float, str, bool)) or v is None}
