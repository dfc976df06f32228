"""The status document a reader gets (``gpujob status``, each row of ``ls``, the dashboard), declared
once: every field's name, its kind, whether ``ls`` rows carry it or only ``status JOB``'s detail, and
what it means. The agent's ``describe`` (remote/view/status.py) writes it; the laptop's reply check
(gpujob/transport/replies.py), its result classes (gpujob/api/results/jobs.py) and its views read
their fields from here (``gpujob.bundle.import_remote("view.statusdoc")``). Standard library only.

Every field may be absent or null: a record of an older agent, a job that has not got that far."""

from typing import Any, Dict, List, Mapping, NamedTuple, Tuple

# a field's kind, and the JSON values of it (a bool is a flag, never a number)
TEXT, INTEGER, NUMBER, FLAG, OBJECT, LIST = "text", "integer", "number", "flag", "object", "list"
KINDS = (TEXT, INTEGER, NUMBER, FLAG, OBJECT, LIST)


class Field(NamedTuple):
    name: str
    kind: str
    ls: bool  # every row of ``ls`` carries it; False: only ``status JOB`` (``describe(detail=True)``, ``watch``)
    meaning: str


def _f(name: str, kind: str, ls: bool, meaning: str) -> Field:
    return Field(name, kind, ls, meaning)


LS, DETAIL = True, False

