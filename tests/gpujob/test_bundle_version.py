"""The agent bundle's version is its content's hash, kept in the cache folder beside the files' stat
lines so that a command does not hash ~150 files each time (issue 38); any change to a file is a
new version at once, and an unwritable cache folder only costs the hash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

ASK = ("import sys; from gpujob.bundle import bundle_version, _bundle_paths, _content_version; "
       "from gpujob.version import __version__; "
       "print(bundle_version(), _content_version(_bundle_paths(), __version__))")


def _copy(tmp: Path) -> Path:
    tree = tmp / "tree"
    for d in ("gpujob", "remote", "templates"):
        shutil.copytree(REPO / d, tree / d, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _versions(tree: Path, cache: Path) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUJOB_", "XDG_"))}
    env.update(PYTHONPATH=str(tree), GPUJOB_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-c", ASK], env=env, cwd=tree, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    kept, hashed = out.stdout.split()
    return kept, hashed


def test_the_kept_version_follows_every_change_to_the_bundle(tmp_path: Path) -> None:
    tree, cache = _copy(tmp_path), tmp_path / "cache"
    first, hashed = _versions(tree, cache)
    assert first == hashed
    assert (cache / "bundle-version").read_text().split("\n", 1)[0] == first  # kept for the next command
    assert _versions(tree, cache)[0] == first

    agent_file = tree / "remote" / "core" / "protocol.py"
    agent_file.write_text(agent_file.read_text() + "\n# changed\n")  # a new size and times
    changed, hashed = _versions(tree, cache)
    assert changed == hashed and changed != first

    # the same size and modification time, other bytes: the inode's change time still tells
    st = agent_file.stat()
    text = agent_file.read_text()
    agent_file.write_text(text.replace("# changed", "# chanGed"))
    os.utime(agent_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    again, hashed = _versions(tree, cache)
    assert again == hashed and again != changed

    new = tree / "remote" / "core" / "extra_module.py"  # a file more is a new bundle
    new.write_text("X = 1\n")
    assert _versions(tree, cache)[0] not in (first, changed, again)


def test_a_cache_that_cannot_be_written_costs_only_the_hash(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be\n")
    kept, hashed = _versions(tree, blocked / "cache")
    assert kept == hashed
    assert blocked.read_text() == "a file where the cache folder would be\n"
