"""remote/ckpt/checkpoints/: finding, ordering, completeness and rotation of every kind, on files
written by the real libraries (torch.save, safetensors, Lightning, the HF Trainer, accelerate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "remote" / "ckpt"))
import checkpoints as ck  # noqa: E402

from tests.helpers import needs  # noqa: E402


def hf(d: Path, step: int, complete: bool = True, rng: list[str] | None = None, incomplete_flag: bool = False) -> Path:
    p = d / f"checkpoint-{step}"
    p.mkdir(parents=True)
    (p / "model.safetensors").write_bytes(b"x")
    for name in (rng if rng is not None else ["rng_state.pth"]):
        (p / name).write_bytes(b"r")
    if complete:
        (p / "trainer_state.json").write_text("{}")
    if incomplete_flag:
        (p / "checkpoint-is-incomplete.txt").write_text("")
    return p


def own(d: Path, step: int, complete: bool = True) -> Path:
    p = d / f"step-{step}"
    p.mkdir(parents=True)
    (p / "state.pt").write_bytes(b"s")
    if complete:
        (p / ck.COMPLETE_MARKER).write_text("")
    return p


def test_hf_completeness(tmp_path: Path) -> None:
    assert ck.is_complete(hf(tmp_path, 1))
    assert not ck.is_complete(hf(tmp_path, 2, complete=False))           # no trainer_state.json
    assert not ck.is_complete(hf(tmp_path, 3, rng=[]))                    # no rng file
    assert not ck.is_complete(hf(tmp_path, 4, incomplete_flag=True))
    assert ck.is_complete(hf(tmp_path, 5, rng=["rng_state_0.pth", "rng_state_1.pth"]))
    gap = hf(tmp_path, 6, rng=["rng_state_0.pth", "rng_state_2.pth"])
    assert not ck.is_complete(gap)                                        # rank 1 missing
    two = hf(tmp_path, 7, rng=["rng_state_0.pth", "rng_state_1.pth"])
    assert ck.is_complete(two, world_size=2) and not ck.is_complete(two, world_size=4)
    assert not ck.is_complete(tmp_path / "checkpoint-99")


def test_own_layout_and_listing(tmp_path: Path) -> None:
    own(tmp_path, 10)
    own(tmp_path, 20, complete=False)
    hf(tmp_path, 5)
    (tmp_path / ".tmp-step-30").mkdir()
    (tmp_path / "best").mkdir()
    (tmp_path / "step-x").mkdir()
    (tmp_path / "step-40").write_text("a file, not a folder")
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step-10", "step-20", "checkpoint-5"]  # series by time
    assert ck.latest_complete(tmp_path).name == "checkpoint-5"
    assert ck.latest_complete(tmp_path, pattern="step-*").name == "step-10"  # step-20 has no marker
    assert ck.latest_complete(tmp_path / "nope") is None
    assert ck.list_checkpoints(tmp_path / "nope") == []


def age(p: Path, seconds: float = 3600) -> Path:
    """Make ``p`` (and what is in it) look ``seconds`` old."""
    t = time.time() - seconds
    for q in [p, *(p.rglob("*") if p.is_dir() else [])]:
        os.utime(q, (t, t), follow_symlinks=False)
    return p


def test_rotation_keeps_newest_complete(tmp_path: Path) -> None:
    for s in (1, 2, 3, 4, 5):
        own(tmp_path, s)
    own(tmp_path, 6, complete=False)   # being written: newer than the newest complete, kept
    age(hf(tmp_path, 0, complete=False))  # half-written, old and unchanged for long: deleted
    (tmp_path / ".tmp-step-3").mkdir()
    age(tmp_path / ".tmp-step-3")      # stale tmp older than the newest complete: deleted
    hf(tmp_path, 1, complete=False)    # half-written but changed just now: it may still be written
    deleted = ck.rotate(tmp_path, keep=2)
    assert sorted(p.name for p in deleted) == [".tmp-step-3", "checkpoint-0", "step-1", "step-2", "step-3"]
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step-4", "step-5", "step-6", "checkpoint-1"]
    ck.rotate(tmp_path, keep=0)        # never below one: the newest complete survives
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step-5", "step-6", "checkpoint-1"]


def test_rotation_without_complete_deletes_nothing(tmp_path: Path) -> None:
    own(tmp_path, 1, complete=False)
    hf(tmp_path, 2, complete=False)
    assert ck.rotate(tmp_path, keep=1) == []
    assert len(ck.list_checkpoints(tmp_path)) == 2


def test_python38_compatible_source() -> None:
    import ast

    src = (Path(ck.__file__)).read_text()
    tree = ast.parse(src, feature_version=(3, 8))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names)


def test_the_package_stands_alone() -> None:
    """Every module of the package (shipped to the job as ``gpujob_checkpoints``) is Python 3.8 and imports
    only the standard library and, relatively, its own siblings: nothing of ``remote`` it would not find there."""
    import ast

    folder = Path(ck.__file__).parent
    own = {p.stem for p in folder.glob("*.py")}
    assert len(own) > 1
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path), feature_version=(3, 8))
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                assert {a.name.split(".")[0] for a in n.names} <= set(sys.stdlib_module_names), path
            elif isinstance(n, ast.ImportFrom) and n.level == 0:
                assert n.module.split(".")[0] in sys.stdlib_module_names, (path, n.module)
            elif isinstance(n, ast.ImportFrom):
                assert n.level == 1 and ({n.module} if n.module else {a.name for a in n.names}) <= own, (path, n.module)


# ---- single files from torch.save / safetensors -------------------------------------------
def tsave(path: Path, step: int, **kw: object) -> Path:
    import torch

    torch.save({"step": step, "w": torch.full((64,), float(step))}, path, **kw)
    return path


def kinds(found: list) -> list[tuple]:
    return [(c.name, c.kind, c.step, c.complete) for c in found]


def test_single_files_ordered_by_step_and_whole_by_format(tmp_path: Path) -> None:
    needs("torch")
    import torch
    from safetensors.torch import save_file

    for s in (5, 10, 100):
        tsave(tmp_path / f"checkpoint_{s}.pt", s)
    whole = (tmp_path / "checkpoint_100.pt").read_bytes()
    (tmp_path / "checkpoint_200.pt").write_bytes(whole[: len(whole) // 2])  # killed in the middle of torch.save
    tsave(tmp_path / "checkpoint_300.pt.tmp", 300)                          # temporary names are never checkpoints
    tsave(tmp_path / ".checkpoint_400.pt", 400)
    assert kinds(ck.find(tmp_path)) == [  # by number, not by name: 5 < 10 < 100
        ("checkpoint_5.pt", "file", 5, True), ("checkpoint_10.pt", "file", 10, True),
        ("checkpoint_100.pt", "file", 100, True), ("checkpoint_200.pt", "file", 200, False)]
    newest = ck.latest_complete(tmp_path)
    assert newest == tmp_path / "checkpoint_100.pt" and torch.load(newest)["step"] == 100
    assert ck.is_complete(newest) and not ck.is_complete(tmp_path / "checkpoint_200.pt")
    st = tmp_path / "st"
    st.mkdir()
    save_file({"w": torch.zeros(16)}, str(st / "model_7.safetensors"))
    (st / "model_8.safetensors").write_bytes((st / "model_7.safetensors").read_bytes()[:-8])  # shorter than its header
    assert kinds(ck.find(st)) == [("model_7.safetensors", "file", 7, True), ("model_8.safetensors", "file", 8, False)]


def test_torch_save_interrupted_by_an_exception_is_not_complete(tmp_path: Path) -> None:
    """torch.save stopped by an exception (KeyboardInterrupt from a stop's SIGINT while a GPT trainer
    overwrites its ckpt.pt) writes the zip's end on its way out: a zip that reads whole, lacking the
    tensors after the interruption. torch.load fails on it, so it is no checkpoint to resume or pull."""
    needs("torch")
    import zipfile

    import torch

    whole = tsave(tmp_path / "ckpt_1.pt", 1)
    torch.save({"model": torch.nn.Linear(4, 4).state_dict(), "iter_num": 2}, tmp_path / "ckpt_2.pt")
    cut = tmp_path / "ckpt_2.pt"
    with zipfile.ZipFile(cut) as z:
        records = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(cut, "w") as z:  # the same archive without its last tensor record
        for info, data in records:
            if not info.filename.endswith("/data/1"):
                z.writestr(info, data)
    with pytest.raises(RuntimeError):
        torch.load(cut)
    c = ck.find(tmp_path)
    assert kinds(c) == [("ckpt_1.pt", "file", 1, True), ("ckpt_2.pt", "file", 2, False)]
    assert "cut short" in c[1].reason and ck.latest_complete(tmp_path) == whole


def test_unknown_format_must_settle_and_names_without_step_go_by_time(tmp_path: Path) -> None:
    needs("torch")
    legacy = tsave(tmp_path / "weights.pth", 1, _use_new_zipfile_serialization=False)  # no zip: no format check
    assert not ck.is_complete(legacy)                       # just written: it may still grow
    age(legacy, 60)
    assert ck.is_complete(legacy)
    tsave(tmp_path / "best.pt", 2)
    age(tmp_path / "best.pt", 30)                            # newer than weights.pth, older than model.bin
    tsave(tmp_path / "model.bin", 3)
    assert [c.name for c in ck.find(tmp_path)] == ["weights.pth", "best.pt", "model.bin"]
    assert ck.latest_complete(tmp_path).name == "model.bin"


HOLDER = """
import sys, time
src, dst = sys.argv[1], sys.argv[2]
f = open(dst, "wb")
f.write(open(src, "rb").read())   # every byte there, but the writer has not closed it
f.flush()
print("ready", flush=True)
sys.stdin.readline()
f.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def test_a_file_open_for_writing_by_a_job_process_is_not_complete(tmp_path: Path) -> None:
    needs("torch")
    src = tsave(tmp_path / "src.pt", 9)
    d = tmp_path / "ck"
    d.mkdir()
    age(tsave(d / "checkpoint_1.pt", 1))
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(src), str(d / "checkpoint_2.pt")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        # whole by its format (a zip needs no settling): only the open fd says no
        assert not ck.is_complete(d / "checkpoint_2.pt")             # any process (the runtime helper's view)
        assert [c.complete for c in ck.find(d, pids=[p.pid])] == [True, False]  # the job's processes
        assert [c.complete for c in ck.find(d, pids=[])] == [True, True]
        assert ck.latest_complete(d, pids=[p.pid]).name == "checkpoint_1.pt"
        assert ck.rotate(d, keep=1, pids=[p.pid]) == []              # the one being written is kept
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "closed"
        assert ck.is_complete(d / "checkpoint_2.pt") and ck.latest_complete(d, pids=[p.pid]).name == "checkpoint_2.pt"
        assert [q.name for q in ck.rotate(d, keep=1, pids=[p.pid])] == ["checkpoint_1.pt"]
    finally:
        p.kill()
        p.wait()


