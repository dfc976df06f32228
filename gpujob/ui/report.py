"""What the tool commands print: init's templates and files, the data check report, notify test's
outcomes, the summaries of rm and gc."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpujob.usecases.datacheck import CHARS_PER_TOKEN, DataReport

MAX_LISTED = 10  # line numbers listed per problem; the rest are counted


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


# ---- init --------------------------------------------------------------------------------
def templates(items: list[dict[str, str]]) -> None:
    for t in items:
        print(f"{t['name']:<12} {t['description']}")


def written(files: list[Path], dest: Path) -> None:
    for p in files:
        print(f"wrote {p}")
    print(f"next: gpujob submit {dest / 'job.yaml'} --follow")


# ---- data check --------------------------------------------------------------------------
def data_check(rep: DataReport) -> None:
    print(format_report(rep))


def _lines(nums: list[int]) -> str:
    shown = ", ".join(str(n) for n in nums[:MAX_LISTED])
    return shown + (f", ... ({len(nums) - MAX_LISTED} more)" if len(nums) > MAX_LISTED else "")


def _human(n: float) -> str:
    for unit in ("", "K", "M", "B"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}T"


def format_report(rep: DataReport) -> str:
    """A human-readable report, problems first, each with its line numbers."""
    out = [f"{rep.path}: {rep.records} records in {rep.lines} lines"
           + (f" ({len(rep.blank_lines)} blank)" if rep.blank_lines else "")]
    problems = []
    if rep.bad_json:
        shown = "; ".join(f"line {n}: {err}" for n, err in rep.bad_json[:MAX_LISTED])
        more = f"; ... ({len(rep.bad_json) - MAX_LISTED} more)" if len(rep.bad_json) > MAX_LISTED else ""
        problems.append(f"{len(rep.bad_json)} line(s) do not parse as JSON: {shown}{more}")
    if rep.not_object:
        problems.append(f"{len(rep.not_object)} line(s) are not JSON objects: lines {_lines(rep.not_object)}")
    if rep.missing_text:
        problems.append(f"{len(rep.missing_text)} record(s) lack {rep.text_field!r}: lines {_lines(rep.missing_text)}")
    if rep.non_string_text:
        problems.append(f"{len(rep.non_string_text)} record(s) have a non-string {rep.text_field!r}: "
                        f"lines {_lines(rep.non_string_text)}")
    if rep.empty_text:
        problems.append(f"{len(rep.empty_text)} record(s) have an empty {rep.text_field!r}: lines {_lines(rep.empty_text)}")
    if rep.missing_label:
        problems.append(f"{len(rep.missing_label)} record(s) lack {rep.label_field!r}: lines {_lines(rep.missing_label)}")
    for p in problems:
        out.append("  ✗ " + p)
    if rep.duplicates:
        pairs = ", ".join(f"{n} (= {first})" for n, first in rep.duplicates[:MAX_LISTED])
        more = f", ... ({len(rep.duplicates) - MAX_LISTED} more)" if len(rep.duplicates) > MAX_LISTED else ""
        out.append(f"  ! {len(rep.duplicates)} exact duplicate record(s): lines {pairs}{more}")
    if rep.label_counts:
        total = sum(rep.label_counts.values())
        parts = ", ".join(f"{k}: {v} ({100 * v / total:.0f}%)" for k, v in rep.label_counts.items())
        out.append(f"  labels ({len(rep.label_counts)}): {parts}")
    if rep.lengths:
        L = rep.lengths
        out.append(f"  {rep.text_field} length (chars): min {L['min']:.0f}, median {L['p50']:.0f}, "
                   f"p90 {L['p90']:.0f}, p99 {L['p99']:.0f}, max {L['max']:.0f}, mean {L['mean']:.0f}")
        out.append(f"  total {_human(rep.total_chars)} chars ≈ {_human(rep.token_estimate)} tokens "
                   f"(~{CHARS_PER_TOKEN} chars/token)")
    if rep.ok:
        out.append("  ✓ no errors" + (" (duplicates are a warning)" if rep.duplicates else ""))
    elif rep.records == 0 and not problems:
        out.append("  ✗ no records")
    if not rep.ok and problems:  # the next step, as every refusal gives one
        field = " (the text under another key? --text-field NAME)" if rep.missing_text else ""
        out.append(f"  → fix or drop the lines named above{field}, then check again: a training script would "
                   "stop at them")
    elif not rep.ok:
        out.append("  → give a .jsonl file with one JSON object per line")
    return "\n".join(out)


# ---- notify test -------------------------------------------------------------------------
def format_outcomes(outcomes: Sequence[Mapping[str, object]]) -> list[str]:
    """One line per channel's outcome, worded as the agent words a delivery."""
    from gpujob.bundle import import_remote

    notify = import_remote("notify")
    return [notify.format_outcome(o, "test") for o in outcomes]


def notify_outcomes(outcomes: Sequence[Mapping[str, object]]) -> None:
    from gpujob.ui.neutral import clean

    for line in format_outcomes(outcomes):
        print(clean(line))  # a platform's answer is quoted in it


# ---- rm and gc ---------------------------------------------------------------------------
def removed(doc: Mapping[str, object]) -> None:
    from gpujob.ui.neutral import clean_doc

    for r in clean_doc(doc)["removed"]:  # names and paths the instance sent
        how = "stopped and removed" if r["stopped"] else "removed"
        print(f"{r['job_id']}: {how} on {r['host']} ({human_bytes(r['bytes'])} freed)")
        if r.get("mirror_left"):
            print(f"  left on its mirror: {', '.join(r['mirror_left'])}: gpujob pull {r['job_id']} --from mirror "
                  f"brings its newest checkpoint, gpujob resume {r['job_id']} --host HOST continues it "
                  f"(the run ledger remembers it); delete them there with rclone purge")


def collected(doc: dict[str, Any]) -> None:
    from gpujob.ui.neutral import clean_doc

    doc = clean_doc(doc)  # names and paths the instance sent
    dry_run = doc["dry_run"]
    verb = "would free" if dry_run else "freed"
    for it in doc["items"]:
        what = f"{it['kind']} {it.get('job_id') or it['path']}"
        print(f"{human_bytes(it['bytes']):>9}  {what}")
    shared = doc["bytes"] - sum(it["bytes"] for it in doc["items"])
    if shared > 0:  # a file linked from two items (a job's code and its project's) is freed by neither alone
        print(f"{human_bytes(shared):>9}  shared by the items above (hard links: a job's code or data view and its "
              "project's or the data store's copy), freed only with all of them")
    print(f"{doc['host']}: {verb} {human_bytes(doc['bytes'])} in {len(doc['items'])} item(s); "
          f"{len(doc['busy'])} queued/running job(s) and agent {doc['agent']} kept"
          + ("   (run without --dry-run to remove)" if dry_run and doc["items"] else ""))
    if doc.get("tensorboards_stopped"):
        print(f"stopped the TensorBoard of removed job(s) {', '.join(doc['tensorboards_stopped'])}")
