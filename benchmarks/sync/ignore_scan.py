"""The cost of the ignore rules in a scan: ``walk`` of a 100,000-file tree under many patterns,
this checkout's ``gpujob/config/ignore.py`` against another revision's, alternating in one run.

    python benchmarks/sync/ignore_scan.py [--files 100000] [--base 4876b3a] [--runs 3]

The tree has bench.py's layout (30 × 7 folders) with empty files (the walk reads names and
stats, never contents), a 120-line top ``.gitignore`` in the style of GitHub's Python one and a
job ``exclude:``; then also a ``.gitignore`` in each of the 30 package folders; then negations
too (the old code's slow path).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

NAMES = ["__pycache__/", "*.py[cod]", "*$py.class", "*.so", ".Python", "build/", "develop-eggs/", "dist/",
         "downloads/", "eggs/", ".eggs/", "/lib/", "/lib64/", "parts/", "sdist/", "var/", "wheels/",
         "share/python-wheels/", "*.egg-info/", ".installed.cfg", "*.egg", "MANIFEST", "*.manifest", "*.spec",
         "pip-log.txt", "pip-delete-this-directory.txt", "htmlcov/", ".tox/", ".nox/", ".coverage", ".coverage.*",
         ".cache", "nosetests.xml", "coverage.xml", "*.cover", "*.py,cover", ".hypothesis/", ".pytest_cache/",
         "cover/", "*.mo", "*.pot", "*.log", "local_settings.py", "db.sqlite3", "db.sqlite3-journal",
         "instance/", ".webassets-cache", ".scrapy", "docs/_build/", ".pybuilder/", "target/", ".ipynb_checkpoints",
         "profile_default/", "ipython_config.py", ".pdm.toml", "__pypackages__/", "celerybeat-schedule",
         "celerybeat.pid", "*.sage.py", ".env", ".venv", "env/", "venv/", "ENV/", "env.bak/", "venv.bak/",
         ".spyderproject", ".spyproject", ".ropeproject", "/site", ".mypy_cache/", ".dmypy.json", "dmypy.json",
         ".pyre/", ".pytype/", "cython_debug/", ".idea/", "*.swp", "*.swo", "*~", ".vscode/*", "outputs/",
         "runs/", "wandb/", "lightning_logs/", "checkpoints/", "*.ckpt", "*.pt", "*.pth", "*.safetensors",
         "*.bin", "*.onnx", "data/raw/", "data/processed/", "**/tmp/", "logs/**", "*.tmp", "*.bak", "*.orig",
         "[Tt]humbs.db", "Desktop.ini", "$RECYCLE.BIN/", "*.cab", "*.msi", "*.lnk", "._*", ".Spotlight-V100",
         ".Trashes", "ehthumbs.db", "*.stackdump", "node_modules/", "npm-debug.log*", "*.tsbuildinfo", ".npm",
         "*.tgz", ".yarn-integrity", ".parcel-cache", ".next", "out/", "*.pid", "*.seed", "*.pid.lock"]
NEGATIONS = ["!keep.log", "!.vscode/settings.json", "!important.pt"]
EXCLUDE = ["*.ipynb", "scratch/", "notes/*.md"]


def make_tree(top: Path, n: int) -> None:
    for i in range(n):
        d = top / f"pkg{i % 30}" / f"mod{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        name = f"file_{i}.py" if i % 50 else f"file_{i}.log"  # 2 % of names are ignored
        (d / name).touch()


def nested(top: Path, on: bool) -> None:
    for p in range(30):
        f = top / f"pkg{p}" / ".gitignore"
        if on:
            f.write_text("*.csv\n/generated/\n!keep.csv\n")
        elif f.exists():
            f.unlink()


def load(path_text: str, name: str):  # noqa: ANN201 - a module
    f = Path(tempfile.mkdtemp(prefix="gj-ignore-")) / f"{name}.py"
    f.write_text(path_text)
    spec = importlib.util.spec_from_file_location(name, f)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--base", default="4876b3a", help="the revision to compare with")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    old_text = subprocess.run(["git", "-C", str(REPO), "show", f"{a.base}:gpujob/config/ignore.py"],
                              capture_output=True, text=True, check=True).stdout
    mods = {"base": load(old_text, "ignore_base"), "this": load((REPO / "gpujob/config/ignore.py").read_text(),
                                                                 "ignore_this")}
    top = Path(tempfile.mkdtemp(prefix="gj-ignore-tree-"))
    try:
        make_tree(top, a.files)
        measure(a, mods, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def measure(a: argparse.Namespace, mods: dict, top: Path) -> None:
    print(f"{a.files} files, {len(NAMES)} top patterns, {len(EXCLUDE)} excludes, then 30 nested .gitignore files")
    for label, negs, inner in (("top .gitignore only, no negation", [], False), ("no negation", [], True),
                               ("with negations", NEGATIONS, True)):
        (top / ".gitignore").write_text("\n".join(NAMES + negs) + "\n")
        nested(top, inner)
        times: dict[str, list[float]] = {"base": [], "this": []}
        counts = {}
        for _ in range(a.runs):
            for which, mod in mods.items():
                t = time.perf_counter()
                counts[which] = sum(1 for _ in mod.walk(top, EXCLUDE))
                times[which].append(time.perf_counter() - t)
        if counts["base"] != counts["this"]:
            print(f"  note: the two keep different entries ({counts['base']} against {counts['this']})")
        mb, mt = statistics.median(times["base"]), statistics.median(times["this"])
        print(f"{label}: {a.base} {mb:.2f} s, this checkout {mt:.2f} s (medians of {a.runs}), "
              f"this/{a.base} = {mt / mb:.3f}")


if __name__ == "__main__":
    main()
