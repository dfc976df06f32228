"""``gpujob sweep``: Optuna's samplers and pruners over gpujob jobs.

The laptop drives: it asks Optuna for a trial, submits it as a job (the run line or job file
with the trial's values, through the hosts' GPU queues and placement), reads each running
trial's metric curve with the same ``status`` call as ``gpujob status`` and reports it to
Optuna; a trial Optuna prunes is stopped gracefully (its checkpoint kept). The study lives in
Optuna's RDB storage beside the run ledger (``<state>/sweeps.sqlite``); the ledger links every
trial's run to the sweep. A laptop that closes leaves the trials running; ``sweep resume``
reads the study back and goes on. Optuna is imported only here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, TypedDict, cast

from gpujob.config.ledger import open_ledger
from gpujob.config.ledger.store import LedgerRow
from gpujob.config.spec import load_spec
from gpujob.errors import ConnectError, GpujobError, JobNotFound, SpecError
from gpujob.jsontypes import JSONObject
from gpujob.transport.jobview import JobView
from gpujob.usecases.experiments.rerun import split_sets
from gpujob.usecases.experiments.sweepspec import Space, SweepSpec, parse
from gpujob.usecases.lab.storage import laptop_id, local_url, open_storage, remember, shared, storage_of


class Used(TypedDict):
    """What a sweep's trials have used so far (every laptop's, of a shared study): the budget's measure."""

    cost: float | None  # None: no trial priced yet
    currency: str | None
    gpu_hours: float
    steps: int


class Spent(Used):
    """``Used``, and each trial's price (what the shares of the budget are reckoned from)."""

    price_per_hour: dict[str, float | None]  # job id -> its host's price


class Trial(TypedDict):
    """One trial as the sweep's report lists it."""

    number: int
    job_id: str | None
    host: str | None
    state: str  # _trial_state's word
    job_state: str | None
    value: float | None
    params: JSONObject
    steps: int | None
    stop: str | None
    cost: float | None


class SweepDoc(TypedDict, total=False):
    """``sweep`` / ``sweep status``: the study and the ledger, as ``report`` reads them (``shutdown``: the
    driver's, after the sweep)."""

    sweep: str
    state: str
    metric: str | None
    direction: str
    trials: list[Trial]
    best: Trial | None
    spent: Used
    ended: str | None
    budget: float | None
    max_gpu_hours: float | None
    shutdown: dict[str, str]  # after: shutdown: host -> what its shutdown did


class Joining(TypedDict):
    """This laptop's part of a study another laptop began (``Driver``'s ``mine``)."""

    job_file: str
    set: list[str]
    hosts: str | None


class Runner(Protocol):
    """How the sweep reaches jobs (the API's client gives it: submit, status, stop)."""

    def submit(self, job_file: str, sets: list[str], hosts: str | None, link: dict[str, Any]) -> tuple[str, str]:
        """Submit; (job id, host)."""

    def status(self, job_id: str, host: str | None) -> JSONObject:
        """``status --json`` of the job (the ledger updated on the way)."""

    def stop(self, job_id: str, host: str | None) -> None:
        """Ask the job to stop, without waiting."""

    def shutdown(self, host: str) -> str:
        """Run the host's shutdown command unless a job still runs or waits there; what happened."""


Note = Callable[[str], None]
FINAL = ("succeeded", "failed", "stopped", "autostopped", "lost", "moved")
STOP_GUESS_S = 5.0  # how long a graceful stop takes (request to end), until one was seen


class NoTrialRan(GpujobError):
    """Every trial of the sweep failed to be submitted (a host that answers but refuses): exit 1."""

    exit_code = 1



UNMARKED_GRACE_S = 300.0  # a trial asked for and never marked by its laptop this long: its driver died in between


def _unmarked_too_long(ft: Any) -> bool:
    """A running trial no laptop has marked as its own: another driver's, just asked for (its mark is
    the next write), unless it has stayed unmarked so long that its driver must have gone."""
    started = getattr(ft, "datetime_start", None)
    return started is None or (datetime.now() - started).total_seconds() > UNMARKED_GRACE_S


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise GpujobError("gpujob sweep needs Optuna, which is not installed here",
                          "pip install 'gpujob[sweep]' (from a checkout: pip install -e '.[sweep]')") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings

    # e.g. a trial followed again after a resume is Optuna's "experimental" Trial(study, id): not the user's business
    warnings.filterwarnings("ignore", module=r"optuna(\.|$)")
    return optuna