def test_renamed_into_place_is_complete_at_once(tmp_path: Path) -> None:
    needs("torch")
    tmp = tsave(tmp_path / "checkpoint_3.pt.tmp", 3)
    assert ck.find(tmp_path) == []
    os.replace(tmp, tmp_path / "checkpoint_3.pt")
    assert ck.latest_complete(tmp_path) == tmp_path / "checkpoint_3.pt"


def test_deepspeed_global_step_folders_follow_latest(tmp_path: Path) -> None:
    needs("torch")
    for s in (10, 20):
        g = tmp_path / f"global_step{s}"
        g.mkdir()
        tsave(g / "mp_rank_00_model_states.pt", s)
        tsave(g / "zero_pp_rank_0_mp_rank_00_optim_states.pt", s)
    (tmp_path / "latest").write_text("global_step10")
    (tmp_path / "zero_to_fp32.py").write_text("# DeepSpeed's helper\n")
    assert kinds(ck.find(tmp_path)) == [("global_step10", "deepspeed", 10, True), ("global_step20", "deepspeed", 20, False)]
    (tmp_path / "latest").write_text("global_step20")        # DeepSpeed writes latest after the save
    assert [c.complete for c in ck.find(tmp_path)] == [True, True]
    assert ck.latest_complete(tmp_path).name == "global_step20"


