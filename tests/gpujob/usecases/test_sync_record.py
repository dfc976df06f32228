"""The laptop's sync record is written in the cost of what changed (an edit appends to its log,
the base stays), its digest moved entry by entry equals the one computed from every entry and
the agent's, and a damaged, cut or half-appended record, or one in the previous format, never
makes a sync wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpujob.config.paths import cache_dir
from gpujob.usecases.sync.record import Record
from gpujob.usecases.sync.upload import sync_job
from tests.gpujob.usecases.test_sync import agent_for, diff, spec_for
from tests.gpujob.usecases.test_sync_scale import settle, tree


def code_record() -> tuple[Record, Path]:
    """The code tree's record (the one whose log an edit appends to) and its name."""
    heads = sorted((cache_dir() / "sync").glob("*.head"), key=lambda p: p.stat().st_size)
    for h in heads:
        rec = Record(h.with_suffix(".json"))
        if rec.count >= 10:
            return rec, h.with_suffix(".json")
    raise AssertionError(f"no code record among {heads}")


def base_of(name: Path) -> Path:
    (base,) = name.parent.glob(f"{name.stem}.*.json")
    return base


def edit(src: Path, i: int, text: str) -> None:
    (src / f"pkg{i % 20}" / f"module_with_a_long_name_{i}.py").write_text(text)
    settle(src)