FIELDS = (
    # the job record (status.json), as the record's writers keep it
    _f("job_id", TEXT, LS, "the job's id: its folder's name"),
    _f("name", TEXT, LS, "the job file's name:"),
    _f("project", TEXT, LS, "the project folder the job's code came from"),
    _f("host", TEXT, LS, "the host it runs on, as the laptop names it"),
    _f("state", TEXT, LS, "queued, pending (Slurm's queue), running, restarting, requeued or an end "
       "(core/protocol.py TERMINAL)"),
    _f("reason", TEXT, LS, "why it is in its state (a failure, a stop, an autostop)"),
    _f("remedy", TEXT, LS, "what to do about a job that never started"),
    _f("lost_reason", TEXT, LS, "why the agent judged the job lost"),
    _f("attempt", INTEGER, LS, "the attempt now or last run (restarts count)"),
    _f("attempts", LIST, LS, "one object per attempt: its number and start"),
    _f("restart_base", INTEGER, LS, "the attempt a resume started counting from"),
    _f("exit_code", INTEGER, LS, "the run command's exit code"),
    _f("submitted_at", NUMBER, LS, "epoch seconds of the submit"),
    _f("started_at", NUMBER, LS, "epoch seconds of the first attempt's start"),
    _f("ended_at", NUMBER, LS, "epoch seconds of its end"),
    _f("resumed_at", NUMBER, LS, "epoch seconds of the last resume"),
    _f("next_attempt_at", NUMBER, LS, "when a restarting job's next attempt starts"),
    _f("heartbeat", NUMBER, LS, "the supervisor's last sign of life, epoch seconds"),
    _f("supervisor_pid", INTEGER, LS, "the supervisor's process"),
    _f("child_pid", INTEGER, LS, "the run command's process, while it runs"),
    _f("boot_id", TEXT, LS, "the boot the supervisor ran in (a reboot loses the job)"),
    _f("agent", TEXT, LS, "the agent version that supervises it"),
    _f("cgroup", TEXT, LS, "the job's cgroup, where one was made"),
    _f("cuda_visible_devices", TEXT, LS, "the GPUs given to the job"),
    _f("gpus_held", FLAG, LS, "it holds its GPUs"),
    _f("waiting_for_gpus", FLAG, LS, "queued until GPUs are free"),
    _f("queue_reason", TEXT, LS, "why it waits for GPUs"),
    _f("batch_divisor", INTEGER, LS, "how far an OOM retry divided the batch"),
    _f("stray_noted", FLAG, LS, "checkpoints outside ckpt/ were noted once"),
    _f("stopping", TEXT, LS, "a stop asked for, and why"),
    _f("killed", LIST, LS, "the pids a stop had to SIGKILL"),
    _f("survivors", LIST, LS, "the job's pids still running after a stop"),
    _f("supervisor_unresponsive", TEXT, LS, "why the stop command ended the job itself"),
    _f("cgroup_note", TEXT, LS, "what a stop's certainty rests on without a cgroup"),
    _f("gpu_error", TEXT, LS, "a new ECC/Xid error during the run"),
    _f("kept_copy", TEXT, LS, "the kept copy of a save in place was given up"),
    _f("restored", TEXT, LS, "a save in place cut short: its kept copy was put back"),
    _f("moves", LIST, LS, "the moves that brought the job here"),
    _f("moved_to", TEXT, LS, "the host a moved job went to"),
    _f("diagnosis", OBJECT, LS, "the failure's cause, where and remedy"),
    # what describe adds for every reader
    _f("supervisor_note", TEXT, LS, "its supervisor lives but is silent"),
    _f("slurm_job", TEXT, LS, "a Slurm host's job: its Slurm job id (the same through requeues)"),
    _f("slurm_nodes", TEXT, LS, "the node(s) its supervisor last ran on (Slurm's names)"),
    _f("requeues", INTEGER, LS, "how many times Slurm started it again (preemption, requeue, time limit)"),
    _f("slurm", OBJECT, LS, "what Slurm says now: {job, state, reason, expected_start, nodes} or {job, error}"),
    _f("log_size", INTEGER, LS, "bytes of output.log"),
    _f("disk", OBJECT, LS, "the instance's disk is (nearly) full: free space and advice"),
    _f("last_metrics", OBJECT, LS, "the newest value of each metric of this attempt"),
    _f("metrics_source", TEXT, LS, "where metrics came from: metrics file, tensorboard or log"),
    _f("last_line", TEXT, LS, "the log's last line (200 characters)"),
    _f("gpu_now", OBJECT, LS, "the newest GPU sample of a running job"),
    _f("mirror", OBJECT, LS, "the supervisor's mirror thread: what it copied and when"),
    _f("now", NUMBER, LS, "the agent's clock when it answered"),
    _f("queue_position", INTEGER, LS, "its place in the GPU queue"),
    _f("billing", OBJECT, LS, "cost so far and projected, with the price and currency"),
    _f("stop_after_checkpoint", OBJECT, LS, "a stop pending until the next checkpoint"),
    # only with detail (``status JOB``)
    _f("spec", OBJECT, DETAIL, "the job's spec as submitted (without host_env)"),
    _f("hparams", OBJECT, DETAIL, "the hyperparameters the training code reported"),
    _f("log_tail", LIST, DETAIL, "the log's last lines of a failed job"),
    _f("checkpoints", LIST, DETAIL, "every checkpoint, complete or not, oldest first"),
    _f("stray_checkpoints", OBJECT, DETAIL, "checkpoints where gpujob does not look, and advice"),
    _f("artifacts", LIST, DETAIL, "files the job wrote beside its checkpoints"),
    # the figures the laptop adds from ``watch`` (gpujob/usecases/watch.py status_doc) and a stop or wait
    _f("latest_metrics", OBJECT, DETAIL, "the newest value of each metric, the progress bar's step included"),
    _f("series", OBJECT, DETAIL, "each metric's history: [step, value, t] points"),
    _f("loss_key", TEXT, DETAIL, "the metric shown as the loss"),
    _f("eval_metrics", OBJECT, DETAIL, "the newest eval metrics"),
    _f("gpu", OBJECT, DETAIL, "GPU samples: the newest and per-GPU averages"),
    _f("steps_per_s", NUMBER, DETAIL, "the training rate"),
    _f("max_steps", INTEGER, DETAIL, "the total steps, known or estimated"),
    _f("eta_s", NUMBER, DETAIL, "seconds until the last step"),
    _f("elapsed_s", NUMBER, DETAIL, "seconds it has run"),
    _f("cost", NUMBER, DETAIL, "cost accrued so far"),
    _f("nodes", LIST, DETAIL, "a multi-node job: one status per node"),
    _f("price_per_hour", NUMBER, LS, "the host's price, filled in by the laptop for a job submitted without one"),
    _f("projected_cost", NUMBER, LS, "an older agent's projected cost (now under billing)"),
    _f("instance", TEXT, LS, "the instance's id (its root's), which the laptop adds to each ls row it lists"),
    _f("currency", TEXT, LS, "an older agent's currency (now under billing)"),
    _f("unreachable", TEXT, LS, "the laptop's: its host did not answer (the error); the row is what it last knew"),
    _f("last_seen", NUMBER, LS, "the laptop's, on an unreachable row: when it last saw the job so (epoch s)"),
)