def test_loose_files_beside_checkpoint_folders_are_not_checkpoints(tmp_path: Path) -> None:
    needs("torch")
    hf(tmp_path, 4)
    tsave(tmp_path / "pytorch_model.bin", 0)
    tsave(tmp_path / "training_args.bin", 0)
    assert [c.name for c in ck.find(tmp_path)] == ["checkpoint-4"]
    assert [c.name for c in ck.find(tmp_path, pattern="*.bin")] == ["pytorch_model.bin"]  # asked for, side files not


# ---- what the libraries write, for real ----------------------------------------------------
LIGHTNING_MODEL = """
import torch
import lightning as L
class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, b, i):
        return torch.nn.functional.mse_loss(self.net(b[0]), b[1])
    def validation_step(self, b, i):
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(b[0]), b[1]))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)
"""
LIBS = r'''
import sys, time
from pathlib import Path
import torch
out = Path(sys.argv[1])
torch.manual_seed(0)
# Lightning: the monitored value in the name, save_last; a resumed fit; then a fresh fit into the
# same folder (a restart that does not resume writes *-v1.ckpt and last-v1.ckpt)
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
X = torch.randn(32, 4); Y = X.sum(1, keepdim=True)
''' + LIGHTNING_MODEL + r'''
def fit(epochs, ckpt_path=None):
    cb = ModelCheckpoint(dirpath=str(out / "lightning"), filename="{epoch}-{step}-{val_loss:.4f}", monitor="val_loss",
                         save_top_k=-1, save_last=True)
    t = L.Trainer(max_epochs=epochs, limit_train_batches=4, limit_val_batches=2, logger=False, accelerator="cpu",
                  enable_progress_bar=False, enable_model_summary=False, callbacks=[cb], num_sanity_val_steps=0)
    dl = DataLoader(TensorDataset(X, Y), batch_size=4)
    t.fit(M(), dl, dl, ckpt_path=ckpt_path)
fit(3)
fit(4, ckpt_path=str(out / "lightning" / "last.ckpt"))
time.sleep(0.02)
fit(1)
# HF Trainer on a tiny GPT-2: checkpoint-2 and checkpoint-4, evaluated (best_model_checkpoint), then
# the final model saved beside them
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=16))
rows = [{"input_ids": torch.randint(0, 32, (8,))} for _ in range(16)]
for r in rows:
    r["labels"] = r["input_ids"]
args = TrainingArguments(output_dir=str(out / "hf"), max_steps=4, save_steps=2, eval_steps=2, eval_strategy="steps",
                         per_device_train_batch_size=4, report_to=[], use_cpu=True, logging_steps=1,
                         load_best_model_at_end=True, metric_for_best_model="eval_loss", disable_tqdm=True)
tr = Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows[:4])
tr.train()
tr.save_model(str(out / "hf"))
# accelerate save_state: a plain folder, then automatic naming (project_dir/checkpoints/checkpoint_<n>)
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
acc = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=str(out / "acc")))
net, opt = acc.prepare(torch.nn.Linear(4, 2), torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1))
acc.save_state(str(out / "acc" / "step_7"))
acc.project_configuration.automatic_checkpoint_naming = True
for _ in range(3):
    acc.save_state()
print("written", flush=True)
'''


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs("torch", "lightning", "transformers", "accelerate")
    out = tmp_path_factory.mktemp("libs")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-c", LIBS, str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert "written" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]
    return out


def copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)
    return dst


def test_lightning_ckpt_files(libs: Path, tmp_path: Path) -> None:
    import torch

    d = copy(libs / "lightning", tmp_path / "l")
    found = ck.find(d)
    assert all(c.kind == "lightning" and c.complete for c in found)
    assert {c.name for c in found if c.step is None} == {"last.ckpt", "last-v1.ckpt"}
    assert [c.step for c in found if c.step is not None] == [4, 4, 8, 12, 16]
    assert found[-1].name == "last-v1.ckpt"                    # the fresh run's: newest by time, not by name
    step16 = next(c for c in found if c.step == 16)
    assert set(step16.metrics) == {"val_loss"} and step16.metrics["val_loss"] < 1
    best = ck.best(found)                                      # the one monitored value in the names
    assert best is not None and best.metrics["val_loss"] == min(c.metrics.get("val_loss", 9e9) for c in found)
    assert torch.load(ck.latest_complete(d), weights_only=False)["global_step"] == 4
    # keep 1: per series the newest (step 16, also the best by val_loss); last*.ckpt always stay
    deleted = sorted(p.name for p in ck.rotate(d, keep=1))
    assert deleted == sorted(c.name for c in found if c.step is not None and c.step < 16)
    assert sorted(p.name for p in d.iterdir()) == sorted(["last.ckpt", "last-v1.ckpt", step16.name])
    (d / "last.ckpt").unlink()
    os.symlink(step16.name, d / "last.ckpt")                   # save_last="link"
    (d / "last-v1.ckpt").unlink()
    assert ck.latest_complete(d).resolve() == step16.path and ck.rotate(d, keep=1) == []