def storage_url() -> str:
    return local_url()


def _storage(optuna: Any, url: str | None = None) -> Any:
    return open_storage(optuna, url)


def _sampler(optuna: Any, s: SweepSpec) -> Any:
    if s.method == "grid":
        return optuna.samplers.GridSampler(s.params, seed=s.seed)
    if s.method == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    return optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=max(2, s.startup_trials))


def _pruner(optuna: Any, s: SweepSpec) -> Any:
    if s.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=s.startup_trials, n_warmup_steps=s.warmup_steps)
    if s.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, s.warmup_steps) if s.warmup_steps else "auto")
    return optuna.pruners.NopPruner()


def _suggest(trial: Any, space: Space) -> JSONObject:
    out = {}
    for k, v in space.items():
        if isinstance(v, list):
            out[k] = trial.suggest_categorical(k, v)
        elif v.get("int"):
            out[k] = trial.suggest_int(k, int(v["low"]), int(v["high"]), log=bool(v.get("log")), step=int(v.get("step", 1)))
        else:
            out[k] = trial.suggest_float(k, float(v["low"]), float(v["high"]), log=bool(v.get("log")),
                                         step=v.get("step"))
    return out


def load_study(optuna: Any, name: str, url: str | None = None) -> Any:
    try:
        return optuna.load_study(study_name=name, storage=_storage(optuna, url))
    except KeyError:
        where = "on this laptop" if not shared(url) else "in that storage"
        raise GpujobError(f"no sweep {name!r} {where}", "gpujob runs --json lists the runs with their sweep"
                          " (a shared sweep: --storage URL)") from None


