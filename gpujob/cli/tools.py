"""Commands around jobs: init, data check, rm, gc."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpujob.cli.common import agent_for
from gpujob.errors import GpujobError


# ---- templates and data ------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    from gpujob.ui.output import print_json
    from gpujob.usecases.init import init_template, list_templates

    if args.list:
        items = list_templates()
        if args.json:
            print_json(items)
        else:
            for t in items:
                print(f"{t['name']:<12} {t['description']}")
        return 0
    written = init_template(args.template, Path(args.dir), force=args.force)
    if args.json:
        print_json({"template": args.template, "files": [str(p) for p in written]})
    else:
        for p in written:
            print(f"wrote {p}")
        print(f"next: gpujob submit {Path(args.dir) / 'job.yaml'} --follow")
    return 0


def cmd_data_check(args: argparse.Namespace) -> int:
    from gpujob.ui.output import print_json
    from gpujob.usecases.datacheck import check_jsonl, format_report

    rep = check_jsonl(args.file, text_field=args.text_field, label_field=args.label_field)
    if args.json:
        print_json(rep.to_json())
    else:
        print(format_report(rep))
    return 0 if rep.ok else 1


# ---- disk: rm and gc ---------------------------------------------------------------------
def cmd_rm(args: argparse.Namespace) -> int:
    from gpujob.config import index
    from gpujob.usecases.cleanup import human_bytes, remove_jobs

    res = remove_jobs(args.jobs, agent_for, lambda ref: args.host or index.host_of(ref), args.force)
    if args.json:
        from gpujob.ui.output import print_json

        print_json({"removed": res})
    else:
        for r in res:
            how = "stopped and removed" if r["stopped"] else "removed"
            print(f"{r['job_id']}: {how} on {r['host']} ({human_bytes(r['bytes'])} freed)")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from gpujob.config.durations import parse_duration
    from gpujob.usecases.cleanup import collect, human_bytes

    try:
        older = parse_duration(args.older_than)
    except ValueError as e:
        raise GpujobError(f"--older-than: {e}", "e.g. --older-than 7d (or 12h, 30m)") from None
    doc = collect(agent_for(args.host), older, args.dry_run, args.checkpoints_only)
    if args.json:
        from gpujob.ui.output import print_json

        print_json(doc)
        return 0
    verb = "would free" if args.dry_run else "freed"
    for it in doc["items"]:
        what = f"{it['kind']} {it.get('job_id') or it['path']}"
        print(f"{human_bytes(it['bytes']):>9}  {what}")
    print(f"{doc['host']}: {verb} {human_bytes(doc['bytes'])} in {len(doc['items'])} item(s); "
          f"{len(doc['busy'])} queued/running job(s) and agent {doc['agent']} kept"
          + ("   (run without --dry-run to remove)" if args.dry_run and doc["items"] else ""))
    return 0
