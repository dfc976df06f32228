"""Jobs drawn for the terminal: the job table (``ls``), the job panel (``status``), sparklines, and
what each job command prints when it is done (from the API's results)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpujob.bundle import import_remote
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView
from gpujob.ui.neutral import clean, clean_doc
from gpujob.ui.output import STATE_STYLE, console  # noqa: F401  (STATE_STYLE: ui.jobs's users)
from gpujob.ui.plaintable import SPARK, sparkline  # noqa: F401  (here for ui.jobs's users)
from gpujob.usecases.jobs.cost import accrued_cost, elapsed_s
from gpujob.usecases.jobs.watch import loss_key

format_duration = import_remote("core.protocol").format_duration
AUTOSTOP = import_remote("core.sections")  # autostop:'s defaults, as the agent reads them
TERMINAL = import_remote("core.protocol").TERMINAL

if TYPE_CHECKING:
    from gpujob.api import results





# ``ls`` columns in the order shown; at a narrow width the least important give way whole (plaintable's
# rule: never a header cut to ``ST…``, the footnote names them); the last line fills what is left
LS_COLUMNS = ("JOB", "HOST", "STATE", "QUEUE", "ATTEMPT", "ELAPSED", "STEP", "LAST LOSS", "LAST LINE")
LS_IMPORTANCE = ("JOB", "STATE", "HOST", "STEP", "LAST LOSS", "ELAPSED", "ATTEMPT", "QUEUE", "LAST LINE")
LAST_LINE_MAX = 60


def _ls_cells(j: JobView) -> dict[str, str]:
    m = j.last_metrics or {}
    lk = j.loss_key or loss_key(m)  # HF's train_loss, Lightning's train_loss, TensorBoard's Loss/train...
    cells = {
        "JOB": j.job_id or "?", "HOST": j.host or "-", "STATE": j.state or "?",
        "QUEUE": f"#{j.queue_position}" if j.queue_position else slurm_queue(j),
        "ATTEMPT": str(j.attempt or "-"), "ELAPSED": format_duration(elapsed_s(j.doc)),
        "STEP": str(m.get("step", "-")), "LAST LOSS": _fmt(m.get(lk)) if lk else "-",
        "LAST LINE": " ".join((j.last_line or "").split()),  # its start: a line is read from the left
    }
    if j.unreachable:  # the host did not answer: the laptop's last knowledge, said as such
        seen = f", seen so {format_duration(max(0.0, time.time() - j.last_seen))} ago" if j.last_seen else ""
        cells.update({"STATE": f"{j.state or '?'}?", "ELAPSED": "-" if j.state not in TERMINAL else cells["ELAPSED"],
                      "LAST LINE": f"host unreachable: state as last known{seen}"})
    return cells


def slurm_queue(j: JobView) -> str:
    """``ls``'s QUEUE of a job Slurm holds: why it waits (Resources, Priority, QOSMaxGRESPerUser ...)."""
    said = j.slurm or {}
    reason = said.get("reason") if j.state == "pending" else None
    return str(reason) if reason else "-"


def slurm_line(j: JobView) -> str:
    """``status``'s line on what Slurm says of the job: its id and state, why it waits and when it may start."""
    said = j.slurm or {}
    parts = [f"job {j.slurm_job}"]
    if said.get("error"):
        return f"job {j.slurm_job}: [yellow]{said['error']}[/] (the state shown is the last recorded)"
    if said.get("state"):
        parts.append(str(said["state"]))
    if said.get("reason"):
        parts.append(f"reason {said['reason']}")
    start = said.get("expected_start")
    if j.state == "pending" and isinstance(start, (int, float)) and start > time.time():
        parts.append(f"expected start in {format_duration(start - time.time())}")
    if said.get("nodes") or j.slurm_nodes:
        parts.append(f"on {said.get('nodes') or j.slurm_nodes}")
    if j.requeues:
        parts.append(f"requeued {j.requeues}x")
    return ", ".join(parts)


