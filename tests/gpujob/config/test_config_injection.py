"""Values written into files other programs read are refused when they could add a line or break
quoting (issue 25 item 6): at ``host add``/``host set``, and in a profile already stored."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli

EVIL_IDENTITY = "/k\n  ProxyCommand touch {pwned}"


def _home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    return {"HOME": str(home)}


def test_newlines_and_quotes_are_refused_at_host_add_and_set(tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    env = _home(tmp_path)
    line = "ssh -p 2222 root@127.0.0.1"
    for extra in (["--identity", EVIL_IDENTITY.format(pwned=pwned)], ["--identity", '/k"ey'],
                  ["--root", "/r\nx"]):
        r = run_cli("host", "add", "x", "--ssh", line, "--no-check", *extra, env_extra=env)
        assert r.returncode == 2, (extra, r.stderr)
        assert "holds a newline, a control character or a quote" in r.stderr and "nothing was saved" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    r = run_cli("host", "add", "x", "--ssh", "ssh -l 'root\nProxyCommand touch x' 127.0.0.1", "--no-check", env_extra=env)
    assert r.returncode == 2 and "user" in r.stderr, r.stderr
    from gpujob.config.hosts import HostStore

    assert [h.name for h in HostStore().all()] == ["local"]
    r = run_cli("host", "add", "x", "--ssh", line, "--no-check", "--identity", "/my keys/id", env_extra=env)
    assert r.returncode == 0, r.stderr  # a space is fine: the ssh_config value is quoted
    r = run_cli("host", "set", "x", "--identity", EVIL_IDENTITY.format(pwned=pwned), env_extra=env)
    assert r.returncode == 2 and "identity_file" in r.stderr, r.stderr
    r = run_cli("ssh", "x", "--print", env_extra=env)
    assert r.returncode == 0 and 'IdentityFile "/my keys/id"' in r.stdout, r.stdout + r.stderr
    assert not pwned.exists()


def test_a_stored_profile_with_a_newline_is_refused_at_use(tmp_path: Path, isolated: Path) -> None:
    pwned = tmp_path / "PWNED"
    env = _home(tmp_path)
    isolated.mkdir(parents=True, exist_ok=True)
    (isolated / "hosts.yaml").write_text(
        "hosts:\n  x:\n    hostname: 127.0.0.1\n    port: 2222\n    user: root\n"
        f"    identity_file: \"/k\\n  ProxyCommand touch {pwned}\"\n")
    for args in (("ssh", "x", "--", "true"), ("ls", "--host", "x"), ("exec", "x", "--", "true")):
        r = run_cli(*args, env_extra=env, timeout=60)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert "host profile x in hosts.yaml" in r.stderr and "gpujob host rm x" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not pwned.exists()
    assert not (Path(env["HOME"]) / ".ssh" / "config").exists()  # nothing was written into ssh's config
    assert run_cli("host", "rm", "x", env_extra=env).returncode == 0  # the way out still works
