"""Public training scripts' checkpoint layouts, run unchanged: an image trainer's
``<output>/<experiment>/checkpoint-N.pth.tar`` one folder below ``$GPUJOB_CKPT_DIR`` (found, stepped,
rotated per series, resumed from); a script's own ``checkpoint-<N>/`` folder (complete once renamed
into place); checkpoints written elsewhere in the code (stray, with the line to add); a model saved
only at the end (an artifact, brought by ``pull --latest``)."""

from __future__ import annotations

import json
import os
import re
import signal
import zipfile
from pathlib import Path

from tests.byo_helpers import job_dir, log_text
from tests.conftest import run_cli
from tests.e2e.test_scripts_recipes import recipe
from tests.helpers import status, submit, wait_for, wait_state, write_job
from tests.remote.run.test_agent import training_pid

# in the style of a popular image-classification trainer: tmp.pth.tar renamed to last.pth.tar, then
# hard-linked as checkpoint-<epoch>.pth.tar and model_best.pth.tar (zip archives, as torch.save writes)
IMAGE_TRAINER = """
    import argparse, os, time, zipfile
    p = argparse.ArgumentParser()
    p.add_argument("--output", default="./output/train")
    p.add_argument("--experiment", default="")
    p.add_argument("--resume", default="")
    p.add_argument("--epochs", type=int, default=300)
    a = p.parse_args()
    out = os.path.join(a.output, a.experiment)
    os.makedirs(out, exist_ok=True)
    start = 0
    if a.resume:
        start = int(zipfile.ZipFile(a.resume).read("epoch")) + 1
        print("Restoring model state from checkpoint...", a.resume, "epoch", start, flush=True)
    for epoch in range(start, a.epochs):
        for b in (0, 5, 10):
            print("Train: %d [ %2d/10 (%3d%%)]  Loss: %.3f (%.2f)  Time: 0.050s  LR: 1.000e-03"
                  % (epoch, b, b * 10, 1.0 / (epoch + 1), 1.0 / (epoch + 1)), flush=True)
            time.sleep(0.03)
        tmp = os.path.join(out, "tmp.pth.tar")
        with zipfile.ZipFile(tmp, "w") as z:
            z.writestr("epoch", str(epoch))
        os.replace(tmp, os.path.join(out, "last.pth.tar"))
        os.link(os.path.join(out, "last.pth.tar"), os.path.join(out, "checkpoint-%d.pth.tar" % epoch))
        if os.path.exists(os.path.join(out, "model_best.pth.tar")):
            os.unlink(os.path.join(out, "model_best.pth.tar"))
        os.link(os.path.join(out, "last.pth.tar"), os.path.join(out, "model_best.pth.tar"))
        print("Test: [  10/10]  Loss: 0.700 (0.70)  Acc@1: 80.0 (80.0)", flush=True)
"""