def ls_cols() -> list[Any]:
    from gpujob.ui.plaintable import Col

    kind = {"JOB": "id", "HOST": "name", "LAST LINE": "text"}
    return [Col(c, kind.get(c, "fixed"), LS_IMPORTANCE.index(c) if c not in ("JOB", "STATE") else 0,
                LAST_LINE_MAX if c == "LAST LINE" else 0, c not in ("JOB", "HOST", "STATE")) for c in LS_COLUMNS]


def jobs_table(jobs: list[JSONObject], title: str | None = None, width: int | None = None) -> Any:
    """``ls``'s table (rich text: ``ls -w`` redraws it in place)."""
    from rich.text import Text

    from gpujob.ui.plaintable import table

    rows = [_ls_cells(JobView(j)) for j in clean_doc(jobs)]  # host-supplied: no escape sequence reaches the terminal
    cells = [[r[c] for c in LS_COLUMNS] for r in rows]
    styles = [["", "", "dim" if r["STATE"].endswith("?") else STATE_STYLE.get(r["STATE"], "white")]  # last known
              for r in rows]
    return Text.from_ansi(table(ls_cols(), cells, styles, width=width or console().width, title=title or "").rstrip("\n"),
                          no_wrap=True)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def _gpu_line(gpu: dict[str, Any] | None) -> str | None:
    if not gpu:
        return None
    avg = {g.get("index"): g for g in gpu.get("avg") or []}
    parts = []
    for g in gpu.get("now") or []:
        a = avg.get(g.get("index")) or {}
        mem = f"{(g.get('mem_used') or 0) / 1024:.1f}/{(g.get('mem_total') or 0) / 1024:.1f} GiB"
        parts.append(f"#{g.get('index')} {_fmt(g.get('util'))}% {mem}"
                     + (f" (avg {_fmt(a.get('util'))}%, {(a.get('mem_used') or 0) / 1024:.1f} GiB)" if a else ""))
    return "   ".join(parts) or None


def autostop_summary(cfg: Mapping[str, object]) -> str:
    """``max_runtime 8h · gpu_idle <5% for 30m · then shutdown`` from a job's ``autostop:``."""
    parts = []
    for key, val in cfg.items():
        if key in ("after", "check_every", "pull_before_shutdown") or val in (None, False):
            continue
        if key == "gpu_idle" and isinstance(val, dict):
            parts.append(f"gpu_idle <{val.get('below', AUTOSTOP.GPU_IDLE_BELOW)}% for {val.get('for', '?')}")
        elif key == "plateau" and isinstance(val, dict):
            parts.append(f"plateau {val.get('metric', '?')} ({val.get('mode', AUTOSTOP.PLATEAU_MODE)}, patience {val.get('patience', '?')})")
        else:
            parts.append(key if val is True else f"{key} {val}")
    if parts and cfg.get("after") == "shutdown":
        parts.append("then shutdown")
    return " · ".join(parts)


def after_checkpoint_line(j: JobView) -> str | None:
    """"stopping after the next checkpoint (last one 7 min ago, every ~10 min)" for a pending request."""
    import time

    p = j.stop_after_checkpoint
    if not isinstance(p, dict) or j.state in TERMINAL:
        return None
    now = float(j.now or time.time())
    last = f"last one {format_duration(max(now - float(p['last_at']), 0))} ago" if p.get("last_at") else "none yet"
    every = f", every ~{format_duration(float(p['every_s']))}" if p.get("every_s") else ""
    left = float(p.get("requested_at") or now) + float(p.get("max_wait") or 0) - now
    why = ": twice the usual interval" if p.get("max_wait_auto") and p.get("every_s") else ""
    return f"stopping after the next checkpoint ({last}{every}); at the latest in {format_duration(max(left, 0))}{why}"


def job_panel(doc: JSONObject) -> Any:
    """The detail view of ``gpujob status JOB`` (a plain record, or one from ``watch.status_doc``)."""
    return _panel(JobView(clean_doc(doc, markup=True)))  # every string came from the host: no escape sequence, no markup


