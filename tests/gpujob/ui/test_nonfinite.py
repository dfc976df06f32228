"""A diverged loss (``NaN``, ``Infinity`` in metrics.jsonl; ``loss nan`` in the log) is kept and shown:
`status` draws it as nan/inf without crashing, and every `--json` document is strict JSON (``null``
plus a ``nonfinite`` flag), which `jq` and every strict parser read."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers import submit, wait_state, write_job

REPORTS = """
    import json, os
    with open(os.environ["GPUJOB_METRICS_FILE"], "a") as f:
        for step, loss in ((1, 2.0), (2, 1.0), (3, float("inf")), (4, float("nan"))):
            f.write(json.dumps({"step": step, "loss": loss, "lr": float("-inf") if step == 4 else 0.1}) + "\\n")
"""
PRINTS = """
    for step, loss in ((1, "0.5"), (2, "0.25"), (3, "nan")):
        print(f"step {step} loss {loss}", flush=True)
"""


def _refuse(name: str) -> float:
    raise ValueError(f"not strict JSON: {name}")


def strict(text: str) -> dict:
    return json.loads(text, parse_constant=_refuse)


def test_non_finite_metrics_are_drawn_and_written_as_strict_json(tmp_path: Path) -> None:
    a = submit("local", write_job(tmp_path, "nanm", REPORTS, "python main.py"))["job_id"]
    b = submit("local", write_job(tmp_path, "nanl", PRINTS, "python main.py"))["job_id"]
    wait_state("local", a, ("succeeded",))
    wait_state("local", b, ("succeeded",))

    r = run_cli("status", a)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nan" in r.stdout and "lr=-inf" in r.stdout, r.stdout
    doc = strict(run_cli("status", a, "--json").stdout)
    m = doc["last_metrics"]
    assert m["loss"] is None and m["nonfinite"]["loss"] == "nan" and m["nonfinite"]["lr"] == "-inf", m

    r = run_cli("status", b)
    assert r.returncode == 0 and "nan" in r.stdout, r.stdout + r.stderr
    strict(run_cli("status", b, "--json").stdout)

    for verb in (["ls", "--json"], ["ls", "--all", "--json"], ["cost", "--json"], ["status", a, "--exit-code", "--json"]):
        r = run_cli(*verb)
        assert r.returncode == 0, (verb, r.stderr)
        strict(r.stdout)
    r = run_cli("ls")
    assert r.returncode == 0, r.stderr