def test_image_trainer_checkpoints_below_the_checkpoint_folder(tmp_path: Path) -> None:
    job = recipe(tmp_path, "image-trainer", {"main.py": IMAGE_TRAINER})  # docs/bring-your-own.md's job file
    job_id = submit("local", job)["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    exp = jd / "ckpt" / "exp1"
    wait_for(lambda: (exp / "checkpoint-3.pth.tar").exists(), 60, lambda: log_text(jd)[-2000:])
    os.kill(training_pid(job_id), signal.SIGKILL)
    st = wait_state("local", job_id, ("succeeded", "failed"), 90, root=jd.parent.parent)
    assert st["state"] == "succeeded" and st["attempt"] == 2, st
    text = log_text(jd)
    resumed = re.search(r"resume from (\S+)\)", text)
    assert resumed and "/exp1/" in resumed.group(1), text[-3000:]
    assert int(re.search(r"Restoring model state.* epoch (\d+)", text).group(1)) >= 4
    # steps from checkpoint-N.pth.tar; keep: 2 per series (and the one resumed from); last/best stay
    wait_for(lambda: len(list(exp.glob("checkpoint-*.pth.tar"))) <= 3, 30, "rotation of the series")
    st = status("local", job_id)
    names = {c["name"]: c for c in st["checkpoints"]}
    assert {"exp1/checkpoint-28.pth.tar", "exp1/checkpoint-29.pth.tar", "exp1/last.pth.tar",
            "exp1/model_best.pth.tar"} <= set(names), names
    assert names["exp1/checkpoint-29.pth.tar"]["step"] == 29 and all(c["complete"] for c in names.values())
    assert "tmp.pth.tar" not in " ".join(names) and not st.get("stray_checkpoints"), st
    # pull --best brings the best the trainer kept itself (it had found none: no eval_loss, no metric in a name);
    # DEST right after --best, as users write it, is no METRIC (it was: "no best (by /tmp/...)")
    r = run_cli("pull", job_id, "--host", "local", "--best", str(tmp_path / "best"), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    assert (tmp_path / "best" / job_id / "ckpt" / "exp1" / "model_best.pth.tar").is_file(), r.stdout
    assert not list((tmp_path / "best" / job_id / "ckpt" / "exp1").glob("checkpoint-*")), r.stdout


# a plain loop with its own layout: checkpoint-<N>/model.pt renamed into place (no Trainer files),
# a copy of its weights in outputs/ (a place gpujob does not watch), a half-written folder left by
# a crash, and the model saved at the end into its working folder (as the MNIST example does)
FOLDERS = """
    import os, sys, zipfile
    ck = os.environ["GPUJOB_CKPT_DIR"]
    folders = sys.argv[1] == "folders"  # else MNIST's example: --epochs 14 --save-model
    if folders:
        os.makedirs(os.path.join(ck, "checkpoint-1"), exist_ok=True)
        with open(os.path.join(ck, "checkpoint-1", "model.pt"), "wb") as f:
            f.write(b"PK\\x03\\x04 cut short")  # a save killed mid-way: never complete
        for step in (2, 4):
            tmp = os.path.join(ck, ".tmp-checkpoint-%d" % step)
            os.makedirs(tmp)
            with zipfile.ZipFile(os.path.join(tmp, "model.pt"), "w") as z:
                z.writestr("step", str(step))
            os.rename(tmp, os.path.join(ck, "checkpoint-%d" % step))
        os.makedirs("outputs", exist_ok=True)
        with zipfile.ZipFile("outputs/weights_4.pt", "w") as z:
            z.writestr("step", "4")
    for epoch in range(1, 3):
        print("Train Epoch: %d [640/60000 (1%%)]\\tLoss: 0.302000" % epoch)
        print("\\nTest set: Average loss: 0.3051, Accuracy: 450/500 (90%)\\n", flush=True)
    with zipfile.ZipFile("mnist_cnn.pt", "w") as z:  # over 1 MiB, stored as it is
        z.writestr("weights", os.urandom(3 << 19))
"""


def test_folder_checkpoints_strays_and_final_artifacts(tmp_path: Path) -> None:
    one = write_job(tmp_path, "ownfolders", FOLDERS, "python main.py folders")
    two = recipe(tmp_path, "no-resume", {"main.py": FOLDERS})
    ids = [submit("local", one)["job_id"], submit("local", two)["job_id"]]
    for job_id in ids:
        jd = job_dir(tmp_path, "local", job_id)
        assert wait_state("local", job_id, ("succeeded", "failed"), 60, root=jd.parent.parent)["state"] == "succeeded"
    st = status("local", ids[0])
    got = {c["name"]: c for c in st["checkpoints"]}
    assert got["checkpoint-4"]["complete"] and got["checkpoint-4"]["kind"] == "folder", got
    assert not got["checkpoint-1"]["complete"] and "cut short" in got["checkpoint-1"]["incomplete_reason"], got
    assert st["stray_checkpoints"]["dir"] == "outputs", st
    assert "checkpoint: {dir: outputs}" in st["stray_checkpoints"]["advice"]
    r = run_cli("status", ids[0])
    assert "incomplete checkpoint-1" in r.stdout and "checkpoint: {dir: outputs}" in r.stdout, r.stdout
    # the job with no checkpoint at all: its final model is an artifact, which pull --latest brings
    st = status("local", ids[1])
    assert st["checkpoints"] == [] and [a["name"] for a in st["artifacts"]] == ["mnist_cnn.pt"], st
    assert st["latest_metrics"]["test_accuracy"] == 90.0 and st["latest_metrics"]["loss"] == 0.302, st
    r = run_cli("status", ids[1], env_extra={"COLUMNS": "200"})
    assert "mnist_cnn.pt (1.5 MiB)  (pull --latest brings them: no checkpoint)" in r.stdout, r.stdout
    dest = tmp_path / "pulled"
    r = run_cli("pull", ids[1], str(dest), "--latest", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert "mnist_cnn.pt" in doc["note"] and "no checkpoint" in doc["note"], doc
    assert zipfile.ZipFile(dest / ids[1] / "code" / "mnist_cnn.pt").read("weights")
    assert not (dest / ids[1] / "code" / "main.py").exists()
    r = run_cli("pull", ids[1], str(dest), "--latest")
    assert r.returncode == 0 and "note: the job wrote no checkpoint" in r.stderr, r.stderr


def test_folder_kinds_and_deep_strays(tmp_path: Path) -> None:
    """A Trainer's half-written ``checkpoint-N/`` (its model's config first) stays an HF one, incomplete;
    a script's own, renamed into place, is a complete generic folder (``is_complete``, which a stop
    waiting for the next checkpoint asks, agrees); checkpoints deeper than discovery looks are strays."""
    from remote.ckpt import checkpoints

    ck = tmp_path / "ckpt"
    (ck / "checkpoint-2").mkdir(parents=True)
    (ck / "checkpoint-2" / "config.json").write_text("{}")
    (ck / "checkpoint-2" / "model.safetensors").write_bytes(b"x")
    for n in (3, 4):
        (ck / f"checkpoint-{n}").mkdir()
        for part in ("model.pt", "optim.pt")[:5 - n]:  # checkpoint-4 cut short between its files (a full disk)
            with zipfile.ZipFile(ck / f"checkpoint-{n}" / part, "w") as z:
                z.writestr("w", "1")
    found = {c.name: c for c in checkpoints.find(ck, pids=[])}
    assert not found["checkpoint-4"].complete and not checkpoints.is_complete(ck / "checkpoint-4", pids=[])
    assert found["checkpoint-4"].reason == "lacks optim.pt that checkpoint-3 holds (a save cut short?)"
    assert checkpoints.latest_complete(ck, pids=[]) == ck / "checkpoint-3"
    (ck / "checkpoint-3" / "model.pt").rename(ck / "checkpoint-3" / "model_3.pt")  # a step in the file name too
    (ck / "checkpoint-4" / "model.pt").rename(ck / "checkpoint-4" / "model_4.pt")
    (ck / "checkpoint-4" / "optim.pt").write_bytes((ck / "checkpoint-3" / "optim.pt").read_bytes())
    assert checkpoints.latest_complete(ck, pids=[]) == ck / "checkpoint-4"
    assert found["checkpoint-2"].kind == "hf" and not found["checkpoint-2"].complete
    assert "trainer_state.json" in found["checkpoint-2"].reason
    assert found["checkpoint-3"].kind == "folder" and found["checkpoint-3"].complete
    assert checkpoints.is_complete(ck / "checkpoint-3", pids=[]) and not checkpoints.is_complete(ck / "checkpoint-2")
    deep = ck / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    with zipfile.ZipFile(deep / "ckpt_5.pt", "w") as z:
        z.writestr("w", "1")
    code = tmp_path / "code"
    code.mkdir()
    assert not any(c.name == "ckpt_5.pt" for c in checkpoints.find(ck, check=False))
    rel = checkpoints.stray_dir(code, 0, ck)
    assert rel == "$GPUJOB_CKPT_DIR/a/b/c/d", rel
    assert "checkpoint: {pattern: 'a/b/c/d/*'}" in checkpoints.stray_advice(rel)


# one save in many parts beside a series of whole checkpoints: numbered shards in a subfolder (the parts of
# one save, named by their index only), a model saved at the end in HF's shards (model-00001-of-00004), and
# ckpt_<N>.pt; all written a while ago (aged by the script: settled, no writer, whatever the machine's load)
PARTS = """
    import json, os, struct, time, zipfile
    ck = os.environ["GPUJOB_CKPT_DIR"]
    old = time.time() - 600
    def aged(path, i):
        os.utime(path, (old + i, old + i))
    os.makedirs(os.path.join(ck, "shards"))
    for i in range(200):
        path = os.path.join(ck, "shards", "%04d.bin" % i)
        with open(path, "wb") as f:
            f.write(os.urandom(64))
        aged(path, i)
    os.makedirs(os.path.join(ck, "final"))
    for i in range(1, 5):
        head = json.dumps({"__metadata__": {"part": str(i)}}).encode()
        path = os.path.join(ck, "final", "model-%05d-of-00004.safetensors" % i)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)  # whole: as long as its header says
        aged(path, 300 + i)
    for step in range(1, 6):
        path = os.path.join(ck, "ckpt_%d.pt" % step)
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("step", str(step))
        aged(path, 400 + step)
    print("saved", flush=True)
"""


def test_rotation_never_deletes_the_parts_of_one_save(tmp_path: Path) -> None:
    """A name that is only a number (``shards/0000.bin``) or a shard's index (``model-00001-of-00004``) was
    read as a step: rotation kept 3 of 1,200 shards (of 4 HF shards) and deleted the rest; a pull then said
    "6 file(s)", exit 0. The parts are no series: all stay; ``ckpt_<N>.pt`` is still rotated to 3."""
    job_id = submit("local", write_job(tmp_path, "parts", PARTS, "python main.py"))["job_id"]
    jd = job_dir(tmp_path, "local", job_id)
    st = wait_state("local", job_id, ("succeeded", "failed"), 60, root=jd.parent.parent)
    assert st["state"] == "succeeded", log_text(jd)[-2000:]
    ck = jd / "ckpt"  # the rotation after the attempt has run: it comes before the final state
    assert sorted(p.name for p in (ck / "shards").iterdir()) == [f"{i:04d}.bin" for i in range(200)]
    assert sorted(p.name for p in (ck / "final").iterdir()) == \
        [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]
    assert sorted(p.name for p in ck.glob("ckpt_*.pt")) == ["ckpt_3.pt", "ckpt_4.pt", "ckpt_5.pt"]
    rotated = [e for e in map(json.loads, (jd / "events.jsonl").read_text().splitlines()) if e["event"] == "rotated"]
    assert [n for e in rotated for n in e["deleted"]] == ["ckpt_1.pt", "ckpt_2.pt"], rotated
    assert [c["name"] for c in status("local", job_id)["checkpoints"]] == ["ckpt_3.pt", "ckpt_4.pt", "ckpt_5.pt"]