BY_NAME: Dict[str, Field] = {f.name: f for f in FIELDS}

# ``watch`` (``status JOB``, the dashboard's job page): the detail above as ``job``, and the figures beside it
WATCH = (
    _f("job", OBJECT, DETAIL, "the job's status, with detail"),
    _f("series", OBJECT, DETAIL, "each metric's history, down-sampled"),
    _f("latest", OBJECT, DETAIL, "the newest value of each metric of this attempt"),
    _f("rows", INTEGER, DETAIL, "metric records read"),
    _f("source", TEXT, DETAIL, "where metrics came from"),
    _f("progress", OBJECT, DETAIL, "the progress bar's step, total and rate"),
    _f("rate", NUMBER, DETAIL, "steps per second"),
    _f("gpu", OBJECT, DETAIL, "GPU samples: the newest and per-GPU averages"),
    _f("now", NUMBER, DETAIL, "the agent's clock when it answered"),
)


# ``billing`` (remote/view/cost.py estimate): the figures ls, status and cost compute with
BILLING = (
    _f("currency", TEXT, LS, "the price's currency"),
    _f("cost", NUMBER, LS, "cost so far"),
    _f("projected_cost", NUMBER, LS, "cost at the last step"),
    _f("elapsed_s", NUMBER, LS, "seconds billed so far"),
    _f("eta_s", NUMBER, LS, "seconds until the last step"),
    _f("price_per_hour", NUMBER, LS, "the price billing used"),
    _f("max_steps", NUMBER, LS, "the total steps"),
    _f("steps_per_s", NUMBER, LS, "the training rate"),
    _f("progress", NUMBER, LS, "the fraction done"),
)

# ``watch``'s ``progress``: the progress bar's newest reading
PROGRESS = (
    _f("step", NUMBER, DETAIL, "the bar's step"),
    _f("total", NUMBER, DETAIL, "the bar's total"),
    _f("rate", NUMBER, DETAIL, "the bar's rate"),
    _f("t", NUMBER, DETAIL, "when the bar was read"),
)


def of_kind(value: Any, kind: str) -> bool:
    """Whether ``value`` (not null) is a JSON value of ``kind``."""
    if kind == TEXT:
        return isinstance(value, str)
    if kind == FLAG:
        return isinstance(value, bool)
    if kind == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {OBJECT: dict, LIST: list}[kind])


def named(kind: str, fields: Tuple[Field, ...] = FIELDS) -> Tuple[str, ...]:
    """The names of ``fields`` of ``kind``, in their declared order."""
    return tuple(f.name for f in fields if f.kind == kind)


def undeclared(doc: Mapping[str, object], fields: Tuple[Field, ...] = FIELDS) -> List[str]:
    """What in ``doc`` is not as declared: a key not declared, a value not of its kind (null is every kind's)."""
    known = {f.name: f for f in fields}
    wrong = []  # type: List[str]
    for key, value in doc.items():
        f = known.get(key)
        if f is None:
            wrong.append("{!r} is not declared".format(key))
        elif value is not None and not of_kind(value, f.kind):
            wrong.append("{!r} is {} where {} is declared".format(key, type(value).__name__, f.kind))
    return wrong