def _panel(j: JobView) -> Any:
    from rich.table import Table

    state = j.state if "state" in j else "?"  # a null state is shown as such
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("job", f"{j.job_id if 'job_id' in j else '?'}" + (f"  on {j.host}" if j.host else ""))
    t.add_row("state", f"[{STATE_STYLE.get(state or '', 'white')}]{state}[/]" + (f"  ({j.reason})" if j.reason else "")
              + (f"  ({j.lost_reason})" if j.lost_reason else "")
              + f"   attempt {j.attempt or 0}")
    pending = after_checkpoint_line(j)
    if pending:
        t.add_row("stop", f"[yellow]{pending}[/]")
    if j.survivors:
        t.add_row("left", "[red]process(es) {} of the job still run after its end[/]".format(
            ", ".join(str(p) for p in j.survivors)))
    if j.supervisor_note:  # alive but silent (frozen, a full disk): its end would not be recorded
        t.add_row("agent", f"[yellow]{j.supervisor_note}[/]")
    m = j.latest_metrics or j.last_metrics or {}
    if m.get("step") is not None or m.get("epoch") is not None:
        unit = "epoch" if m.get("step") is not None and m.get("step") == m.get("epoch") else "step"  # an epoch loop
        prog = f"{unit} {_fmt(m.get('step'))}" + (f"/{j.max_steps}" if j.max_steps else "")
        if m.get("epoch") is not None and unit == "step":
            prog += f"   epoch {_fmt(m.get('epoch'))}"
        rate, eta = j.steps_per_s, j.eta_s
        if rate:
            prog += f"   {rate:.3g} {unit}s/s"
        if eta is not None:
            prog += f"   ETA {format_duration(eta)}"
        t.add_row("progress", prog)
    lk = j.loss_key or ("loss" if "loss" in m else None)
    if lk and m.get(lk) is not None:
        hist = [p[1] for p in (j.series or {}).get(lk) or []]
        src = {"tensorboard": "TensorBoard events", "log": "the log"}.get(j.metrics_source or "")
        t.add_row(lk, f"{_fmt(m.get(lk))}  [cyan]{sparkline(hist, 40)}[/]" + (f"  [dim](from {src})[/]" if src else ""))
    ev = j.eval_metrics or {}
    if ev:
        t.add_row("eval", "  ".join(f"{k}={_fmt(v)}" for k, v in ev.items()))
    others = {k: v for k, v in m.items() if k not in ("t", "step", "epoch", lk, "max_steps") and k not in ev}
    if others:
        t.add_row("metrics", "  ".join(f"{k}={_fmt(v)}" for k, v in others.items()))
    g = _gpu_line(j.gpu)
    if g:
        t.add_row("gpu", g)
    c = accrued_cost(j.doc)
    t.add_row("elapsed", format_duration(elapsed_s(j.doc))
              + (f"   cost {c:.2f} {(j.spec or {}).get('currency', '')}" if c is not None else ""))
    est = j.billed
    if est.projected_cost is not None:
        # one ETA per frame (the progress line's, from the newest step); this one only when that is missing
        when = f", done in {format_duration(est.eta_s)}" if j.eta_s is None and est.eta_s else ""
        t.add_row("projection", f"{est.projected_cost:.2f} {est.currency or ''} in all{when}")
    policies = autostop_summary((j.spec or {}).get("autostop") or {})
    if policies:
        t.add_row("autostop", policies)
    if j.queue_position:
        t.add_row("queue", f"#{j.queue_position} for GPUs" + (f"  ({j.queue_reason})" if j.queue_reason else ""))
    if j.slurm_job:
        t.add_row("slurm", slurm_line(j))
    if j.exit_code is not None:
        t.add_row("exit code", str(j.exit_code))
    if j.gpu_error:  # a new ECC/Xid error during the run (remote/host/gpus.py Health)
        t.add_row("GPU error", f"[red]{j.gpu_error}[/]  (docs/power.md: retry.move_after moves the job)")
    d = j.diagnosis
    if d:
        t.add_row("cause", f"[red]{d.get('summary')}[/]" + (f"  at {d['where']}" if d.get("where") else ""))
        t.add_row("remedy", d.get("remedy") or "")
    ck = j.checkpoints or []
    if ck:
        done = [c for c in ck if c.get("complete")]
        what = "-"
        if done:
            n = done[-1]
            about = [n["kind"]] if n.get("kind") else []
            if n.get("step") is not None:
                about.append(f"{_counts(n)} {n['step']}")
            what = n["name"] + (f" ({', '.join(about)})" if about else "")
        t.add_row("checkpoints", f"{len(done)} complete, newest {what}")
        # one never judged complete (older than the newest complete one, or the job is over) says why
        last_done = ck.index(done[-1]) if done else len(ck)
        for c in [c for i, c in enumerate(ck) if not c.get("complete") and (i < last_done or j.ended_at)][-3:]:
            t.add_row("", f"[yellow]incomplete {c['name']}: {c.get('incomplete_reason') or '?'}[/]")
    if isinstance(j.restored, str):  # a save in place cut short: its kept copy was put back
        t.add_row("restored", f"[yellow]{j.restored}[/]")
    if isinstance(j.kept_copy, str):  # the kept copy made way for the job's own writes
        t.add_row("kept copy", f"[yellow]{j.kept_copy}[/]")
    stray = j.stray_checkpoints
    if stray:
        t.add_row("checkpoints" if not ck else "", f"[yellow]{'none where gpujob looks: ' if not ck else ''}"
                  f"{stray['advice']}[/]")
    arts = j.artifacts or []
    if arts:
        t.add_row("artifacts", (", ".join(f"{a['name']} ({a['bytes'] / 2**20:.1f} MiB)" for a in arts[:3]))
                  + (f" and {len(arts) - 3} more" if len(arts) > 3 else "")
                  + ("" if done_any(ck) else "  (pull --latest brings them: no checkpoint)"))
    mirror = j.mirror
    if mirror:
        from gpujob.ui.mirror import mirror_lines

        for i, line in enumerate(mirror_lines(mirror, j.now)):
            t.add_row("mirror" if i == 0 else "", line)
    if j.last_line:
        t.add_row("last line", j.last_line)
    return t