def test_hf_trainer_checkpoints(libs: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    d = copy(libs / "hf", tmp_path / "hf")
    found = ck.find(d)
    assert kinds(found) == [("checkpoint-2", "hf", 2, True), ("checkpoint-4", "hf", 4, True)]  # final files beside: no
    assert AutoModelForCausalLM.from_pretrained(str(ck.latest_complete(d))).config.n_embd == 16
    state = json.loads((d / "checkpoint-4" / "trainer_state.json").read_text())
    assert ck.best(found).name == Path(state["best_model_checkpoint"]).name
    assert ck.best(found, "loss", None) is not None           # the history in trainer_state.json's log
    (d / "checkpoint-4" / "trainer_state.json").unlink()       # as if killed before the Trainer's last write
    assert ck.latest_complete(d).name == "checkpoint-2"


def test_accelerate_save_state_folders(libs: Path, tmp_path: Path) -> None:
    d = copy(libs / "acc", tmp_path / "acc")
    found = ck.find(d)
    assert kinds(found) == [("step_7", "accelerate", 7, True), ("checkpoint_1", "accelerate", 1, True),
                            ("checkpoint_2", "accelerate", 2, True), ("checkpoint_3", "accelerate", 3, True)]
    assert ck.latest_complete(d).name == "checkpoint_3"       # by time across series: 7 counts steps, 3 saves
    (d / "checkpoints" / "checkpoint_3" / "random_states_0.pkl").unlink()  # accelerate writes it last
    assert ck.latest_complete(d).name == "checkpoint_2"
    half = copy(d / "checkpoints" / "checkpoint_1", d / "checkpoints" / "checkpoint_0")
    (half / "random_states_0.pkl").unlink()
    age(half)
    # keep 1 of the series; a stale half-written older one goes; the half-written newest may be rewritten
    assert sorted(p.name for p in ck.rotate(d, keep=1)) == ["checkpoint_0", "checkpoint_1"]
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["checkpoint_2", "checkpoint_3"]


def test_keep_rotates_every_kind_in_one_folder(tmp_path: Path) -> None:
    needs("torch")
    for s in (1, 2, 3):
        age(tsave(tmp_path / f"checkpoint_{s}.pt", s), 100 - s)
        age(tsave(tmp_path / f"epoch=0-step={s}.ckpt", s), 100 - s)
        age(own(tmp_path, s), 100 - s)
        age(hf(tmp_path, s), 100 - s)
        g = tmp_path / f"global_step{s}"
        g.mkdir()
        age(tsave(g / "mp_rank_00_model_states.pt", s), 100 - s)
        a = tmp_path / f"checkpoint_{s}"
        a.mkdir()
        age(tsave(a / "random_states_0.pkl", s), 100 - s)
    (tmp_path / "latest").write_text("global_step3")
    tsave(tmp_path / "last.ckpt", 3)
    assert "checkpoint_1.pt" not in [c.name for c in ck.find(tmp_path)]  # loose files beside folders: not counted
    deleted = ck.rotate(tmp_path, keep=2, protect=[tmp_path / "step-1"])  # step-1: the one being resumed
    assert sorted(p.name for p in deleted) == ["checkpoint-1", "checkpoint_1", "epoch=0-step=1.ckpt", "global_step1"]
    assert (tmp_path / "step-1").is_dir() and (tmp_path / "last.ckpt").is_file()
    assert [p.name for p in ck.rotate(tmp_path, keep=2, pattern="*.pt")] == ["checkpoint_1.pt"]  # asked for by glob


def test_best_by_metric_history(tmp_path: Path) -> None:
    needs("torch")
    job = tmp_path / "job"
    d = job / "ckpt"
    d.mkdir(parents=True)
    for s in (100, 200, 300):
        tsave(d / f"checkpoint_{s}.pt", s)
    (job / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "eval_loss": v, "acc": 1 - v}) + "\n"
                                               for s, v in ((100, 0.9), (200, 0.4), (250, 0.1), (300, 0.6))))
    found = ck.find(d)
    assert ck.best(found, "eval_loss", job).name == "checkpoint_200.pt"  # step 250 has no checkpoint
    assert ck.best(found, None, job).name == "checkpoint_200.pt"         # eval_loss by default
    assert ck.best(found, "acc", job).name == "checkpoint_200.pt"        # accuracy: higher is better
    assert ck.best(found, "nothing", job) is None


