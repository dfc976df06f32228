"""The argument parser: every command, its flags and its handler; shell completion is drawn from it."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, NoReturn

from gpujob.cli.args import PORT, PRICE, address_type, job_ref, number_type, regex_type, table_flags, url_type
from gpujob.cli.common import Handler
from gpujob.cli.dashboard import cmd_ui
from gpujob.cli.experiments import add_parsers as add_experiment_parsers
from gpujob.cli.hosts import (
    cmd_agent_log,
    cmd_doctor,
    cmd_host_add,
    cmd_host_disconnect,
    cmd_host_ls,
    cmd_host_off,
    cmd_host_on,
    cmd_host_rekey,
    cmd_host_rm,
    cmd_host_set,
    cmd_host_state,
    cmd_host_trust,
    cmd_notify_test,
    cmd_ssh,
)
from gpujob.cli.jobs import (
    STOP_WAIT,
    cmd_cost,
    cmd_exec,
    cmd_guard,
    cmd_ls,
    cmd_move,
    cmd_plot,
    cmd_pull,
    cmd_resume,
    cmd_status,
    cmd_stop,
    cmd_submit,
    cmd_tail,
    cmd_tunnel,
)
from gpujob.cli.tools import cmd_data_check, cmd_gc, cmd_init, cmd_rm
from gpujob.errors import GpujobError
from gpujob.usecases.jobs.stoppolicy import AFTER_CHECKPOINT_WAIT
from gpujob.version import __version__


# ---- parser ------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse with a usage error in two lines (the cause, then where the usage is), not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_did_you_mean(message)}\n  → {self.prog} --help shows the usage\n")


def _did_you_mean(message: str) -> str:
    """argparse's "invalid choice: 'statsu' (choose from ...)" with the choice meant, when one is close."""
    import re

    m = re.search(r"invalid choice: '?([^'(]*?)'? \(choose from (.*)\)$", message)
    if not m:
        return message
    import difflib

    choices = [c.strip().strip("'") for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
    if message.startswith("argument COMMAND:"):  # the 28 names are what --help lists, by task
        message = f"unknown command {m.group(1)!r}"
    return f"{message}; did you mean {close[0]!r}?" if close else message


# ``gpujob --help`` lists the commands by what a user is doing, not in one list of 28
COMMAND_GROUPS = (
    ("start a job", ("init", "data", "submit")),
    ("watch it", ("ls", "status", "tail", "plot", "tunnel", "ui", "cost", "budget")),
    ("act on it", ("stop", "resume", "move", "guard", "pull", "exec", "rm")),
    ("compare and search (the run ledger)", ("runs", "compare", "rerun", "sweep")),
    ("hosts", ("host", "pool", "doctor", "ssh", "gc", "agent-log")),
    ("setup", ("notify", "completion")),
)


class TopParser(Parser):
    """The top-level parser: its help lists the commands in ``COMMAND_GROUPS`` (any other under "more")."""

    def format_help(self) -> str:
        fmt = self._get_formatter()
        fmt.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        fmt.add_text(self.description)
        sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
        by_name = {a.dest: a for a in sub._choices_actions}
        groups = [(title, [by_name.pop(n) for n in names if n in by_name]) for title, names in COMMAND_GROUPS]
        for title, actions in groups + [("more", list(by_name.values()))]:
            if actions:
                fmt.start_section(title)
                fmt.add_arguments(actions)
                fmt.end_section()
        fmt.start_section("options")
        fmt.add_arguments([a for a in self._actions if a.option_strings])
        fmt.end_section()
        fmt.add_text(self.epilog)
        return fmt.format_help()


# what an argument given no help of its own means, by its name
JOB_HELP = "a job id, a unique prefix of it, its random suffix, or its name (the newest job of that name)"
DEFAULT_HELP = {
    "job": JOB_HELP, "jobs": JOB_HELP, "run": "a run of the ledger: " + JOB_HELP, "runs": "runs of the ledger: " + JOB_HELP,
    "host": "host profile (gpujob host ls lists them)",
    "--host": "the job's host (default: where it was submitted; picks one when JOB matches jobs on several hosts)",
    "name": "host profile name", "-f": "follow the log until the job ends, then exit with its outcome (docs/cli.md)",
    "dest": "the folder it goes to (default gpujob-pulls); the job's files land in DEST/JOB_ID",
    "dir": "the folder to write to (default: this one)", "file": "a jsonl file", "shell": "bash, zsh or fish",
    "--text-field": "the field holding the text (default text)",
    "--label-field": "the field holding the label, checked too when given",
    "--preset": "the platform's defaults (data disk, shutdown command); default: what the instance says it is",
    "--ssh": 'a new login line, e.g. "ssh -p NEWPORT root@connect.westb.seetacloud.com" (tried before it is saved)',
    "--root": "gpujob's folder on the instance (default: on the preset's data disk)",
    "--price": "price per hour, for cost tracking", "--identity": "an existing private key to use instead of gpujob's own",
    "--shutdown-command": "what after: shutdown and --idle-shutdown run on the instance (default: the preset's)",
    "--tensorboard-port": "the instance's port for TensorBoard (AutoDL's custom service: 6006)",
}


def _fill_help(p: argparse.ArgumentParser) -> None:
    """Every argument of every command gets a help line (DEFAULT_HELP where it has none of its own)."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sp in a.choices.values():
                _fill_help(sp)
        else:
            if a.help is None:
                a.help = DEFAULT_HELP.get(a.option_strings[0] if a.option_strings else a.dest)
            if not a.option_strings and a.metavar is None:  # JOB, as the help texts write it, not job
                a.metavar = a.dest.upper().rstrip("S") if a.dest in ("jobs", "runs") else a.dest.upper()


class _Unbuilt:
    """The parser of a command this run does not parse (``build_parser(only=...)``): every call on
    it (add_argument, a group, nested subcommands) is taken and dropped."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return lambda *a, **kw: self


class _OnlySub:
    """The top-level subcommands, of which only ``only`` (every one when None) is built: a
    command's process needs its own parser, and building the other forty was a tenth of a
    ``status``'s CPU before it reached the host (argparse's parser and argument objects)."""

    def __init__(self, real: Any, only: str | None) -> None:
        self.real, self.only, self.built = real, only, False

    def add_parser(self, name: str, **kw: Any) -> Any:
        if self.only is not None and name != self.only:
            return _Unbuilt()
        self.built = True
        return self.real.add_parser(name, **kw)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only`` (the command a process was given), that command's
    parser alone (a name that is no command, e.g. a typo, gets the whole one and its suggestion)."""
    p = TopParser(
        prog="gpujob", description="Run training jobs on rented GPU instances over SSH (or on this machine: host 'local').",
        epilog="gpujob COMMAND --help shows a command's options; every command takes --json (docs/json.md); "
               "exit codes: docs/cli.md. A first job: gpujob init DIR, then gpujob submit DIR/job.yaml --follow")
    p.add_argument("--version", action="version", version=f"gpujob {__version__}")
    sub = _OnlySub(p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser), only)

    def add(name: str, fn: Handler, help: str, parent: Any = sub) -> argparse.ArgumentParser:
        sp = parent.add_parser(name, help=help, description=help)
        sp.set_defaults(fn=fn)
        sp.add_argument("--json", action="store_true", help="print JSON (schema: docs/json.md)")
        return sp

    s = add("submit", cmd_submit, "sync code and data, start the job under the agent")
    s.add_argument("job_file", nargs="?", help="job YAML (default ./job.yaml)")
    s.add_argument("--host", help="host profile, or a,b,c: the first that answers with the GPUs free "
                   "(default: the job's host:, else local)")
    s.add_argument("--wait-gpus", nargs="?", const="6h", metavar="DURATION",
                   help="no host has the GPUs free: wait (poll with backoff) up to DURATION (default 6h)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key, e.g. retry.max_restarts=3")
    s.add_argument("-f", "--follow", action="store_true", help="follow the log; Ctrl-C detaches, the job goes on")
    s.add_argument("--force", action="store_true",
                   help="upload a workdir that is the home folder or huge (keys and credentials are still never sent)")
    s.add_argument("--pool", metavar="NAME", help="run on an instance of this pool: a free one, else one made "
                   "(released when the job ends; docs/pools.md)")

    s = add("status", cmd_status, "a job's state, metrics and diagnosis (no JOB: the job list)")
    s.add_argument("job", nargs="?", type=job_ref)
    s.add_argument("--host")
    s.add_argument("-w", "--watch", action="store_true", help="refresh in place (one remote command per refresh)")
    s.add_argument("--interval", type=number_type(float, 0.1, 3600), default=2.0, metavar="SECONDS",
                   help="between refreshes with -w (default 2)")
    s.add_argument("--exit-code", action="store_true",
                   help="exit with the job's outcome: 0 succeeded, 1 failed, 4 stopped, 5 autostopped, 6 lost, "
                        "7 not finished (docs/cli.md)")
    table_flags(s)  # status without JOB is ls
    s = add("ls", cmd_ls, "list jobs (one remote command per host)")
    table_flags(s)
    s.add_argument("--host", help="only this host (default: every host jobs were submitted to from here)")
    s.add_argument("--all", action="store_true", help="every job, not only running ones and the newest 30 finished")
    s.add_argument("-w", "--watch", action="store_true", help="refresh in place, as status -w does")
    s.add_argument("--interval", type=number_type(float, 0.1, 3600), default=2.0, metavar="SECONDS",
                   help="between refreshes with -w (default 2)")
    s = add("tail", cmd_tail, "print a job's output; -f follows and survives sleep and network drops")
    s.add_argument("job", type=job_ref)
    s.add_argument("--host")
    s.add_argument("-f", "--follow", action="store_true")
    s.add_argument("-n", "--lines", type=number_type(int, 0, 10**9), default=20, help="how many last lines (default 20)")
    s.add_argument("--since", help="start at lines written in the last 10m/2h/1d, or since a date (docs/json.md)")
    s.add_argument("--grep", metavar="REGEX", type=regex_type, help="only lines matching REGEX (Python syntax)")
    s.add_argument("--node", type=number_type(int, 0, 1023), help="one node of a job over several (default: all, prefixed)")
    s.add_argument("--raw", action="store_true", help="on a terminal, keep the log's colours and cursor moves "
                   "(OSC/DCS strings such as clipboard writes are always stripped)")
    s = add("stop", cmd_stop, "stop a job (its code may checkpoint first); no process of it remains")
    s.add_argument("job", type=job_ref)
    s.add_argument("--host")
    s.add_argument("--wait", type=number_type(float, 0, 86400), default=None, metavar="SECONDS",
                   help=f"how long to wait for the job to end (default {STOP_WAIT:g}; with --after-checkpoint: --max-wait "
                        f"plus {STOP_WAIT:g}, or {AFTER_CHECKPOINT_WAIT + STOP_WAIT:g} without one); then exit 7 if it has not")
    s.add_argument("--after-checkpoint", action="store_true",
                   help="let the job write its next complete checkpoint first, then stop it at once")
    s.add_argument("--max-wait", metavar="DURATION", help="with --after-checkpoint: stop anyway after this long "
                   "without a new checkpoint (twice the job's usual interval between checkpoints, else 20m)")
    s = add("resume", cmd_resume, "restart a lost, stopped or failed job from its newest complete checkpoint")
    s.add_argument("job", type=job_ref)
    s.add_argument("--host")
    s = add("move", cmd_move, "continue a job on another host from its newest complete checkpoint (same id, history)")
    s.add_argument("job", type=job_ref)
    s.add_argument("--to", required=True, metavar="HOST", help="the host profile it goes on (a,b,c: the first "
                   "with the job's GPUs free)")
    s.add_argument("--job-file", help="the job file (default: the one it was submitted from)")
    s.add_argument("--wait", type=number_type(float, 0, 86400), default=STOP_WAIT, metavar="SECONDS",
                   help=f"how long to wait for it to stop on the old host (default {STOP_WAIT:g})")
    s = add("guard", cmd_guard, "watch jobs; move one whose host stays away longer than its retry.move_after")
    s.add_argument("jobs", nargs="+", metavar="JOB", type=job_ref)
    s.add_argument("--interval", type=number_type(float, 0.1, 86400), default=30.0, metavar="SECONDS",
                   help="between looks (default 30)")
    s.add_argument("--once", action="store_true", help="one look at each job (for cron); the time away adds up")
    s = add("cost", cmd_cost, "what jobs have cost (elapsed x price_per_hour), per job and per host")
    table_flags(s)
    s.add_argument("--host", help="one host (default: every host with jobs)")
    s = add("ui", cmd_ui, "a dashboard in the browser: every job on every host, live curves, compare (needs gpujob[ui])")
    s.add_argument("--port", type=PORT, help="port on 127.0.0.1 (default: a free one, printed)")
    s.add_argument("--host", help="only these hosts (a,b); default every host profile and local")
    s.add_argument("--interval", type=number_type(float, 0.5, 3600), default=3.0, metavar="SECONDS",
                   help="seconds between two looks at a host (default 3; one look per host whatever the tabs)")
    s.add_argument("--open", action="store_true", help="open it in the browser")
    s.add_argument("--pull-dir", default="gpujob-pulls", metavar="DIR",
                   help="where the pull --latest button copies to (default gpujob-pulls)")
    add_experiment_parsers(add, sub)
    s = add("agent-log", cmd_agent_log, "the last lines of the agent's own log on a host (its errors)")
    s.add_argument("host", nargs="?", help="host profile (default local)")
    s.add_argument("-n", "--lines", type=number_type(int, 0, 10**6), default=50, help="how many last lines (default 50)")
    s = add("tunnel", cmd_tunnel, "TensorBoard of a job (or any port of a host) on a local port, until Ctrl-C")
    s.add_argument("target", metavar="JOB|HOST", type=job_ref,
                   help="a job (its TensorBoard), or a host profile (with --remote-port: any port of it)")
    s.add_argument("--host", help="the job's host (default: where it was submitted)")
    s.add_argument("--remote-port", type=PORT, default=6006, metavar="PORT", help="port on the instance (default 6006: TensorBoard)")
    s.add_argument("--local-port", type=PORT, metavar="PORT", help="local port (default: the remote one, or the next free)")
    s.add_argument("--stop", action="store_true", help="stop the TensorBoard that gpujob tunnel started for JOB")
    s.add_argument("--install", action="store_true", help="first pip-install TensorBoard into gpujob's tools environment "
                   "on the host (<root>/tools/tensorboard; the host's pip_index_url and network_turbo apply)")
    s = add("plot", cmd_plot, "draw a job's loss and metric curves to a PNG (needs matplotlib)")
    s.add_argument("job", type=job_ref)
    s.add_argument("-o", "--output", help="the PNG (default JOB.png)")
    s.add_argument("--host")
    s = add("pull", cmd_pull, "copy a job's checkpoints and logs here")
    s.add_argument("job", type=job_ref)
    s.add_argument("dest", nargs="?", default="gpujob-pulls")
    s.add_argument("--host")
    s.add_argument("--write-wait", type=number_type(float, 0, 86400), default=None, metavar="SECONDS",
                   help="how long to wait for a file the job is still writing before leaving it out (default 30)")
    s.add_argument("--from", dest="source", choices=["host", "mirror"], default="host",
                   help="mirror: the newest mirrored complete checkpoint, read from checkpoint.mirror through "
                        "rclone (the instance may be gone; the store's keys from this shell's environment)")
    s.add_argument("--follow", nargs="?", const=30.0, type=float, metavar="SECONDS",
                   help="keep pulling each new complete checkpoint (every SECONDS, default 30) until the job ends; "
                        "a dropped link is waited out, and running it again resumes")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--latest", action="store_true",
                   help="only the newest complete checkpoint of any kind (and the logs, and the files beside the "
                        "checkpoints that are no checkpoint: a final model, results)")
    g.add_argument("--best", nargs="?", const="", metavar="METRIC",
                   help="only the best checkpoint: the runtime's ckpt/best (its best.json), trainer_state.json's "
                        "best_model_checkpoint, or by METRIC "
                        "in the names (val_loss=0.12.ckpt) or the metric history (loss-like names: lowest wins)")
    g.add_argument("--all", action="store_true", help="every checkpoint (the default)")
    s.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="only the job's files matching GLOB, from anywhere in the job folder (code/, tb/, ckpt/, the "
                        "logs): a name at any depth ('*tfevents*'), or a path from the job folder ('tb/', "
                        "'code/outputs/**'); * stays within a name, ** spans folders; repeatable")

    s = add("doctor", cmd_doctor, "check a host in one round trip: Python, torch/CUDA, GPUs, disks, network, agent")
    s.add_argument("host", nargs="?", help="host profile (default local)")
    s.add_argument("--torch-timeout", type=number_type(float, 1, 3600), default=60.0, metavar="SECONDS",
                   help="how long to wait for 'import torch' (default 60)")
    s.add_argument("--job", metavar="JOB_YAML", help="also resolve this job's interpreter (its python: and the "
                   "program its run: starts) exactly as a submit would; ✗ when it would not be found")
    s.add_argument("--bench", action="store_true", help="the preflight (under a minute): matmul TFLOP/s against the "
                   "card's rated figure, memory and host-to-device bandwidth, disk MB/s and inodes, ECC/Xid, "
                   "CUDA/driver/torch; kept in the profile; exit 1 on a warning")

    s = add("exec", cmd_exec, "run a command where a job runs (its node, folder and environment; no command: a "
            "shell there), or on a host as its jobs get it; exits with its code")
    s.add_argument("target", metavar="JOB|HOST", type=job_ref,
                   help="a job (where it runs: a Slurm job's node), or a host profile (a command on the host itself)")
    s.add_argument("--host", help="the job's host (default: where it was submitted)")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD",
                   help="the command (one argument: a shell line); none with a JOB: an interactive shell there")
    s = add("ssh", cmd_ssh, "an interactive shell on a host (OpenSSH with gpujob's key; a Host gpujob-NAME entry "
            "in ~/.ssh/config)")
    s.add_argument("host", metavar="HOST")
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="run this instead of a shell")
    s.add_argument("--print", action="store_true", help="show the ssh command and config entry; run nothing")
    s.add_argument("--ssh-config", metavar="PATH", help="the ssh_config to keep the entry in (default ~/.ssh/config)")
    s = add("rm", cmd_rm, "remove jobs' folders on their hosts and their local index entries (not a running job)")
    s.add_argument("jobs", nargs="+", metavar="JOB", type=job_ref)
    s.add_argument("--host", help="the jobs' host (default: where each was submitted)")
    s.add_argument("--force", action="store_true", help="stop a queued or running job first, then remove it")
    s = add("gc", cmd_gc, "free a host's disk: old finished jobs, unused environments, stale agents and projects")
    s.add_argument("host", nargs="?", help="host profile (default local)")
    s.add_argument("--older-than", default="7d", metavar="DURATION", help="finished (or last used) before this long ago "
                   "(default 7d)")
    s.add_argument("--dry-run", action="store_true", help="list what would go and the bytes it frees; remove nothing")
    s.add_argument("--checkpoints-only", action="store_true", help="of old finished jobs remove the checkpoints only "
                   "(logs and metrics stay)")
    s = add("completion", cmd_completion, "print a shell completion script: eval \"$(gpujob completion bash)\"")
    s.add_argument("shell", nargs="?", choices=["bash", "zsh", "fish"])
    s.add_argument("--words", choices=["hosts", "jobs"], help="print host names or job ids, one a line (what the script calls)")

    if sub.only in (None, "budget"):  # its module reads the budget's settings module: only where it is parsed
        from gpujob.cli.budget import add_parsers as add_budget_parsers

        add_budget_parsers(add, sub)

    what = "notify test JOB_FILE: send a test message to each channel of a job's notify: (docs/notifications.md)"
    np_ = sub.add_parser("notify", help=what, description=what)
    nsub = np_.add_subparsers(dest="notify_command", metavar="ACTION", required=True)
    s = add("test", cmd_notify_test, "send a test message to each notify channel of a job file, from here", nsub)
    s.add_argument("job_file", nargs="?", help="job YAML (default ./job.yaml)")

    s = add("init", cmd_init, "write a job (job.yaml, training script, requirements, sample data) from a template")
    s.add_argument("dir", nargs="?", default=".")
    s.add_argument("-t", "--template", default="causal-lm", help="causal-lm, seq-cls or custom (see --list)")
    s.add_argument("--list", action="store_true", help="describe each template")
    s.add_argument("--force", action="store_true", help="overwrite existing files")
    what = "data check FILE: lint a jsonl file before uploading it"
    dp = sub.add_parser("data", help=what, description=what)
    dsub = dp.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    s = add("check", cmd_data_check, "lint a jsonl file: parse errors, missing fields, empty texts, duplicates, stats", dsub)
    s.add_argument("file")
    s.add_argument("--text-field", default="text")
    s.add_argument("--label-field", default=None)

    what = "host profiles: add (a login line; installs a key), set, ls, rm, trust, on/off/state (power), disconnect"
    hp = sub.add_parser("host", help=what, description=what)
    hsub = hp.add_subparsers(dest="host_command", metavar="ACTION", required=True)
    s = add("add", cmd_host_add, "add a host from its login line (asks the password once, installs a key)", hsub)
    s.add_argument("name")
    s.add_argument("--ssh", required=True, metavar="LINE", help='the login line, e.g. "ssh -p 41234 root@connect.westb.seetacloud.com"')
    s.add_argument("--password-stdin", action="store_true", help="read the password from stdin (never stored)")
    s.add_argument("--root", help="gpujob's folder on the instance")
    s.add_argument("--preset", choices=["generic", "autodl", "vast", "runpod"])
    s.add_argument("--price", type=PRICE, help="price per hour, for cost tracking")
    s.add_argument("--identity", metavar="KEY_FILE", help="an existing private key to use instead of gpujob's own "
                   "(one the instance already accepts: no password asked)")
    s.add_argument("--no-check", action="store_true", help="save without connecting")
    s.add_argument("--force", action="store_true", help="replace an existing profile")
    host_setting_args(s)
    s = add("set", cmd_host_set, "change a host profile (a new login line after a restart)", hsub)
    s.add_argument("name")
    s.add_argument("--ssh", metavar="LINE")
    s.add_argument("--root")
    s.add_argument("--preset", choices=["generic", "autodl", "vast", "runpod"])
    s.add_argument("--price", type=PRICE)
    s.add_argument("--identity", metavar="KEY_FILE")
    s.add_argument("--no-check", action="store_true", help="save a new --ssh line without trying it first")
    host_setting_args(s)
    table_flags(add("ls", cmd_host_ls, "list host profiles", hsub))
    s = add("rm", cmd_host_rm, "remove a host profile", hsub)
    s.add_argument("name")
    s = add("rekey", cmd_host_rekey, "give a profile a new key of its own and take its old (shared) key off the host",
            hsub)
    s.add_argument("name", nargs="?")
    s.add_argument("--all", action="store_true", help="every profile still on gpujob's shared key")
    s = add("trust", cmd_host_trust, "accept a host's new key (after an image change)", hsub)
    s.add_argument("name")
    s = add("on", cmd_host_on, "power a host on with its power.on command; wait until it answers over SSH", hsub)
    s.add_argument("name")
    s.add_argument("--wait", metavar="DURATION", help="retry while the provider has no GPU free (default power.wait, 10m)")
    s = add("off", cmd_host_off, "power a host off with its power.off command (the meter stops); refused while a job "
            "runs or waits there", hsub)
    s.add_argument("name")
    s.add_argument("--force", action="store_true", help="power it off even while jobs run or wait there (each loses "
                   "the steps since its last complete checkpoint: said), or when the host cannot be asked")
    s = add("state", cmd_host_state, "ask a host's power.state command: on, off or pending", hsub)
    s.add_argument("name")
    s = add("disconnect", cmd_host_disconnect, "close the connection kept open to a host between commands", hsub)
    s.add_argument("name")
    add_pool_parsers(sub, add)
    if only is not None and not sub.built:
        return build_parser()
    _fill_help(p)
    return p


def host_setting_args(s: argparse.ArgumentParser) -> None:
    """The settings ``host add`` and ``host set`` both take."""
    s.add_argument("--shutdown-command")
    s.add_argument("--private-address", type=address_type, help="the address other nodes reach this host at (several-node jobs)")
    s.add_argument("--network-turbo", choices=["true", "false", "setup", "run"], help="source /etc/network_turbo (AutoDL)")
    s.add_argument("--hf-endpoint", type=url_type, help="e.g. https://hf-mirror.com ('' clears)")
    s.add_argument("--pip-index-url", type=url_type, help="pip's index for setup ('' clears)")
    s.add_argument("--data-disk", help="the fast data disk (default: the preset's)")
    s.add_argument("--tensorboard-port", type=PORT)
    for verb, what in (("on", "powers the instance on"), ("off", "powers it off"),
                       ("state", "prints its state (running/stopped/...)"),
                       ("address", "prints its login after a power-on (ssh line, host:port or port)")):
        s.add_argument(f"--power-{verb}", metavar="CMD", help=f"a command run here that {what} (docs/power.md; '' clears)")
    s.add_argument("--power-stock-out", metavar="REGEX", help="power.on output meaning 'no GPU free' (default: docs/power.md)")
    s.add_argument("--power-wait", metavar="DURATION", help="retry a power-on refused for lack of GPUs this long (default 10m)")
    s.add_argument("--power-boot-timeout", metavar="DURATION", help="wait this long for a powered-on host to answer "
                   "(default 10m), and for host off to see it off (default 5m)")
    s.add_argument("--idle-shutdown", metavar="DURATION", help="power the instance off after this long with no job "
                   "and no SSH session, e.g. 30m (off: never); a watcher on the instance checks")
    s.add_argument("--released-after", metavar="DURATION", help="the platform releases an instance powered off this "
                   "long and wipes its disk (AutoDL: 15d, the preset's default; off: never; '' the preset's)")
    s.add_argument("--slurm", choices=["true", "false"], nargs="?", const="true",
                   help="the login node of a Slurm cluster: jobs go to Slurm with sbatch (docs/slurm.md)")
    s.add_argument("--partition", help="Slurm: the partition jobs go to ('' clears: the cluster's default)")
    s.add_argument("--account", help="Slurm: the account jobs are charged to ('' clears)")
    s.add_argument("--qos", help="Slurm: the quality of service jobs ask for ('' clears)")


def add_pool_parsers(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    """``gpujob pool add/ls/rm/release`` (docs/pools.md)."""
    from gpujob.cli.pools import cmd_pool_add, cmd_pool_ls, cmd_pool_release, cmd_pool_rm

    what = "pools of instances made on demand with the provider's commands: add, ls, rm, release"
    pp = sub.add_parser("pool", help=what, description=what)
    psub = pp.add_subparsers(dest="pool_command", metavar="ACTION", required=True)
    s = add("add", cmd_pool_add, "save a pool: the commands that make and release its instances", psub)
    s.add_argument("name", help="the pool's name; its instances are named NAME-1, NAME-2, …")
    s.add_argument("--create", required=True, metavar="CMD", help="makes an instance; prints its login line "
                   "(ssh -p PORT user@host, with a line 'id: ID') or JSON {host, port, user, id}")
    s.add_argument("--release", required=True, metavar="CMD", help="releases an instance (its id: last argument "
                   "and GPUJOB_INSTANCE_ID)")
    s.add_argument("--list", metavar="CMD", help="prints the ids of the instances that exist")
    s.add_argument("--stock", metavar="CMD", help="prints 'REGION GPU COUNT' lines: where GPUs are in stock")
    s.add_argument("--identity", metavar="KEY_FILE", help="the key instances accept (default: the pool's own, "
                   "its public line given to create as GPUJOB_PUBLIC_KEY)")
    s.add_argument("--max", type=number_type(int, 1, 10000), help="at most this many instances at once (default 1)")
    s.add_argument("--keep-warm", metavar="DURATION", help="keep an idle instance this long for the next job")
    s.add_argument("--price-per-hour", type=PRICE, help="what an instance costs an hour (ledger and cost)")
    s.add_argument("--currency", help="the price's currency (default CNY)")
    s.add_argument("--region", action="append", help="a region create may use (GPUJOB_REGION), in order; repeat")
    s.add_argument("--gpu", action="append", help="a GPU kind create may use (GPUJOB_GPU), in order; repeat")
    s.add_argument("--root", help="gpujob's folder on an instance (default: the preset's)")
    s.add_argument("--preset", choices=["generic", "autodl", "vast", "runpod"])
    s.add_argument("--boot-timeout", metavar="DURATION", help="how long a made instance may take to accept SSH "
                   "(default 10m); then it is released")
    s.add_argument("--stock-wait", metavar="DURATION", help="how long a submit waits for stock or a free "
                   "instance (default 30m; submit --wait-gpus overrides)")
    s.add_argument("--force", action="store_true", help="replace the pool's settings")
    s = add("ls", cmd_pool_ls, "each pool's instances, their jobs and cost so far (releases what is due)", psub)
    s.add_argument("--all", action="store_true", help="released instances too")
    s = add("rm", cmd_pool_rm, "forget a pool (refused while it has instances)", psub)
    s.add_argument("name", help="the pool's name")
    s.add_argument("--release", action="store_true", help="release its instances first")
    s = add("release", cmd_pool_release, "release one instance now (again after a release that failed)", psub)
    s.add_argument("instance", metavar="INSTANCE", help="the instance's name in pool ls (POOL-N)")
    s.add_argument("--forget", action="store_true", help="released by hand in the provider's console: only "
                   "record it (its time stops now)")


# ---- shell completion --------------------------------------------------------------------
def cmd_completion(args: argparse.Namespace) -> int:
    from gpujob.cli import completion

    if args.words:
        items = completion.words(args.words)
        if args.json:
            import json

            print(json.dumps(items))
        else:
            sys.stdout.write("".join(w + "\n" for w in items))
        return 0
    if not args.shell:
        raise GpujobError("which shell?", "gpujob completion bash|zsh|fish (see README: Shell completion)")
    text = completion.script(args.shell, build_parser())
    if args.json:
        import json

        print(json.dumps({"shell": args.shell, "script": text}))
    else:
        sys.stdout.write(text)
    return 0