def _counts(c: Mapping[str, object]) -> str:
    """What the number in a checkpoint's name counts: accelerate's automatic names number saves
    (checkpoint_0, _1, ...), ``epoch_3`` (accelerate's --checkpointing_steps epoch) epochs, the rest steps."""
    base = str(c.get("name")).rsplit("/", 1)[-1]
    if c.get("kind") == "accelerate" and base.startswith("checkpoint_"):
        return "save"
    return "epoch" if re.match(r"^epoch[_=-]?\d+", base) and "step" not in base else "step"


def done_any(ck: list[JSONObject]) -> bool:
    return any(c.get("complete") for c in ck)


# ---- one line (or a few) per job command --------------------------------------------------
def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _t(value: Any) -> str:
    """A host-supplied value in a rich markup line: text, never markup or an escape sequence."""
    return _esc(clean(str(value)))


def submitted(res: results.SubmitResult) -> None:
    """Where the job went and how to follow it; on a terminal too narrow for a line, its parts on lines
    of their own (a pipe gets each line whole)."""
    from gpujob.ui.plaintable import parts_that_fit

    c = console()
    width = c.width if c.is_terminal else 1 << 30
    follow = parts_that_fit([f"follow: gpujob tail {res.job_id} -f", f"status: gpujob status {res.job_id}"], "    ",
                            width, "  ")
    if res.nodes:
        print(clean(f"{res.job_id} submitted to {len(res.nodes)} nodes: {res.host}"))
        for line in follow:
            print(clean(line))
        return
    s, jid = res.sync, clean(res.job_id)
    head = parts_that_fit([f"{jid} submitted to {clean(res.host)} ({clean(res.state)});",
                           f"synced {s['files_sent']} file(s), {s['bytes_sent'] / 1e6:.1f} MB, {s['unchanged']} unchanged"],
                          " ", width)
    c.print(f"[bold]{_esc(jid)}[/]" + _esc(head[0][len(jid):]))
    for line in head[1:] + left_out_lines(s.get("as_data") or []) + follow:
        c.print(_esc(line if line.startswith(" ") else "  " + line))
    large_code_warnings(s.get("large") or [])


def left_out_lines(entries: list[Any]) -> list[str]:
    """A ``data:`` source inside the workdir is no code: one line each, saying why it was left out."""
    from gpujob.ui.report import human_bytes

    lines = []
    for e in entries:
        size = f" ({human_bytes(e['bytes'])})" if isinstance(e.get("bytes"), int) else ""
        lines.append(clean(f"left out of code: {e.get('path')}{size} — sent as data: (once); the job finds it "
                           "at the same path"))
    return lines