@pytest.fixture
def synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A 40-file tree synced to the local host, both ends settled (the next edit is a delta)."""
    src, code = tmp_path / "src", tmp_path / "remote-root" / "projects" / "proj" / "code"
    tree(src, 40)
    monkeypatch.setenv("GPUJOB_LOCAL_ROOT", str(tmp_path / "remote-root"))
    settle(src)
    sync_job(agent_for("local"), spec_for(src), "proj")
    settle(code)
    assert sync_job(agent_for("local"), spec_for(src), "proj").files_sent == 0
    return src, code


def test_an_edit_appends_and_the_digests_agree(synced: tuple[Path, Path]) -> None:
    src, code = synced
    _, name = code_record()
    base = base_of(name)
    before = base.stat().st_mtime_ns, base.read_bytes()

    edit(src, 3, "x = 'changed'\n")
    (src / "pkg4" / "module_with_a_long_name_4.py").unlink()
    (src / "pkg5" / "new.py").write_text("new\n")
    settle(src)
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert (rep.files_sent, rep.deleted) == (2, 1) and diff(src, code) == ""
    assert base_of(name) == base and (base.stat().st_mtime_ns, base.read_bytes()) == before  # not rewritten
    log = name.with_suffix(".log").read_text().splitlines()
    assert sorted(json.loads(line)[0] for line in log) == ["pkg3/module_with_a_long_name_3.py",
                                                           "pkg4/module_with_a_long_name_4.py", "pkg5/new.py"]
    rec, _ = code_record()
    assert rec.count == 40 and rec.digest == rec.compute_digest()  # moved by 3 entries = from all 40

    # the agent computes the same digest: a no-op is its `same` (no manifest, the record kept)
    settle(code)
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert (rep.files_sent, rep.round_trips, rep.unchanged) == (0, 1, 40)
    assert base_of(name) == base and name.with_suffix(".log").read_text().splitlines() == log


def test_a_killed_append_and_a_cut_log(synced: tuple[Path, Path]) -> None:
    src, code = synced
    edit(src, 1, "x = 1\n")
    sync_job(agent_for("local"), spec_for(src), "proj")
    _, name = code_record()
    log = name.with_suffix(".log")
    committed = log.read_bytes()
    base = base_of(name)

    # a sync killed while appending left half a line past what the head committed: not part of the record
    with open(log, "ab") as f:
        f.write(b'["pkg2/module_with_a_long_name_2.py","f",1,')
    edit(src, 2, "x = 2\n")
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert rep.files_sent == 1 and diff(src, code) == ""
    assert log.read_bytes().startswith(committed) and b'"f",1,\n' not in log.read_bytes()
    assert base_of(name) == base  # appended after cutting the half line, not rebuilt
    rec, _ = code_record()
    assert rec.digest == rec.compute_digest()

    # a committed line cut off (a damaged log): stale, the host's manifest decides, the record is rebuilt
    data = log.read_bytes()
    log.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    edit(src, 5, "x = 5\n")
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert rep.files_sent == 1 and diff(src, code) == ""
    assert base_of(name) != base
    settle(code)
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert (rep.files_sent, rep.round_trips) == (0, 1)


def test_a_record_in_the_previous_format(synced: tuple[Path, Path]) -> None:
    """Read once (its entries given the new digest) and rewritten; one whose entries no longer
    describe the host is found out by the digest, never trusted."""
    src, code = synced
    rec, name = code_record()

    def previous_format(files: dict) -> None:
        old_digest = "ab" * 32  # the previous format's digest: any value its head and document share
        name.write_text(json.dumps({"digest": old_digest, "files": files, "links": dict(rec.links),
                                    "dirs": list(rec.dirs)}))
        name.with_suffix(".head").write_text(json.dumps({"digest": old_digest, "stamp": rec.stamp,
                                                         "lstamp": rec.lstamp, "count": len(files)}))
        for p in [*name.parent.glob(f"{name.stem}.*.json"), name.with_suffix(".log")]:
            p.unlink(missing_ok=True)

    previous_format(dict(rec.files))
    converted = Record(name)
    assert converted.digest == rec.digest and not name.exists() and base_of(name).exists()
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert (rep.files_sent, rep.round_trips, rep.unchanged) == (0, 1, 40)

    # its entries name content the host no longer has: the digests differ, the host's manifest decides
    victim = code / "pkg6" / "module_with_a_long_name_6.py"
    victim.write_text("edited on the host\n")
    files = dict(rec.files)
    previous_format(files)
    settle(code)
    rep = sync_job(agent_for("local"), spec_for(src), "proj")
    assert rep.files_sent == 1 and diff(src, code) == ""


def test_the_log_is_folded_into_a_new_base(tmp_path: Path) -> None:
    name = tmp_path / "sync" / "r.json"
    first = Record.blank(name)
    first.set({f"f{i}": [1, 2, 3, 4, 0o644, f"h{i}"] for i in range(2000)}, {"ln": "f0"}, ["d"])
    first.digest = first.compute_digest()
    first.save()
    base = base_of(name)
    for round_ in range(60):  # each round changes 100 entries: the log passes a quarter of the base
        rec = Record(name)
        after = Record(None)
        after.derive(rec)
        for i in range(100):
            after.put_file(f"f{(round_ * 100 + i) % 2000}", [1, 2, 3, 4, 0o644, f"h{round_}-{i}"])
        after.put("ln", None)
        after.put(f"new{round_}", ("l", "f1"))
        after.digest = after.compute_digest()
        after.save()
        if base_of(name) != base:
            break
    assert base_of(name) != base and name.with_suffix(".head").exists()
    assert json.loads(name.with_suffix(".head").read_text())["log"] == 0
    final = Record(name)
    assert final.digest == final.compute_digest() and final.count == 2000 and "ln" not in final.links
    assert final.files[f"f{round_ * 100 % 2000}"][5] == f"h{round_}-0" and final.links[f"new{round_}"] == "f1"


def test_racy_lines_are_dropped_exactly() -> None:
    """The scan's racy-line filter compares ctimes as text first: it drops exactly the lines
    ``stream.racy`` calls racy (whole-second stamps get the wide window), none other."""
    import random
    import time

    from gpujob.usecases.sync.tree import drop_racy, stream

    now = time.time_ns()
    sec = now // 10 ** 9
    rnd = random.Random(7)
    lines = []
    for i in range(400):
        c = rnd.choice([sec - 1000, sec - 3, sec - 2, sec - 1, sec, sec + 5])
        frac = rnd.choice([0, rnd.randint(1, 10 ** 9 - 1), now % 10 ** 9, (now - 10 ** 8) % 10 ** 9])
        lines.append(b"%d.%09d0 %d.0000000000 f 644 10 %d f%d.py" % (c, frac, c, i, i))
    kept = [line for line in lines if not stream.racy(stream.find_ns(line.split(b" ", 1)[0]), now)]
    assert 0 < len(kept) < len(lines)
    assert drop_racy(b"".join(line + b"\0" for line in lines), now) == (b"".join(line + b"\0" for line in kept), True)
    assert drop_racy(b"".join(line + b"\0" for line in kept), now) == (b"".join(line + b"\0" for line in kept), False)
