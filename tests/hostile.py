"""A hostile program in place of the agent: what the tests of a hostile host share."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli


def install_hostile(tmp_path: Path, root: str, program: str, host: str = "local") -> str:
    """Install the real agent under ``tmp_path/root`` (one ``ls``), then record ``program`` (a script,
    written to ``tmp_path/hostile-agent``) as its interpreter: every verb runs it. Returns the real
    interpreter, for a program that hands some verbs on."""
    r = run_cli("ls", "--host", host, env_extra={"GPUJOB_MUX": "0"})
    assert r.returncode == 0, r.stderr
    [version] = [p for p in (tmp_path / root / "agent").iterdir() if (p / "ok").exists()]
    real = (version / "python").read_text().strip()
    prog = tmp_path / "hostile-agent"
    prog.write_text(program)
    prog.chmod(0o755)
    (version / "python").write_text(f"{prog}\n")
    return real