class Driver:
    """One sweep being driven: its study, its spec, the trials running and what they reported."""

    def __init__(self, client: Runner, study: Any, note: Note, mine: Joining | None = None) -> None:
        """``mine``: this laptop's job_file, set and hosts when it joins a study another laptop began."""
        from gpujob.usecases.experiments.record import exact_cost

        self.client, self.study, self.note = client, study, note
        self.optuna = import_optuna()
        exact_cost()  # the budget is counted from the ledger: every poll writes the trials' cost
        a = {**study.user_attrs, **(mine or {})}
        self.name: str = study.study_name
        self.spec = parse(a["sweep"], a["job_file"])
        self.job_file: str = a["job_file"]
        self.sets: list[str] = a.get("set", [])
        self.hosts: str | None = a.get("hosts")
        self.laptop = laptop_id()
        self.running: dict[int, tuple[Any, str, str]] = {}  # number -> (trial, job_id, host)
        self.stopping: dict[int, float] = {}  # number -> when the stop was asked
        self.stop_s = STOP_GUESS_S
        self.read_at: dict[int, float] = {}  # number -> when its status (the cost the ledger holds) was read
        self.checked: float | None = None  # when over() last looked
        self.round_s = poll_s()  # seconds between two looks (a loaded laptop's rounds outlast the poll's sleep)
        self.ended: str | None = None
        self.caps: dict[int, float] = {}  # number -> the most that trial may spend (its agent stops it there)
        self.hour_caps: dict[int, float] = {}  # number -> the GPU-hours it may use
        self.unsent: list[GpujobError] = []  # why each trial this drive asked for was not submitted

    # ---- trials ------------------------------------------------------------------------------
    def reattach(self) -> None:
        """Trials left running by a driver that went away: followed again, or failed when never submitted."""
        TS = self.optuna.trial.TrialState
        for ft in self.study.get_trials(deepcopy=False, states=(TS.RUNNING,)):
            owner = ft.user_attrs.get("laptop")
            if owner is None and not _unmarked_too_long(ft):
                continue  # just asked for by a driver that has not marked it yet (its own write comes next)
            if (owner or self.laptop) != self.laptop:
                continue  # another laptop's trial in a shared study: that laptop follows it
            job_id = ft.user_attrs.get("job_id")
            if not job_id:
                self.tell(ft.number, state=TS.FAIL)
                continue
            trial = self.optuna.trial.Trial(self.study, ft._trial_id)
            self.running[ft.number] = (trial, job_id, ft.user_attrs.get("host") or "")
            if ft.user_attrs.get("cap") is not None:
                self.caps[ft.number] = float(ft.user_attrs["cap"])
            if ft.user_attrs.get("hour_cap") is not None:
                self.hour_caps[ft.number] = float(ft.user_attrs["hour_cap"])
            if ft.user_attrs.get("stop"):
                self.stopping[ft.number] = time.monotonic()

    def share(self, limit: float | None, column: Literal["cost", "gpu_hours"], caps: dict[int, float]) -> float | None:
        """The most a new trial may use of ``limit`` (``column``: cost or gpu_hours): what is left after
        the ended trials' use and the running trials' shares, split among the places free. Each
        trial's agent holds it to its share (``autostop``), so the limit holds while no laptop drives."""
        if limit is None:
            return None
        live = {jid: n for n, (_, jid, _) in self.running.items()}
        ended = sum(v.get(column) or 0.0 for jid, v in self.uses().items() if jid not in live)
        reserved = sum(caps.get(n, 0.0) for n in live.values())
        return (limit - ended - reserved) / max(1, self.spec.parallel - len(self.running))

    def launch(self) -> bool | None:
        """Start one trial; False when the budget or the GPU-hours have no share left for one, None when
        the study has its trials already (a shared study: other laptops asked for them)."""
        cap = self.share(self.spec.budget, "cost", self.caps)
        hours = self.share(self.spec.max_gpu_hours, "gpu_hours", self.hour_caps)
        budget, max_hours = self.spec.budget, self.spec.max_gpu_hours  # a share is None without its limit
        if (cap is not None and budget is not None and cap <= budget * 0.01) or (
                hours is not None and max_hours is not None and hours <= max_hours * 0.01):
            return False
        trial = self.study.ask()
        trial.set_user_attr("laptop", self.laptop)
        if trial.number >= self.spec.trials:  # the storage numbers trials in order: laptops racing for the last one
            trial.set_user_attr("surplus", True)
            self.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            return None
        values = _suggest(trial, self.spec.params)
        spec0 = load_spec(self.job_file, self.sets)
        sets = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items()]  # text as is
        run_line, overrides = split_sets(spec0.run, sets)
        extra = ["notify={}"]  # one notification for the sweep, at its end; none per trial
        if (spec0.autostop or {}).get("after") == "shutdown":
            extra.append("autostop.after=none")  # the sweep powers the hosts off after its last trial, not each trial
        if run_line != spec0.run:
            extra.append("run=" + json.dumps(run_line))
        if cap is not None:
            extra.append(f"autostop.budget={cap:.6f}")
            trial.set_user_attr("cap", cap)
            self.caps[trial.number] = cap
        if hours is not None:  # GPU-hours are wall hours times the trial's GPUs
            gpus = spec0.gpus if isinstance(spec0.gpus, int) and spec0.gpus > 0 else 1
            extra.append(f"autostop.max_runtime={max(1, int(hours * 3600 / gpus))}")
            trial.set_user_attr("hour_cap", hours)
            self.hour_caps[trial.number] = hours
        try:
            job_id, host = self.client.submit(self.job_file, self.sets + overrides + extra, self.hosts,
                                              {"sweep": self.name, "trial": trial.number})
        except SpecError:  # the job file with these values is wrong: every trial would be
            self.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            raise
        except GpujobError as e:  # a host away or busy: this trial failed, the sweep goes on
            self.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            self.unsent.append(e)
            self.note(f"trial {trial.number}: not submitted ({e.cause})")
            return True
        trial.set_user_attr("job_id", job_id)
        trial.set_user_attr("host", host)
        self.running[trial.number] = (trial, job_id, host)
        self.read_at[trial.number] = time.monotonic()
        self.note(f"trial {trial.number}: {job_id} on {host} with "
                  + ", ".join(f"{k}={v}" for k, v in values.items()))
        return True

    def _metric(self, st: JobView) -> str | None:
        return self.spec.metric or st.loss_key

    def poll(self, number: int) -> None:
        """Report the trial's new points; prune or finish it."""
        TS = self.optuna.trial.TrialState
        trial, job_id, host = self.running[number]
        st = self.client.status(job_id, host or None)
        self.read_at[number] = time.monotonic()
        self.note_use(trial, st)
        view = JobView(st)
        key = self._metric(view)
        pts = [p for p in (view.series or {}).get(key or "", []) if isinstance(p[1], (int, float))]
        attrs = trial.user_attrs
        last = int(attrs.get("steps", -1))
        for i, p in enumerate(pts):
            step = int(p[0]) if isinstance(p[0], (int, float)) else i
            if step > last:
                trial.report(float(p[1]), step)
                last = step
        if last >= 0:
            trial.set_user_attr("steps", last)
        state = view.state
        if state in FINAL:
            self.running.pop(number)
            asked = self.stopping.pop(number, None)
            if asked is not None:
                self.stop_s = max(self.stop_s * 0.5, time.monotonic() - asked)
            why = attrs.get("stop")
            if state == "autostopped" and not why and (number in self.caps or number in self.hour_caps):
                why = "its share of the sweep's limit reached"  # its agent held it there
                trial.set_user_attr("stop", why)
            if why and state != "succeeded":  # pruned, or stopped by the budget: what it reported stays
                self.tell(trial, state=TS.PRUNED)
            elif state == "succeeded" and pts:  # (a stop that came after the last step changes nothing)
                self.tell(trial, float(pts[-1][1]))
            else:
                self.tell(trial, state=TS.FAIL)
            self.note(f"trial {number}: {job_id} {state}" + (f" ({why})" if why and state != "succeeded" else
                                                              " (it had ended on its own when the stop came)" if why else ""))
            return
        if number not in self.stopping and pts and state == "running" and trial.should_prune():
            self.stop(number, "pruned")

    def tell(self, trial: Any, value: float | None = None, state: Any = None) -> None:
        try:
            self.study.tell(trial, value, state=state)
        except self.optuna.exceptions.UpdateFinishedTrialError:  # another driver of a shared study ended it
            number = trial if isinstance(trial, int) else trial.number
            self.note(f"trial {number}: already ended by another driver; its result stands")
        except RuntimeError as e:  # the grid sampler calls study.stop() once the grid is done: the tell is stored
            if "Study.stop" not in str(e):
                raise

    def stop(self, number: int, why: str) -> None:
        """Ask the trial's job to stop (its code checkpoints first); the poll sees it end."""
        trial, job_id, host = self.running[number]
        trial.set_user_attr("stop", why)
        self.stopping[number] = time.monotonic()
        self.client.stop(job_id, host or None)
        self.note(f"trial {number}: {job_id} stopping ({why})")

    # ---- limits ------------------------------------------------------------------------------
    def note_use(self, trial: Any, st: JSONObject) -> None:
        """The trial's cost and GPU-hours in the study too: a shared sweep's budget counts every laptop's."""
        from gpujob.usecases.experiments.record import fields_of

        f = fields_of(st, None)
        for k in ("cost", "gpu_hours", "price_per_hour", "currency", "state"):
            if f.get(k) is not None and trial.user_attrs.get(k) != f[k]:
                trial.set_user_attr(k, f[k])

    def uses(self) -> dict[str, LedgerRow]:
        """job id -> {cost, gpu_hours, price_per_hour, currency} of every trial of the study: this
        laptop's from its ledger, another laptop's from what it noted in the study."""
        return uses(self.study, self.name)

    def spent(self) -> Spent:
        rows = self.uses()
        costs = [c for r in rows.values() if (c := r.get("cost")) is not None]
        TS = self.optuna.trial.TrialState
        steps = sum(max(0, int(t.user_attrs.get("steps", 0))) for t in self.study.get_trials(deepcopy=False)
                    if t.state != TS.WAITING)
        return {"cost": round(sum(costs), 4) if costs else None,
                "currency": next((r.get("currency") for r in rows.values() if r.get("currency")), None),
                "gpu_hours": round(sum(r.get("gpu_hours") or 0.0 for r in rows.values()), 6), "steps": steps,
                "price_per_hour": {j: r.get("price_per_hour") for j, r in rows.items()}}

    def over(self, spent: Spent) -> str | None:
        """Why the sweep must end now: the budget or the GPU-hours would be passed before a stop lands."""
        now = time.monotonic()
        if self.checked is not None:
            self.round_s = max(poll_s(), now - self.checked)
        self.checked = now
        # hours each running trial adds before it has stopped: since its cost was read (a round ago at
        # most), until the next look (a round on), then the stop itself
        ahead = {jid: (now - self.read_at.get(n, now) + self.round_s + self.stop_s) / 3600.0
                 for n, (_, jid, _) in self.running.items()}
        if self.spec.budget is not None and spent["cost"] is not None:
            coming = sum((spent["price_per_hour"].get(j) or 0.0) * h for j, h in ahead.items())
            if spent["cost"] + coming >= self.spec.budget:
                return f"budget {self.spec.budget:g} {spent.get('currency') or ''} reached".replace("  ", " ")
        if self.spec.max_gpu_hours is not None and spent["gpu_hours"] + sum(ahead.values()) >= self.spec.max_gpu_hours:
            return f"max_gpu_hours {self.spec.max_gpu_hours:g} reached"
        return None

    # ---- the loop ----------------------------------------------------------------------------
    def drive(self) -> SweepDoc:
        self.reattach()
        self.note(f"sweep {self.name}: {self.spec.trials} trial(s), {self.spec.parallel} at once"
                  + (f", {len(self.running)} running" if self.running else ""))
        self.study.set_user_attr("state", "running")
        made = len(self.study.get_trials(deepcopy=False))
        while True:
            made = max(made, len(self.study.get_trials(deepcopy=False)))  # a shared study: every laptop's trials
            why = self.ended or self.over(self.spent())
            if why and not self.ended:
                self.ended = why
                self.note(f"sweep {self.name}: {why}; stopping {len(self.running)} trial(s)")
                for n in list(self.running):
                    if n not in self.stopping:
                        self.stop(n, why)
            while not self.ended and len(self.running) < self.spec.parallel and made < self.spec.trials:
                launched = self.launch()
                if launched is None:
                    made = self.spec.trials
                    break
                if not launched:
                    if not self.running:
                        self.ended = "budget reached" if self.spec.budget is not None and (
                            self.share(self.spec.budget, "cost", self.caps) or 0) <= self.spec.budget * 0.01 \
                            else "max_gpu_hours reached"
                    break
                made += 1
            for n in list(self.running):
                try:
                    self.poll(n)
                except JobNotFound as e:  # removed meanwhile (gpujob rm --force): the trial failed
                    self.tell(self.running.pop(n)[0], state=self.optuna.trial.TrialState.FAIL)
                    self.stopping.pop(n, None)
                    self.note(f"trial {n}: {e.cause}")
                except GpujobError as e:  # a link down for a while: the trial runs on, asked again next round
                    self.note(f"trial {n}: {e.cause}; asking again")
            if not self.running and (self.ended or made >= self.spec.trials):
                break
            time.sleep(poll_s())
        ran = sum(1 for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("job_id"))
        if not ran and self.unsent:
            self.nothing_ran()
        told = f"{ran} trial(s) done" if not self.unsent else \
            f"{ran} of {made} trial(s) ran; {len(self.unsent)} not submitted ({self.unsent[-1].cause})"
        self.study.set_user_attr("state", "done")
        self.study.set_user_attr("ended", f"{self.ended}; {told}" if self.ended and self.unsent else self.ended or told)
        doc = report(self.study, self.optuna)
        if (load_spec(self.job_file, self.sets).autostop or {}).get("after") == "shutdown":
            hosts = sorted({h for t in doc["trials"] if (h := t.get("host"))})
            doc["shutdown"] = {h: self.client.shutdown(h) for h in hosts}
            for h, what in doc["shutdown"].items():
                self.note(f"after: shutdown: {h}: {what}")
        notify_end(doc, self.job_file, self.sets)
        return doc


    def nothing_ran(self) -> None:
        """No trial was ever submitted: the sweep failed, saying where and why (never "done")."""
        where = self.hosts or "the default host"
        cause = self.unsent[-1].cause
        why = f"no trial of sweep {self.name} ran: none of its {len(self.unsent)} trial(s) could be submitted " \
              f"to {where} ({cause})"
        self.study.set_user_attr("state", "failed")
        self.study.set_user_attr("ended", why)
        again = f"then start the sweep again: gpujob sweep {self.job_file}" + (f" --hosts {self.hosts}" if self.hosts else "")
        if all(isinstance(e, ConnectError) for e in self.unsent):
            raise ConnectError(why, f"check that {where} is up (gpujob doctor {where.split(',')[0]}), {again}")
        raise NoTrialRan(why, self.unsent[-1].remedy or f"fix that, {again}")


