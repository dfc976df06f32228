"""Commands over the run ledger: runs, compare, rerun, sweep (docs/experiments.md)."""

from __future__ import annotations

import argparse
import sys

from gpujob.cli.common import client, show
from gpujob.errors import GpujobError


def cmd_runs(args: argparse.Namespace) -> int:
    from types import SimpleNamespace

    from gpujob.ui.experiments import runs_table
    from gpujob.usecases.experiments.runs import runs

    if args.action == "export":
        return _export(args)
    if args.mlflow is not None and args.source != "mlflow":
        raise GpujobError("--mlflow URI goes with gpujob runs export, or with --from mlflow",
                          "gpujob runs export --mlflow URI, or gpujob runs --from mlflow --mlflow URI")
    # the ledger alone, no host: the document Client.runs wraps, without the client and its results'
    # classes (a quarter of what runs cost to start)
    doc = runs(name=args.name, where=args.where, sort=args.sort, limit=args.limit, sweep=args.sweep,
               mlflow=(args.mlflow or "") if args.source == "mlflow" else None)
    return show(args, SimpleNamespace(to_json=lambda: doc), runs_table)


def _export(args: argparse.Namespace) -> int:
    """``gpujob runs export --mlflow [URI]``: every run of the ledger to the lab's MLflow, once."""
    from types import SimpleNamespace

    from gpujob.ui.experiments import exported
    from gpujob.usecases.lab.export import export_or_raise
    from gpujob.usecases.lab.labruns import server

    uri = server(args.mlflow or None)

    def progress(done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\rexporting runs: {done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

    doc = {"mlflow": uri, **export_or_raise(uri, progress)}
    return show(args, SimpleNamespace(to_json=lambda: doc), exported)


def cmd_compare(args: argparse.Namespace) -> int:
    from types import SimpleNamespace

    from gpujob.ui.experiments import compare_plot, comparison
    from gpujob.usecases.experiments.runs import compare, unseen

    if not args.plot and not unseen(list(args.runs)):  # the ledger has every curve: no host to ask, no client
        doc = compare(list(args.runs))
        return show(args, SimpleNamespace(to_json=lambda: doc), comparison)
    with client(None) as c:
        return show(args, c.compare(*args.runs, plot=args.plot, draw=compare_plot), comparison)


def cmd_rerun(args: argparse.Namespace) -> int:
    from gpujob.ui.experiments import reran

    with client(None) as c:
        job = c.rerun(args.run, set=args.set, host=args.host)
        return show(args, job.submitted, reran)


def _note(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    return None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))


def cmd_sweep(args: argparse.Namespace) -> int:
    from gpujob.ui.experiments import sweep_report

    words = args.target
    verb = words[0] if len(words) == 2 and words[0] in ("status", "resume") else None
    if verb is None and len(words) != 1:
        raise GpujobError(f"sweep: expected JOB_FILE, or status/resume NAME, got {' '.join(words)!r}",
                          "e.g. gpujob sweep job.yaml --hosts a,b, or gpujob sweep status NAME")
    with client(None) as c:
        try:
            if verb == "status":
                res = c.sweep_status(words[1], storage=args.storage)
            elif verb == "resume":
                res = c.sweep_resume(words[1], note=_note(args), storage=args.storage)
            else:
                res = c.sweep(words[0], set=args.set, hosts=args.hosts, name=args.name, note=_note(args),
                              budget=args.budget, max_gpu_hours=args.max_gpu_hours, trials=args.trials,
                              parallel=args.parallel)
        except KeyboardInterrupt:
            name = words[1] if verb else args.name or "NAME"
            print(f"\nthe sweep's trials keep running; gpujob sweep resume {name} drives it again "
                  f"(gpujob sweep status {name} shows it)", file=sys.stderr)
            return 130
        return show(args, res, sweep_report)


def add_parsers(add, sub) -> None:  # type: ignore[no-untyped-def]
    """The commands of this module on the main parser (``add`` as in gpujob.cli.parser)."""
    from gpujob.cli.args import job_ref, number_type, table_flags

    s = add("runs", cmd_runs, "the run ledger: every job submitted from here, on any host, kept after rm/gc; "
            "runs export --mlflow: to the lab's MLflow")
    s.add_argument("action", nargs="?", choices=["export"], help="export: send the ledger's runs to MLflow (--mlflow)")
    s.add_argument("--mlflow", nargs="?", const="", metavar="URI",
                   help="the MLflow tracking server (default: $MLFLOW_TRACKING_URI)")
    s.add_argument("--from", dest="source", choices=["ledger", "mlflow"], default="ledger",
                   help="mlflow: the lab's runs on the MLflow server beside this laptop's")
    s.add_argument("--name", help="only runs of this job name")
    s.add_argument("--where", action="append", default=[], metavar="EXPR",
                   help="filter on a parameter, metric or column, e.g. 'lr<1e-3' or state=succeeded (repeatable)")
    s.add_argument("--sort", metavar="KEY", help="best first by a metric or parameter (--sort=-KEY: the other way)")
    s.add_argument("--sweep", metavar="NAME", help="only the trials of this sweep")
    s.add_argument("--limit", type=number_type(int, 0, 10**9), default=50, metavar="N", help="rows shown (0: all; default 50)")
    table_flags(s)
    s = add("compare", cmd_compare, "runs side by side: differing parameters, code and environment, metrics, curves")
    s.add_argument("runs", nargs="+", metavar="RUN", type=job_ref)
    s.add_argument("--plot", metavar="PNG", help="also draw the curves overlaid to this PNG (needs matplotlib)")
    table_flags(s)
    s = add("rerun", cmd_rerun, "run a job again with the same code and changes (--set lr=1e-4), linked to it")
    s.add_argument("run", metavar="RUN", type=job_ref)
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a run: argument (lr=1e-4 → --lr 1e-4) or a job-file key (gpus=2)")
    s.add_argument("--host", help="another host (default: the run's own)")
    s = add("sweep", cmd_sweep, "search run: arguments with Optuna (grid, random, TPE; pruning; a budget); "
            "sweep status NAME, sweep resume NAME")
    s.usage = ("gpujob sweep [--hosts HOSTS] [--name NAME] [--set KEY=VALUE] [--trials N]\n"
               "                    [--parallel N] [--budget B] [--max-gpu-hours H] [--json] JOB_FILE\n"
               "       gpujob sweep status NAME [--storage URL] [--json] [--wide] [--columns A,B,C]\n"
               "       gpujob sweep resume NAME [--storage URL] [--json] [--wide] [--columns A,B,C]")  # argparse's: a list
    s.add_argument("target", nargs="+", metavar="JOB_FILE | status NAME | resume NAME",
                   help="a job file with a sweep: section starts a sweep; status NAME shows one, resume NAME drives it again")
    s.add_argument("--hosts", help="host profiles the trials are placed on (a,b: the first with the GPUs free)")
    s.add_argument("--storage", metavar="URL", help="status/resume: the shared Optuna storage the sweep is in "
                   "(postgresql://user@host/db; default: where this laptop ran it)")
    s.add_argument("--name", help="the sweep's name (default: JOB-sweep-TIME)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a job-file key for every trial")
    s.add_argument("--trials", type=number_type(int, 1, 100000), metavar="N", help="how many trials (default: sweep.trials)")
    s.add_argument("--parallel", type=number_type(int, 1, 1000), metavar="N", help="trials at once (default: sweep.parallel, else 1)")
    s.add_argument("--budget", type=number_type(float, 0, 1e9), metavar="B", help="money: the sweep ends, its trials stopped cleanly, "
                   "before the trials' cost passes this")
    s.add_argument("--max-gpu-hours", type=number_type(float, 0, 1e9), metavar="H", help="the same in GPU-hours")
    table_flags(s)
