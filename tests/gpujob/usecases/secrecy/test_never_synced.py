"""Nothing secret is uploaded, whatever the ignore files say (issue 25 item 2, docs/security.md).

One project holds one file of each kind the exclusion layer knows; a real submit to the
built-in host uploads the project and the test reads the tree the host received."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

TOKEN = "tok-9f3b27c1d5e8a6"  # a value of the gpujob secrets file
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"

# relative path → content: each one must never reach the host (one per kind)
SECRET_FILES = {
    ".ssh/config": "Host *\n",  # the ~/.ssh folder, whatever it holds
    ".ssh/known_hosts": "x\n",
    "id_ed25519": "not even a key\n",  # a private key by its name
    "deploy/server.pem": PEM,  # by its content
    "notes/mykey": KEY,  # an OpenSSH key by its content, no telling name
    ".env": f"HOOK_TOKEN={TOKEN}\n",  # a .env file with a declared secret's value
    "settings.py": f"TOKEN = '{TOKEN}'\n",  # any file holding it
    ".aws/credentials": "[default]\n",
    ".netrc": "machine x login y password z\n",
    ".docker/config.json": '{"auths": {}}\n',
    ".kaggle/kaggle.json": '{"key": "k"}\n',
    ".huggingface/token": "hf_x\n",
    ".cache/huggingface/token": "hf_y\n",
    "cfg/notes.txt": "gpujob's config folder: nothing in it is sent\n",
}
KEPT = {"main.py": "print('ran', flush=True)\n", "id_ed25519.pub": "ssh-ed25519 AAAA gpujob\n",
        ".docker/Dockerfile": "FROM x\n", "data/train.txt": "ordinary\n"}


def _project(base: Path) -> Path:
    d = base / "proj"
    for rel, text in {**SECRET_FILES, **KEPT}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    (d / ".gpujobignore").write_text("!.ssh/\n!id_*\n!.env\n")  # the ignore files cannot take them back
    (d / "job.yaml").write_text(json.dumps({"name": "leaky", "run": "python main.py"}))
    return d


def _received(root: Path) -> set[str]:
    code = root / "projects" / "leaky" / "code"
    return {p.relative_to(code).as_posix() for p in code.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize("filler", [0, 300])
def test_no_key_or_credential_is_uploaded(tmp_path: Path, filler: int) -> None:
    """``filler`` ordinary files more: past ``PREPASS_MAX`` the contents are checked by the stream as
    it reads each file (a first sync reads a file once), with the same outcome."""
    from gpujob.usecases.secrets.never_sent import PREPASS_MAX

    d = _project(tmp_path)
    for i in range(filler):
        (d / "pkg" / f"m{i}.py").parent.mkdir(exist_ok=True)
        (d / "pkg" / f"m{i}.py").write_text(f"x = {i}\n")
    assert filler == 0 or filler > PREPASS_MAX
    cfg = d / "cfg"  # gpujob's own config folder inside the project: its key and secrets file
    (cfg / "secrets.env").write_text(f"HOOK_TOKEN={TOKEN}\n")
    (cfg / "secrets.env").chmod(0o600)
    env = {"GPUJOB_CONFIG_DIR": str(cfg)}
    r = run_cli("submit", str(d / "job.yaml"), "--host", "local", "--json", env_extra=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "not uploaded, never sent to an instance" in r.stderr
    got = _received(tmp_path / "local-root")
    assert set(KEPT) | {f"pkg/m{i}.py" for i in range(filler)} <= got, got
    assert json.loads(r.stdout)["sync"]["files_sent"] == len(got), r.stdout
    leaked = sorted(got & (set(SECRET_FILES) | {"cfg/secrets.env", "cfg/id_ed25519", "cfg/hosts.yaml"}))
    assert not leaked, leaked
    assert not any(p.startswith((".ssh", "cfg/")) for p in got), got
    code = tmp_path / "local-root" / "projects" / "leaky" / "code"
    for p in code.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert TOKEN.encode() not in data and b"PRIVATE KEY" not in data, p
    # a second submit is a no-op: the withheld files leave no gap in the record that resends them
    r = run_cli("submit", str(d / "job.yaml"), "--host", "local", "--json", env_extra=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sync"]["files_sent"] == 0


def test_home_folder_and_huge_workdirs_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(KEY)
    (home / "Documents").mkdir()
    (home / "main.py").write_text("print('ran')\n")
    (home / "job.yaml").write_text(json.dumps({"name": "homejob", "run": "python main.py"}))
    env = {"HOME": str(home)}
    r = run_cli("submit", str(home / "job.yaml"), "--host", "local", env_extra=env)
    assert r.returncode == 2, r.stderr
    assert "is your home folder" in r.stderr and "Documents/" in r.stderr and "workdir:" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "local-root" / "projects" / "homejob").exists()
    r = run_cli("submit", str(home / "job.yaml"), "--host", "local", "--force", "--json", env_extra=env)
    assert r.returncode == 0, r.stderr
    got = {p.name for p in (tmp_path / "local-root" / "projects" / "homejob" / "code").rglob("*")}
    assert "main.py" in got and "id_rsa" not in got and ".ssh" not in got, got

    d = tmp_path / "big"
    d.mkdir()
    for i in range(12):
        (d / f"f{i}.txt").write_text("x")
    (d / "job.yaml").write_text(json.dumps({"name": "big", "run": "true"}))
    r = run_cli("submit", str(d / "job.yaml"), "--host", "local", env_extra={"GPUJOB_WORKDIR_MAX_FILES": "10"})
    assert r.returncode == 2 and "holds 13 files" in r.stderr and "exclude" in r.stderr, r.stderr
    assert os.environ.get("HOME") != str(home)


@pytest.mark.parametrize("rel,content", [(r, c) for r, c in SECRET_FILES.items() if not r.startswith("cfg/")])
def test_each_kind_is_known_by_its_name_or_content(tmp_path: Path, rel: str, content: str) -> None:
    """One row per kind: what the exclusion layer says about it, alone."""
    from gpujob.usecases.secrets.never_sent import why_secret_content, why_secret_name

    f = tmp_path / "f"
    f.write_text(content)
    why = why_secret_name(rel) or why_secret_content(str(f), f.stat().st_size, {"HOOK_TOKEN": TOKEN})
    assert why, rel


@pytest.mark.parametrize("rel", list(KEPT) + ["keys.py", "src/id_generator.py", "tokenizer.json", "docs/ssh.md"])
def test_ordinary_files_are_sent(tmp_path: Path, rel: str) -> None:
    from gpujob.usecases.secrets.never_sent import why_secret_content, why_secret_name

    f = tmp_path / "f"
    f.write_text("def main():\n    return 'BEGIN'\n")
    assert why_secret_name(rel) is None and why_secret_content(str(f), f.stat().st_size, {"HOOK_TOKEN": TOKEN}) is None
