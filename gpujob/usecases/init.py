"""`gpujob init`: write a job.yaml, a training script and requirements from a template."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from gpujob.bundle import templates_dir
from gpujob.errors import GpujobError

TEMPLATE_DESCRIPTIONS = {
    "causal-lm": "Hugging Face Trainer language-model training on {\"text\"} jsonl: packed blocks, "
                 "bf16/fp16, fused AdamW, TensorBoard, resumes by itself",
    "seq-cls": "text classification in a plain PyTorch loop on {\"text\",\"label\"} jsonl: AMP, "
               "clipping, eval accuracy, best checkpoint, exact resume",
    "custom": "wrap any existing command (Lightning, accelerate, your script); documents gpujob's "
              "checkpoint and stop variables",
}
_SKIP = {"__pycache__", ".DS_Store", "checkpoints", "runs", "metrics.jsonl"}


class TemplateError(GpujobError):
    """A template name that does not exist, or files that would be overwritten."""


def templates_root() -> Path:
    """``templates/`` next to the package in a checkout, else ``gpujob/_templates`` in the wheel."""
    try:
        root = templates_dir()
    except FileNotFoundError as e:
        raise TemplateError(str(e), "reinstall gpujob: pip install --force-reinstall gpujob") from None
    if not (root / "runtime" / "gpujob_runtime.py").is_file():
        raise TemplateError(f"gpujob's templates are incomplete ({root})",
                            "reinstall gpujob: pip install --force-reinstall gpujob")
    return root


def list_templates() -> list[dict[str, str]]:
    """Every template as ``{"name", "description"}``, sorted by name."""
    root = templates_root()
    names = sorted(p.name for p in root.iterdir() if (p / "job.yaml").is_file())
    return [{"name": n, "description": TEMPLATE_DESCRIPTIONS.get(n, "")} for n in names]


def _template_files(src: Path) -> list[Path]:
    out = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if p.is_file() and not any(part in _SKIP for part in rel.parts):
            out.append(rel)
    return out


def init_template(name: str, dest: Path | str = ".", force: bool = False) -> list[Path]:
    """Copy template ``name`` into ``dest`` (created); return the files written.

    Refuses, writing nothing, when any file already exists unless ``force``.
    """
    names = [t["name"] for t in list_templates()]
    if name not in names:
        import difflib

        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TemplateError(f"no template {name!r}{hint}", f"choose one of: {', '.join(names)} "
                            "(`gpujob init --list` describes them)")
    src = templates_root() / name
    dest = Path(dest)
    files = _template_files(src)
    existing = [dest / rel for rel in files if (dest / rel).exists()]
    if existing and not force:
        shown = ", ".join(str(p) for p in existing[:5]) + (" ..." if len(existing) > 5 else "")
        raise TemplateError(f"would overwrite {len(existing)} existing file(s): {shown}",
                            "pass --force to overwrite them, or choose another directory")
    written = []
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
        written.append(target)
    return written


def load_runtime() -> ModuleType:
    """Import the runtime helper shipped with gpujob (for training scripts run off an instance)."""
    if "gpujob_runtime" in sys.modules:
        return sys.modules["gpujob_runtime"]
    path = templates_root() / "runtime" / "gpujob_runtime.py"
    spec = importlib.util.spec_from_file_location("gpujob_runtime", str(path))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpujob_runtime"] = mod
    spec.loader.exec_module(mod)
    return mod