def poll_s() -> float:
    return float(os.environ.get("GPUJOB_SWEEP_POLL", "1"))


def start_sweep(client: Runner, job_file: str, sets: list[str], hosts: str | None, name: str | None,
                note: Note | None, limits: Mapping[str, object]) -> SweepDoc:
    """Create the study from the job file's ``sweep:`` (``limits``: budget, max_gpu_hours, trials, parallel) and drive it.
    With ``sweep.storage`` (shared by the lab) a study of that name that exists is joined: this laptop adds trials."""
    optuna = import_optuna()
    spec0 = load_spec(job_file, sets)
    if not spec0.sweep:
        raise GpujobError(f"{job_file} has no sweep: section", "add sweep: {params: {lr: [1e-4, 1e-3]}, trials: 4} "
                          "(docs/experiments.md)")
    s = parse(spec0.sweep, spec0.source, limits)
    # laptops sharing a storage meet on one name: the job's, unless --name says otherwise
    name = name or (f"{spec0.name}-sweep" if s.storage else f"{spec0.name}-sweep-{time.strftime('%m%d%H%M%S')}")
    mine: Joining = {"job_file": str(Path(job_file).resolve()), "set": sets, "hosts": hosts}
    try:
        study = optuna.create_study(study_name=name, storage=_storage(optuna, s.storage), direction=s.direction,
                                    sampler=_sampler(optuna, s), pruner=_pruner(optuna, s))
    except optuna.exceptions.DuplicatedStudyError:
        if not s.storage:
            raise GpujobError(f"a sweep named {name!r} exists", f"gpujob sweep resume {name}, or another --name") from None
        study = optuna.load_study(study_name=name, storage=_storage(optuna, s.storage), sampler=_sampler(optuna, s),
                                  pruner=_pruner(optuna, s))
        if study.direction.name.lower() != s.direction:
            raise SpecError(f"the shared sweep {name!r} {study.direction.name.lower()}s its metric, this job file "
                            f"{s.direction}s it", "the same sweep: section on every laptop, or another --name") from None
        remember(name, s.storage)
        if note:
            note(f"sweep {name}: joining the shared study ({len(study.trials)} trial(s) so far)")
        return Driver(client, study, note or (lambda s: None), mine).drive()
    remember(name, s.storage)
    merged = {**spec0.sweep, **{k: v for k, v in limits.items() if v is not None}}
    study.set_user_attr("sweep", merged)
    study.set_user_attr("job_file", str(Path(job_file).resolve()))
    study.set_user_attr("set", sets)
    study.set_user_attr("hosts", hosts)
    study.set_user_attr("started_at", time.time())
    return Driver(client, study, note or (lambda s: None)).drive()


