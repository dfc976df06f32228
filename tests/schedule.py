"""The order a parallel run (pytest-xdist, ``--dist loadgroup``) hands tests to its workers.

Longest first: a worker that draws a three-minute test in the last minutes leaves the others
idle until it ends, so the long tests start at once and the short ones fill the gaps at the end
(the longest-processing-time rule). Each test's time comes from ``tests/durations.json``, seconds
by test function name (so it survives moving a test to another file); a test not listed counts
as ``UNKNOWN_S``, one marked ``slow`` as ``SLOW_S``.

Tests that share a module- or class-scoped fixture (a PostgreSQL cluster, an MLflow server,
checkpoints written once by real libraries) run on one worker, one after the other: spread over
workers, each worker would set the fixture up again. They go as one unit, by their summed time.

Refresh the times from a run's ``--durations=0`` output (e.g. after adding slow tests):
``python3 -m tests.schedule run.log``. A serial run (no ``-n``) keeps pytest's own order.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest


def _tests_folder() -> Path:
    """The suite's top folder (the one holding conftest.py), wherever in it this module lives."""
    here = Path(__file__).resolve().parent
    return next((d for d in (here, *here.parents) if d.name == "tests" and (d / "conftest.py").is_file()), here)


DURATIONS = _tests_folder() / "durations.json"
UNKNOWN_S = 1.0
SLOW_S = 30.0


def _name(item: pytest.Item) -> str:
    return getattr(item, "originalname", None) or item.name.split("[", 1)[0]


def _shared_scope(item: pytest.Item) -> str | None:
    """A group name for a test that uses a fixture set up once per module or class: the fixtures'
    own names, under the test's file (another file's tests set up their own)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    shared = sorted(name for name, defs in info.name2fixturedefs.items()
                    if defs and defs[-1].scope in ("module", "class", "package"))
    if not shared:
        return None
    return f"{item.path.stem}:{'+'.join(shared)}"


def _parallel(config: pytest.Config) -> bool:
    """A worker of a ``--dist loadgroup`` run: the order matters only there (the workers collect,
    the controller hands out their collection's units in its order)."""
    return hasattr(config, "workerinput") and bool(config.getoption("loadgroup", False))  # xdist sets it there


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _parallel(config):
        return
    try:
        known: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        known = {}
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = _shared_scope(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        mark = item.get_closest_marker("xdist_group")
        unit = str(mark.args[0] if mark and mark.args else mark.kwargs.get("name", "default")) if mark else item.nodeid
        units.setdefault(unit, []).append(item)

    def cost(item: pytest.Item) -> float:
        return known.get(_name(item), SLOW_S if item.get_closest_marker("slow") else UNKNOWN_S)

    # sorted() is stable: equal units keep the collection's order, the same on every worker
    ordered = sorted(units.values(), key=lambda unit: -sum(cost(i) for i in unit))
    items[:] = [item for unit in ordered for item in unit]


def pytest_configure(config: pytest.Config) -> None:
    # loadgroup's scheduler would otherwise put the units with the most tests first, undoing the order
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)")


def durations_from(log: str) -> dict[str, float]:
    """Seconds per test function from pytest's ``--durations`` lines (setup, call and teardown
    summed; a parametrized test counts as its slowest case)."""
    per_case: dict[str, float] = {}
    for line in log.splitlines():
        m = LINE.match(line)
        if m:
            per_case[m.group(2)] = per_case.get(m.group(2), 0.0) + float(m.group(1))
    out: dict[str, float] = {}
    for nodeid, s in per_case.items():
        name = nodeid.split("@", 1)[0].rsplit("::", 1)[-1].split("[", 1)[0]
        out[name] = max(out.get(name, 0.0), round(s, 1))
    return out


if __name__ == "__main__":
    times = durations_from(Path(sys.argv[1]).read_text())
    kept = {k: v for k, v in sorted(times.items(), key=lambda kv: -kv[1]) if v >= UNKNOWN_S}
    DURATIONS.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{len(kept)} tests of {UNKNOWN_S:g} s or more written to {DURATIONS}")