def large_code_warnings(names: list[str]) -> None:
    """One line per large file sent as code: it belongs in data: (sent once, shared) or exclude:."""
    import sys

    for name in names:
        print(f"warning: {name} (over 50 MB) was uploaded as code: move it to a data: entry (sent once, "
              f"shared by jobs) or add it to exclude: in the job file", file=sys.stderr)


def disk_warnings(jobs: list[JSONObject]) -> None:
    """A full or nearly full disk on the instance: how much is free and what to delete (stderr)."""
    import sys

    for advice in dict.fromkeys((JobView(j).disk or {}).get("advice") for j in jobs):
        if advice:
            print(f"warning: {clean(str(advice))}", file=sys.stderr)


def status(st: results.JobStatus) -> None:
    doc = st.to_json()
    console().print(job_panel(doc))
    disk_warnings([doc])


def job_list(listed: results.JobList) -> None:
    jobs = [j.to_json() for j in listed.jobs]  # each row's document, as listed.to_json()["jobs"] holds it
    c = console()
    c.print(jobs_table(jobs) if jobs else "no jobs yet: gpujob submit job.yaml")
    if listed.older:
        c.print(f"[dim]{listed.older} older finished job(s) not shown: gpujob ls --all[/]")
    for name, e in listed.errors.items():
        known = " (its jobs above are as this laptop last knew them)" if any(
            j.unreachable and j.host == name for j in listed.jobs) else ""
        c.print(f"[yellow]{_esc(clean(name))}[/]: {_esc(clean(e))}{known}")
    disk_warnings(jobs)


_TB_VIA = {"job": "the job's python", "host": "the host's PATH", "tools": "gpujob's tools environment"}


def tunnel_ready(info: results.TunnelInfo) -> None:
    what = f"TensorBoard of {info.job_id}" if info.job_id else f"port {info.remote_port} of {info.host}"
    c = console()
    if info.note:
        c.print(f"[yellow]{_t(info.note)}[/]")
    c.print(f"{_t(what)}: [bold]{_t(info.url)}[/]   (Ctrl-C to stop the tunnel)")
    via = (info.tensorboard or {}).get("via")
    if via:
        c.print(f"[dim]served by {_t(via['path'])} ({_t(_TB_VIA.get(via['kind'], via['kind']))})[/]")
    served = (info.tensorboard or {}).get("served")
    if served:  # where under the job it reads (run names start with these)
        c.print(f"[dim]reads the job's {_t(', '.join(map(str, served)))} (and what appears there later)[/]")
    if info.autodl_url:
        c.print(f"AutoDL custom service: {_t(info.autodl_url)}")


def tensorboard_stopped(res: results.TensorBoardStop) -> None:
    print(clean(f"stopped TensorBoard of {res.job_id} (pid {res.pid})" if res.stopped
                else f"TensorBoard of {res.job_id} (pid {res.pid}) did not end: run `gpujob tunnel {res.job_id} --stop` "
                     "again, or end it on the host" if res.running
                else f"no TensorBoard of {res.job_id} was running"))


def plotted(res: results.PlotResult) -> None:
    console().print(f"{_t(res.job_id)}: {_t(', '.join(res.keys))} → {_t(res.path)}")


def stopped(st: results.JobStatus) -> None:
    """The line of ``stop``: the state, and what it could not end (then the command exits non-zero)."""
    import sys

    v = JobView(st.doc)
    took = v.supervisor_unresponsive
    note = f" (ended by the stop command itself: {took})" if took and st.finished else ""
    console().print(_t(f"{st.job_id}: {st.state or None}{note}"))
    pids = clean(", ".join(str(p) for p in st.survivors))
    job = clean(str(st.job_id))
    pending = after_checkpoint_line(v)
    if pending:
        print(f"note: {job} is {clean(pending)}; follow it with gpujob status {job} -w", file=sys.stderr)
    elif not st.finished:
        print(f"error: {job} has not stopped yet ({clean(str(st.state))}; still running: {pids or 'its supervisor'}); "
              f"its grace may not be over: wait longer with gpujob stop {job} --wait SECONDS", file=sys.stderr)
    elif v.cgroup_note and not st.survivors:  # no cgroup here: what "stopped" rests on
        print(f"note: {clean(str(v.cgroup_note))}", file=sys.stderr)
    if st.finished and st.survivors:
        print(f"error: process(es) {pids} of {job} still run after SIGKILL (stuck in the kernel, or another "
              f"user's); see them with: gpujob exec {clean(str(v.host or 'HOST'))} -- "
              f"ps -o pid,stat,user,cmd -p {pids}", file=sys.stderr)