def test_step_and_metrics_in_names() -> None:
    assert [ck.step_of(n) for n in ("checkpoint-7", "global_step12", "checkpoint_3", "epoch=2-step=300.ckpt",
                                    "epoch=2-val_loss=0.02.ckpt", "last.ckpt", "last-v1.ckpt", "model_000100.pt",
                                    "ckpt_step_50.safetensors", "iter90.pth", "final.pt")] == \
        [7, 12, 3, 300, None, None, None, 100, 50, 90, None]
    assert ck.name_metrics("epoch=2-step=30-val_loss=0.0213-val_acc=-1.5e-3.ckpt") == {"val_loss": 0.0213,
                                                                                       "val_acc": -0.0015}


def test_lightning_default_layout_found_from_either_folder(tmp_path: Path) -> None:
    needs("torch", "lightning")
    for v, s in ((0, 4), (1, 8)):  # a restart that does not resume logs into a new version folder
        d = tmp_path / "lightning_logs" / f"version_{v}" / "checkpoints"
        d.mkdir(parents=True)
        age(tsave(d / f"epoch={v}-step={s}.ckpt", s), 10 - v)
    assert [c.rel(tmp_path) for c in ck.find(tmp_path)] == ["lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt",
                                                            "lightning_logs/version_1/checkpoints/epoch=1-step=8.ckpt"]
    assert ck.latest_complete(tmp_path / "lightning_logs").name == "epoch=1-step=8.ckpt"
