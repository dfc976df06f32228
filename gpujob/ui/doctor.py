"""``gpujob doctor``: one line per check, marked ✓ (ok), ! (warn) or ✗ (error), with the remedy under it."""

from __future__ import annotations

from typing import Any

from gpujob.ui.output import console

MARKS = {"ok": "✓", "warn": "!", "error": "✗"}
COLORS = {"ok": "green", "warn": "yellow", "error": "red"}


def doctor_report(host: Any, rep: dict[str, Any]) -> None:
    from gpujob.ui.neutral import clean_doc

    rep = clean_doc(rep, markup=True)  # the instance wrote it: no escape sequence, no markup
    c = console()
    c.print(f"[bold]{host.name}[/] ({host.address}, preset {host.preset}, root {rep.get('root')})")
    for ch in rep["checks"]:
        level = ch["level"]
        c.print(f"[{COLORS.get(level, 'red')}]{MARKS.get(level, '?')} {ch['name']:<14}[/] {ch['message']}")
        if ch["remedy"] and level != "ok":
            c.print(f"  [dim]→ {ch['remedy']}[/]")


def bench_report(host: Any, rep: dict[str, Any]) -> None:
    """The preflight: a line per GPU and for the disk, what was skipped, then the warnings."""
    from gpujob.ui.neutral import clean_doc

    rep = clean_doc(rep, markup=True)  # the instance measured it: no escape sequence, no markup (a link)
    c = console()
    c.print(f"[bold]{host.name}[/] preflight ({rep.get('seconds')} s)")
    v = rep.get("versions") or {}
    if v.get("driver"):
        c.print(f"  driver {v['driver']} (CUDA {v.get('driver_cuda')}), torch {v.get('torch')} (CUDA {v.get('torch_cuda')})")
    for g in rep.get("gpus") or []:
        parts = []
        for key, unit in (("bf16_tflops", "TFLOP/s bf16"), ("fp16_tflops", "TFLOP/s fp16"), ("mem_gbs", "GB/s memory")):
            if g.get(key) is not None:
                pct = g.get(key.split("_")[0] + "_pct")
                parts.append(f"{g[key]} {unit}" + (f" ({pct} % of rated)" if pct is not None else ""))
        if g.get("h2d_gbs") is not None:
            parts.append(f"{g['h2d_gbs']} GB/s host→GPU")
        c.print(f"  GPU {g.get('index')} {g.get('name')}: {', '.join(parts) or 'not measured'}")
    d = rep.get("disk") or {}
    c.print(f"  disk {d.get('path')}: write {d.get('write_mbs')} MB/s, read {d.get('read_mbs')} MB/s, "
            f"{d.get('free_inodes')} free inodes")
    for s in rep.get("skipped") or []:
        c.print(f"  [dim]skipped: {s}[/]")
    for w in rep.get("warnings") or []:
        c.print(f"[yellow]! {w}[/]")
    if not rep.get("warnings"):
        c.print("[green]✓ no warnings[/]")