def resumed(res: results.ResumeResult) -> None:
    said = f"{res.job_id}: resumed (was {res.previous})"
    if res.resume_from:
        said += f" from {res.resume_from}"
    elif "resume_from" in res.doc:  # an older agent does not say
        why = "; ".join(str(x) for x in res.incomplete) if isinstance(res.incomplete, list) else ""
        said += "; no complete checkpoint to resume from" + (f" ({why})" if why else "") + \
            ": GPUJOB_RESUME is empty, the script starts from the beginning unless it finds a checkpoint of its own"
    console().print(_t(said))


REFUSED_SHOWN = 20  # names listed one a line; --json has the rest


def pull_warnings(res: results.PullResult) -> None:
    import sys

    for link in res.skipped or []:
        print(f"warning: symlink {clean(str(link))} not kept: it leads outside {res.dest}", file=sys.stderr)
    if res.stray_hint:
        print(f"note: {clean(str(res.stray_hint))}", file=sys.stderr)
    for rel in res.held:
        print(f"warning: {clean(str(rel))} NOT pulled: the job was still writing it (or it changed while read); "
              "run pull again once the job has finished writing it (--write-wait SECONDS waits longer)", file=sys.stderr)
    for rel in res.refused[:REFUSED_SHOWN]:  # repr: the newline or escape in the name is shown, never acted on
        why = (res.refused_why or {}).get(rel) or "a name gpujob does not write here"
        print(f"warning: {repr(clean(str(rel)))} NOT pulled: {clean(str(why))}; the other files arrived "
              "(rename it on the host, gpujob exec HOST -- mv ..., and pull again)", file=sys.stderr)
    if len(res.refused) > REFUSED_SHOWN:
        print(f"warning: {len(res.refused) - REFUSED_SHOWN} more name(s) NOT pulled (--json lists them all)",
              file=sys.stderr)
    if res.note:
        print(f"note: {clean(str(res.note))}", file=sys.stderr)


def pulled(res: results.PullResult) -> None:
    sel = f" ({res.selected})" if res.selected else ""
    left = f", {len(res.held)} left out (being written)" if res.held else ""
    left += f", {len(res.refused)} refused (names)" if res.refused else ""
    console().print(_t(f"{res.job_id}{sel}: {res.files} file(s), {res.bytes / 1e6:.1f} MB fetched, "
                       f"{res.unchanged} already here{left} → {res.dest}"))


def moved(res: results.MoveResult) -> None:
    c = console()
    ck = f" from {res.checkpoint}" if res.checkpoint else " (checkpoint on shared storage)" \
        if res.source == "shared" else " from scratch (no complete checkpoint)"
    c.print(f"[bold]{_t(res.job_id)}[/] moved {_t(res.from_host)} → [cyan]{_t(res.to)}[/] ({_t(res.state)}){_t(ck)}; "
            f"{res.files} file(s), {res.bytes / 1e6:.1f} MB from {res.source}")
    if not res.old_marked:
        c.print(f"  {_esc(res.from_host)} did not answer: the job there is not marked moved; do not resume it there")
    c.print(f"  follow: gpujob tail {_t(res.job_id)} -f")


def guarded(report: results.GuardReport) -> None:
    for o in report.outcomes:
        what = f"moved to {o['move']['to']}" if o["action"] == "moved" else o.get("why") or o.get("state")
        console().print(_esc(f"{o['job_id']}: {what}"))


def note(text: str) -> None:
    """A progress note of a command (move, guard), on stdout as before."""
    console().print(_esc(text))
