"""The laptop's use cases read top to bottom: each room of ``gpujob/usecases/`` (a folder, or one of
the few modules left at its top) imports only its own room and lower ones, imports inside functions
included (docs/DESIGN.md draws the same picture)."""

from __future__ import annotations

from pathlib import Path

from tests.gpujob.test_layers import PKG, imported, module_of

USECASES = PKG / "usecases"
# lowest first; rooms of one rank are side by side and never import each other
RANK = {
    "secrets": 0,  # the secrets file, a job's secrets, what never leaves the laptop
    "notify": 1, "sync": 1, "hosts": 1, "lab": 1, "init": 1, "datacheck": 1,  # leaves over secrets
    "experiments": 2,  # the run ledger, runs, rerun, sweeps (over lab)
    "jobs": 3,  # a job that exists: status, stop, tail, cost, plot
    "power": 4,  # a host switched on and off (asks jobs which are live)
    "budget": 4,  # the account's limits and balance (stops jobs past a limit; launch asks it before a submit)
    "launch": 5,  # submit, placement (wakes a host), several nodes
    "pools": 5,  # instances made and released on demand (the submit onto one is the api's; guard moves a lost one's job)
    "disks": 5,  # a powered-off host's disk: its release countdown and warnings (over notify and the ledger)
    "relocate": 6,  # move and guard (a submit elsewhere)
}
FLAT_MOST = 5  # modules left at the top of usecases/; the rest live in rooms


def room(module: str) -> str | None:
    """``gpujob.usecases.sync.tree`` -> ``sync``; None outside the use cases or for their package."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["gpujob", "usecases"] and len(parts) > 2 else None


def wrong_imports(path: Path, module: str) -> set[str]:
    """The use-case modules ``module`` imports from a higher room, or from another room of its rank."""
    mine = room(module)
    assert mine in RANK, f"{module}: {mine} is not a room of RANK in {__file__}: give it a rank"
    bad = set()
    for target in imported(path, module):
        theirs = room(target)
        if theirs is None or theirs == mine:
            continue
        assert theirs in RANK, f"{module} imports {target}: {theirs} is not a room of RANK"
        if RANK[theirs] >= RANK[mine]:
            bad.add(target)
    return bad


def test_each_room_imports_only_lower_rooms() -> None:
    bad = [f"  {module_of(p)} ({room(module_of(p))}) imports {t} ({room(t)})"
           for p in sorted(USECASES.rglob("*.py")) if p != USECASES / "__init__.py"
           for t in sorted(wrong_imports(p, module_of(p)))]
    assert not bad, "a use case imports its own room or lower ones only (RANK in " + __file__ + "):\n" + "\n".join(bad)


def test_every_room_is_ranked_and_few_modules_are_flat() -> None:
    here = {p.stem for p in USECASES.glob("*.py") if p.name != "__init__.py"} | {
        p.name for p in USECASES.iterdir() if (p / "__init__.py").exists()}
    assert here == set(RANK), f"rooms without a rank: {sorted(here - set(RANK))}; ranks of no room: {sorted(set(RANK) - here)}"
    flat = sorted(p.stem for p in USECASES.glob("*.py") if p.name != "__init__.py")
    assert len(flat) <= FLAT_MOST, f"{len(flat)} modules flat in usecases/ (at most {FLAT_MOST}): {flat}"


def test_the_check_sees_a_wrong_import_inside_a_function(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text("def f():\n    from gpujob.usecases.secrets.file import secrets_from_env\n"
                   "    from gpujob.usecases.jobs import ops\n    from gpujob.usecases.hosts.shell import run_exec\n")
    # sync may take secrets (lower); jobs is higher, hosts of the same rank: both wrong
    assert wrong_imports(src, "gpujob.usecases.sync.x") == {"gpujob.usecases.jobs.ops", "gpujob.usecases.hosts.shell"}
    assert wrong_imports(src, "gpujob.usecases.relocate.x") == set()