def resume_sweep(client: Runner, name: str, note: Note | None, storage: str | None = None) -> SweepDoc:
    optuna = import_optuna()
    url = storage_of(name, storage)
    study = load_study(optuna, name, url)
    a = study.user_attrs
    s = parse(a["sweep"], a["job_file"])
    # samplers and pruners are not stored by Optuna: the study is loaded with the ones it began with
    study = optuna.load_study(study_name=name, storage=_storage(optuna, url), sampler=_sampler(optuna, s),
                              pruner=_pruner(optuna, s))
    return Driver(client, study, note or (lambda s: None)).drive()


def sweep_status(name: str, storage: str | None = None) -> SweepDoc:
    optuna = import_optuna()
    return report(load_study(optuna, name, storage_of(name, storage)), optuna)


def uses(study: Any, name: str) -> dict[str, LedgerRow]:
    """job id -> {cost, gpu_hours, price_per_hour, currency, state} of every trial that was submitted:
    from this laptop's ledger where it has the run, else from what the trial's laptop noted in the study."""
    with open_ledger() as lg:
        rows = {r["job_id"]: r for r in lg.all(sweep=name)}
    out: dict[str, LedgerRow] = {}
    for t in study.get_trials(deepcopy=False):
        jid, noted = t.user_attrs.get("job_id"), t.user_attrs
        if jid:
            out[jid] = rows.get(jid) or LedgerRow(cost=noted.get("cost"), gpu_hours=noted.get("gpu_hours"),
                                                  price_per_hour=noted.get("price_per_hour"),
                                                  currency=noted.get("currency"), state=noted.get("state"))
    for jid, r in rows.items():  # a run of this sweep the study does not name (never reported back)
        out.setdefault(jid, r)
    return out


