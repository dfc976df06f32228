"""gpujob init: listing, writing, refusing to overwrite; templates ship what they promise."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from gpujob.usecases.init import TemplateError, init_template, list_templates, templates_root


def test_list_templates() -> None:
    names = [t["name"] for t in list_templates()]
    assert names == ["causal-lm", "custom", "seq-cls"]
    assert all(t["description"] for t in list_templates())
    assert (templates_root() / "runtime" / "gpujob_runtime.py").is_file()


@pytest.mark.parametrize("name", ["causal-lm", "seq-cls", "custom"])
def test_init_writes_runnable_job(tmp_path: Path, name: str) -> None:
    written = init_template(name, tmp_path / "proj")
    rel = {p.relative_to(tmp_path / "proj").as_posix() for p in written}
    assert {"job.yaml", "train.py", "requirements.txt"} <= rel
    spec = yaml.safe_load((tmp_path / "proj" / "job.yaml").read_text())
    assert spec["name"] == name and spec["run"].startswith("python train.py")
    assert set(spec) <= {"name", "run", "workdir", "exclude", "data", "requirements", "setup", "env", "gpus",
                         "checkpoint", "tensorboard", "retry"}
    for entry in spec.get("data", []):
        assert (tmp_path / "proj" / entry["src"]).is_file(), "sample data ships with the template"
    ast.parse((tmp_path / "proj" / "train.py").read_text())


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    init_template("custom", tmp_path)
    (tmp_path / "job.yaml").write_text("mine")
    with pytest.raises(TemplateError) as e:
        init_template("custom", tmp_path)
    assert "job.yaml" in str(e.value) and "--force" in str(e.value)
    assert (tmp_path / "job.yaml").read_text() == "mine"
    init_template("custom", tmp_path, force=True)
    assert (tmp_path / "job.yaml").read_text() != "mine"


def test_unknown_template_suggests(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="did you mean 'seq-cls'"):
        init_template("seqcls", tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["causal-lm", "seq-cls"])
def test_examples_use_the_template_script(name: str) -> None:
    root = templates_root().parent / "examples" / name
    spec = yaml.safe_load((root / "job.yaml").read_text())
    assert (root / spec["workdir"]).resolve() == (templates_root() / name).resolve()  # one copy of the code
    from gpujob.config.spec import load_spec

    loaded = load_spec(root / "job.yaml")
    assert Path(loaded.requirements or "").parent == (templates_root() / name).resolve()
    for entry in spec["data"]:
        assert (root / entry["src"]).is_file()
    assert sum(f.stat().st_size for f in (root / "data").iterdir()) < 400_000
