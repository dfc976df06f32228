"""Numbers in a job file: ``1e-5`` is a number (YAML 1.2, as the docs write it) wherever a number is
expected, and the docs' own sweep example, copied verbatim from docs/experiments.md, validates and runs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import needs

DOC = REPO / "docs" / "experiments.md"


def _docs_sweep_yaml() -> str:
    """The first ```yaml block of docs/experiments.md that holds a sweep:, as the docs print it."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    return next(b for b in blocks if "sweep:" in b and "low:" in b)


def test_yaml_reads_exponent_floats_as_numbers_and_keeps_their_text() -> None:
    from gpujob.config.yamlsafe import load_yaml

    doc, _ = load_yaml("a: 1e-5\nb: 3E4\nc: -2.5e+3\nd: 10\ne: 1e\nf: '1e-5'\ng: .5e-1\n", "job.yaml")
    assert doc["a"] == 1e-5 and doc["b"] == 3e4 and doc["c"] == -2500.0 and doc["g"] == 0.05
    assert doc["d"] == 10 and isinstance(doc["d"], int)
    assert doc["e"] == "1e" and doc["f"] == "1e-5"  # not numbers: stay text
    assert str(doc["a"]) == "1e-5"  # an env value or run-line word reads as written


def test_env_number_reaches_the_job_as_written(tmp_path: Path) -> None:
    from gpujob.config.spec import load_spec

    (tmp_path / "train.py").write_text("")
    (tmp_path / "job.yaml").write_text("name: n\nrun: python train.py\nenv: {EPS: 1e-5, BIG: 3E4}\n")
    spec = load_spec(tmp_path / "job.yaml")
    assert spec.env == {"EPS": "1e-5", "BIG": "3E4"}


@pytest.mark.parametrize("params, why", [
    ("{low: abc, high: 1}", "low: 'abc' is not a number"),
    ("{low: 1e-2, high: 1e-5}", "low (1e-2) must be below high (1e-5)"),
    ("{low: 0, high: 1, log: true}", "a log range needs low > 0"),
    ("{low: 1, high: 2, lg: true}", "unknown key 'lg'"),
    ("{high: 2}", "a range needs both low and high"),
])
def test_a_wrong_range_says_why(tmp_path: Path, params: str, why: str) -> None:
    from gpujob.config.yamlsafe import load_yaml
    from gpujob.errors import SpecError
    from gpujob.usecases.experiments.sweepspec import parse

    raw, _ = load_yaml(f"params:\n  lr: {params}\n", "job.yaml")
    with pytest.raises(SpecError) as e:
        parse(raw, "job.yaml")
    assert f"sweep.params.lr: {why}" in str(e.value), str(e.value)


TRAIN = """
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float)
    p.add_argument("--steps", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--layers", type=int)
    a = p.parse_args()
    assert 1e-5 <= a.lr <= 1e-2 and a.batch in (16, 32, 64) and 2 <= a.layers <= 8, a
    for step in range(1, 6):
        print(f"step {step} loss {1 / step:.4f} eval_loss {a.lr * 100 / step:.6f}", flush=True)
"""


def test_the_docs_sweep_example_copied_verbatim_validates_and_runs(tmp_path: Path) -> None:
    needs("optuna")
    proj = tmp_path / "tiny"
    proj.mkdir()
    (proj / "job.yaml").write_text(_docs_sweep_yaml())
    (proj / "train.py").write_text(textwrap.dedent(TRAIN))
    # the file as the docs print it; only how many trials this test waits for is given on the command line
    r = run_cli("sweep", str(proj / "job.yaml"), "--hosts", "local", "--trials", "2", "--parallel", "1", "--json",
                timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads(r.stdout)
    assert doc["state"] == "done" and len(doc["trials"]) == 2, doc
    lrs = [t["params"]["lr"] for t in doc["trials"]]
    assert all(1e-5 <= lr <= 1e-2 for lr in lrs), lrs
    assert all(t["state"] == "complete" for t in doc["trials"]), doc["trials"]