def report(study: Any, optuna: Any) -> SweepDoc:
    """{sweep, state, metric, direction, trials: [...], best, spent, ended} from the study and the ledger."""
    rows = uses(study, study.study_name)
    a = study.user_attrs
    trials: list[Trial] = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("surplus"):
            continue  # asked for by a laptop after the study had its trials: never submitted
        jid, stop = t.user_attrs.get("job_id"), t.user_attrs.get("stop")
        row = rows.get(jid or "", {})
        trials.append({"number": t.number, "job_id": jid, "host": t.user_attrs.get("host"),
                       "state": _trial_state(t.state.name, stop), "job_state": row.get("state"), "value": t.value,
                       "params": t.params, "steps": t.user_attrs.get("steps"), "stop": stop, "cost": row.get("cost")})
    direction = study.direction.name.lower()
    done = [tr for tr in trials if tr["state"] == "complete" and tr["value"] is not None]
    done.sort(key=lambda tr: cast(float, tr["value"]), reverse=direction == "maximize")  # done: each has a value
    rest = [tr for tr in trials if tr not in done]
    costs = [c for r in rows.values() if (c := r.get("cost")) is not None]
    spent: Used = {"cost": round(sum(costs), 4) if costs else None,
             "currency": next((r.get("currency") for r in rows.values() if r.get("currency")), None),
             "gpu_hours": round(sum(r.get("gpu_hours") or 0.0 for r in rows.values()), 6),
             "steps": sum(max(0, tr["steps"] or 0) for tr in trials)}  # the last step each reported
    s = a.get("sweep") or {}
    return {"sweep": study.study_name, "state": a.get("state", "running"), "metric": s.get("metric") or
            next((r.get("loss_key") for r in rows.values() if r.get("loss_key")), None), "direction": direction,
            "trials": done + rest, "best": done[0] if done else None, "spent": spent, "ended": a.get("ended"),
            "budget": s.get("budget"), "max_gpu_hours": s.get("max_gpu_hours")}


