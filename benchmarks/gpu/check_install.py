"""Step 1 of the GPU check: a CUDA build of torch and the packages gpujob and its `train` extra
need, installed with pip when missing (timed). The dry run only looks.

Offline machines: a folder of wheels (``--wheels DIR``, made with ``fetch_wheels.sh`` where the
registry is reachable) is installed with ``--no-index --no-deps`` instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from check_jobs import REPO, StepFailed, run_cmd

TORCH_PROBE = ("import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
               "'cuda': torch.version.cuda, 'cuda_available': c, 'device': torch.cuda.get_device_name() if c else None, "
               "'bf16': bool(c and torch.cuda.is_bf16_supported())}))")


def requirements() -> list[str]:
    """gpujob's own dependencies and its `train` extra, from pyproject.toml (torch handled apart)."""
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib

        proj = tomllib.loads(text)["project"]
        reqs = proj["dependencies"] + proj["optional-dependencies"]["train"]
    except ImportError:  # Python < 3.11: the two lists are simple enough to read
        blocks = re.findall(r'^(?:dependencies|train) = \[(.*?)\]', text, re.S | re.M)
        reqs = [r for b in blocks for r in re.findall(r'"([^"]+)"', b)]
    return [r for r in reqs if not r.startswith("torch")]


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def missing(reqs: list[str]) -> tuple[list[str], dict[str, str]]:
    """(requirements not satisfied, installed versions) for ``name>=X`` requirements."""
    from importlib import metadata

    out, have = [], {}
    for req in reqs:
        name, _, low = req.partition(">=")
        name = name.split("[")[0]  # "jsonargparse[signatures]": the distribution's own name
        low = low.split(",")[0].strip()  # "pathspec>=1.1,<2": the lower bound only
        try:
            v = metadata.version(name.strip())
        except metadata.PackageNotFoundError:
            out.append(req)
            continue
        have[name.strip()] = v
        if low and _version_tuple(v) < _version_tuple(low):
            out.append(req)
    return out, have


def newer_wheels(files: list[Path]) -> list[Path]:
    """The wheels whose package is missing or older here: the image's own newer ones stay."""
    from importlib import metadata

    out = []
    for f in files:
        name, version = f.name.split("-")[:2]
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(f)
            continue
        if _version_tuple(have) < _version_tuple(version):
            out.append(f)
    return out


def pip(python: str, args: list[str], timeout: float) -> float:
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_BREAK_SYSTEM_PACKAGES="1")
    t0 = time.time()
    rc, out = run_cmd([python, "-m", "pip", "install", "-q", *args], env, timeout)
    if rc != 0:
        raise StepFailed(f"pip install {' '.join(args)} exited {rc}: {out[-1200:]}")
    return round(time.time() - t0, 1)


def probe_torch(python: str, env: dict[str, str]) -> dict | None:
    rc, out = run_cmd([python, "-c", TORCH_PROBE], env, 120)
    if rc != 0:
        return None
    return json.loads(out.strip().splitlines()[-1])


def step(rec: dict, python: str, dry_run: bool, wheels: Path | None, timeout: float) -> None:
    """Fills ``rec``: what was there, what was installed and how long pip took."""
    env = dict(os.environ)
    if dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""
    rec["python"] = python
    rec["pip_seconds"] = 0.0
    rec["installed"] = []
    t0 = time.time()
    if wheels and not dry_run:
        files = sorted(wheels.glob("*.whl"))
        if not files:
            raise StepFailed(f"--wheels {wheels}: no .whl files there (make them with benchmarks/gpu/fetch_wheels.sh)")
        newer = newer_wheels(files)
        rec["wheels_skipped"] = [f.name for f in files if f not in newer]
        if newer:
            rec["pip_seconds"] += pip(python, ["--no-index", "--no-deps", *map(str, newer)], timeout)
            rec["installed"] += [f.name for f in newer]
    torch_info = probe_torch(python, env)
    has_gpu = bool(shutil.which("nvidia-smi")) and not dry_run
    if not dry_run and (torch_info is None or (has_gpu and not torch_info["cuda_available"])):
        # PyPI's Linux wheels of torch are CUDA builds; a CPU build in place must be replaced
        again = ["--force-reinstall"] if torch_info is not None else []
        rec["pip_seconds"] += pip(python, [*again, "torch"], timeout)
        rec["installed"].append("torch")
        torch_info = probe_torch(python, env)
    if torch_info is None:
        raise StepFailed(f"{python} cannot import torch" + (" (the dry run installs nothing)" if dry_run else ""))
    rec.update(torch_info)
    lacking, have = missing(requirements())
    rec["present"] = have
    if lacking and dry_run:
        rec["missing"] = lacking
        raise StepFailed(f"missing {', '.join(lacking)}: pip install -e '.[train]' (the dry run installs nothing)")
    if lacking:
        rec["pip_seconds"] += pip(python, lacking, timeout)
        rec["installed"] += lacking
        lacking, rec["present"] = missing(requirements())
        if lacking:
            raise StepFailed(f"still missing after pip: {', '.join(lacking)}")
    if not dry_run and not rec["cuda_available"]:
        raise StepFailed(f"torch {rec['torch']} sees no CUDA device (nvidia-smi {'found' if has_gpu else 'missing'})")
    rec["check_seconds"] = round(time.time() - t0 - rec["pip_seconds"], 1)


if __name__ == "__main__":
    print(json.dumps({"requirements": requirements(), "missing": missing(requirements())[0]}))
    sys.exit(0)
