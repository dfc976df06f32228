"""Commands around jobs: init, data check, rm, gc."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpujob.cli.common import agent_for
from gpujob.errors import GpujobError


# ---- templates and data ------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    from gpujob.ui import report as ui
    from gpujob.ui.output import show
    from gpujob.usecases.init import init_template, list_templates

    if args.list:
        show(list_templates(), args.json, ui.templates)
        return 0
    files = init_template(args.template, Path(args.dir), force=args.force)
    show({"template": args.template, "files": [str(p) for p in files]}, args.json, lambda _: ui.written(files, Path(args.dir)))
    return 0


def cmd_data_check(args: argparse.Namespace) -> int:
    from gpujob.ui import report as ui
    from gpujob.ui.output import show
    from gpujob.usecases.datacheck import check_jsonl

    rep = check_jsonl(args.file, text_field=args.text_field, label_field=args.label_field)
    show(rep.to_json(), args.json, lambda _: ui.data_check(rep))
    return 0 if rep.ok else 1


# ---- disk: rm and gc ---------------------------------------------------------------------
def cmd_rm(args: argparse.Namespace) -> int:
    from gpujob.ui import report as ui
    from gpujob.ui.output import show
    from gpujob.usecases.jobs.cleanup import remove_jobs

    show({"removed": remove_jobs(args.jobs, agent_for, args.host, args.force)}, args.json, ui.removed)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from gpujob.bundle import import_remote

    parse_duration = import_remote("core.protocol").parse_duration
    from gpujob.ui import report as ui
    from gpujob.ui.output import show
    from gpujob.usecases.jobs.cleanup import collect

    try:
        older = parse_duration(args.older_than)
    except ValueError as e:
        raise GpujobError(f"--older-than: {e}", "e.g. --older-than 7d (or 12h, 30m)") from None
    show(collect(agent_for(args.host), older, args.dry_run, args.checkpoints_only), args.json, ui.collected)
    return 0