def _trial_state(optuna_state: str, stop: str | None) -> str:
    """complete, pruned, stopped (by the budget), failed, running, stopping."""
    if optuna_state == "RUNNING":
        return "stopping" if stop else "running"
    if optuna_state == "COMPLETE":
        return "complete"
    if optuna_state == "PRUNED":
        return "pruned" if stop in (None, "pruned") else "stopped"
    return {"COMPLETE": "complete", "FAIL": "failed"}.get(optuna_state, optuna_state.lower())


def leaderboard(doc: SweepDoc, n: int = 10) -> list[str]:
    lines = []
    for tr in [t for t in doc["trials"] if t["value"] is not None][:n]:
        params = ", ".join(f"{k}={v}" for k, v in (tr.get("params") or {}).items())
        lines.append(f"#{tr['number']} {tr['state']:<8} {doc.get('metric') or 'value'}={tr['value']:.4g}  {params}")
    return lines


def notify_end(doc: SweepDoc, job_file: str, sets: list[str]) -> None:
    """One notification for the whole sweep (the job file's channels): its leaderboard."""
    try:
        spec = load_spec(job_file, sets)
    except GpujobError:
        return
    if not (spec.notify or {}).get("channels"):
        return
    from gpujob.usecases.notify.send import notify, send_from_laptop
    from gpujob.usecases.secrets.file import secrets_from_env

    best: Trial | dict[str, None] = doc.get("best") or {}
    event = {"event": "succeeded", "job_id": doc["sweep"], "name": f"sweep {doc['sweep']}", "host": None,
             "duration_s": None, "cost": doc["spent"].get("cost"), "currency": doc["spent"].get("currency"),
             "reason": doc.get("ended"), "metrics": {**(best.get("params") or {}),
                                                     **({doc.get("metric") or "value": best["value"]} if best else {})},
             "log_tail": leaderboard(doc)}
    try:
        send_from_laptop(spec.notify, event, secrets_from_env(notify.secret_names(spec.notify)))
    except (GpujobError, OSError) as e:
        print(f"gpujob: the sweep's notification was not sent ({e})", file=sys.stderr)
