"""gpujob runtime helper: checkpoints, graceful stop and metrics for any training script.

On a gpujob instance the agent puts this module (and the package ``gpujob_checkpoints``) on PYTHONPATH.
Only the standard library is imported here; torch and transformers are imported inside the
functions that need them. Every variable may be absent (a script run by hand on a laptop):
then checkpoints go to ``./checkpoints`` and metrics to ``./metrics.jsonl``.

    import gpujob_runtime as gj
    start = gj.latest_checkpoint()          # GPUJOB_RESUME, else the newest complete one
    for step in ...:
        ...
        gj.report(step=step, loss=loss)
        if step % 100 == 0 or gj.should_stop():
            gj.save({"model": model.state_dict(), ...}, step)
        if gj.should_stop():
            break                           # exit 0: the agent decides the job's state
"""

import importlib.util
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

try:
    from gpujob_checkpoints import (  # type: ignore[import-not-found]
        COMPLETE_MARKER,
        is_complete,
        latest_complete,
        list_checkpoints,
        rotate,
    )
except ImportError:  # from a checkout (remote/) or the installed wheel (gpujob/_remote/): the package by path
    _here = Path(__file__).resolve()
    _cands = [_here.parents[2] / d / "ckpt" / "checkpoints" / "__init__.py" for d in ("remote", "_remote")]
    _src = next((c for c in _cands if c.is_file()), None)
    _spec = importlib.util.spec_from_file_location(
        "gpujob_checkpoints", str(_src), submodule_search_locations=[str(_src.parent)]) if _src else None
    if _spec is None or _spec.loader is None:
        raise
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["gpujob_checkpoints"] = _mod
    _spec.loader.exec_module(_mod)
    COMPLETE_MARKER = _mod.COMPLETE_MARKER
    is_complete = _mod.is_complete
    latest_complete = _mod.latest_complete
    list_checkpoints = _mod.list_checkpoints
    rotate = _mod.rotate

__all__ = [
    "COMPLETE_MARKER", "batch_divisor", "ckpt_dir", "is_complete", "is_main_process",
    "latest_checkpoint", "latest_complete", "list_checkpoints", "load", "rank", "report",
    "restore_rng", "rotate", "save", "save_best", "should_stop", "stop_requested",
    "tb_dir", "trainer_callback", "trainer_callback_class", "watch_stop_file", "worker_init_fn",
    "world_size",
]

STATE_FILE = "state.pt"
BEST_DIR = "best"

_signal_received = threading.Event()
_handlers_installed = False
_watch_touched = False


# --- environment -------------------------------------------------------------------------

def _env_path(name: str, default: str) -> Path:
    value = os.environ.get(name, "").strip()
    return Path(value) if value else Path(default)


def job_dir() -> Path:
    """GPUJOB_JOB_DIR, else the current folder."""
    return _env_path("GPUJOB_JOB_DIR", ".")


def ckpt_dir() -> Path:
    """GPUJOB_CKPT_DIR, else ``./checkpoints``. Not created here."""
    return _env_path("GPUJOB_CKPT_DIR", "checkpoints")


def tb_dir() -> Path:
    """GPUJOB_TB_DIR, else ``./runs``."""
    return _env_path("GPUJOB_TB_DIR", "runs")


def data_dir() -> Path:
    """GPUJOB_DATA_DIR, else the current folder."""
    return _env_path("GPUJOB_DATA_DIR", ".")


def metrics_file() -> Path:
    """GPUJOB_METRICS_FILE, else ``./metrics.jsonl``."""
    return _env_path("GPUJOB_METRICS_FILE", "metrics.jsonl")


def attempt() -> int:
    """GPUJOB_ATTEMPT (1 on the first run)."""
    return _int_env("GPUJOB_ATTEMPT", 1)


def keep_last() -> int:
    """GPUJOB_KEEP: how many complete checkpoints to keep (default 3; 0: delete none)."""
    return max(0, _int_env("GPUJOB_KEEP", 3))


def batch_divisor() -> int:
    """GPUJOB_BATCH_DIVISOR (default 1): divide the per-device batch by it, multiply accumulation."""
    return max(1, _int_env("GPUJOB_BATCH_DIVISOR", 1))


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def split_batch(batch_size: int, grad_accum: int = 1) -> "tuple[int, int]":
    """(per-device batch, accumulation steps) after GPUJOB_BATCH_DIVISOR, same effective batch."""
    div = batch_divisor()
    per_device = max(1, batch_size // div)
    return per_device, max(1, grad_accum) * div


# --- distributed -------------------------------------------------------------------------

def _dist() -> Any:
    """torch.distributed when it is imported and initialized, else None."""
    if sys.modules.get("torch") is None:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def rank() -> int:
    """Global rank (0 without torch.distributed; RANK env as set by torchrun otherwise)."""
    d = _dist()
    if d is not None:
        return int(d.get_rank())
    return _int_env("RANK", 0)


def world_size() -> int:
    d = _dist()
    if d is not None:
        return int(d.get_world_size())
    return _int_env("WORLD_SIZE", 1)


def is_main_process() -> bool:
    return rank() == 0


def _barrier() -> None:
    d = _dist()
    if d is not None:
        d.barrier()


# --- stopping ----------------------------------------------------------------------------

def _on_signal(signum: int, frame: Any) -> None:
    if signum == signal.SIGINT and _signal_received.is_set():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise KeyboardInterrupt
    _signal_received.set()


def install_signal_handlers() -> None:
    """Make SIGTERM/SIGINT set the stop flag instead of killing (main thread only; idempotent).

    A second Ctrl-C interrupts at once.
    """
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    _handlers_installed = True


def _touch_watch() -> None:
    """Tell the agent this job polls the stop file (it then waits the grace period)."""
    global _watch_touched
    if _watch_touched:
        return
    _watch_touched = True
    stop = os.environ.get("GPUJOB_STOP_FILE", "").strip()
    if stop:
        try:  # the agent's mark of its own helper: it then knows whether a stop was acted on (STOP.acted)
            Path(stop + ".watch").write_text("gpujob_runtime\n")
        except OSError:
            pass


def _acted() -> None:
    """Tell the agent this job stops because it was asked: a script that ends on its own after a
    stop request is then still ``succeeded`` (remote/stopping/late.py)."""
    stop = os.environ.get("GPUJOB_STOP_FILE", "").strip()
    if stop:
        try:
            Path(stop + ".acted").touch()
        except OSError:
            pass


def stop_requested() -> bool:
    """This process's view: the stop file exists or a SIGTERM/SIGINT arrived (no collective).
    True also tells the agent the code was told to stop (``STOP.acted``)."""
    stop = os.environ.get("GPUJOB_STOP_FILE", "").strip()
    flag = _signal_received.is_set() or (bool(stop) and os.path.exists(stop))
    if flag:
        _acted()
    return flag


def should_stop() -> bool:
    """True when the job should save and stop; agreed across ranks (all_reduce MAX).

    Call it at the same point on every rank (each step). The first call installs the signal
    handlers and touches ``GPUJOB_STOP_FILE + ".watch"``.
    """
    install_signal_handlers()
    _touch_watch()
    flag = stop_requested()
    d = _dist()
    if d is None:
        return flag
    import torch

    backend = d.get_backend()
    device = torch.device("cpu")
    if backend == "nccl" and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    d.all_reduce(t, op=d.ReduceOp.MAX)
    if t.item():
        _acted()
    return bool(t.item())


def worker_init_fn(worker_id: int) -> None:
    """DataLoader worker init: ignore SIGTERM/SIGINT so the main process can save and stop."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- metrics -----------------------------------------------------------------------------

def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if hasattr(v, "item"):
        try:
            return v.item()
        except (ValueError, RuntimeError):
            pass
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def report(step: Optional[int] = None, **metrics: Any) -> None:
    """Append ``{"t": unix_time, "step": step, **metrics}`` as one line to the metrics file (rank 0)."""
    if not is_main_process():
        return
    line: Dict[str, Any] = {"t": round(time.time(), 3)}
    if step is not None:
        line["step"] = int(step)
    for k, v in metrics.items():
        line[k] = _jsonable(v)
    path = metrics_file()
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, allow_nan=True) + "\n")
        f.flush()


HPARAMS_NAME = "hparams.json"  # beside the metrics file; the agent passes it to the laptop's run ledger


def report_hparams(**params: Any) -> None:
    """Record hyperparameters (scalars; others as text) in ``hparams.json`` beside the metrics file,
    merged with what was recorded before (rank 0). ``gpujob runs`` and ``compare`` show them."""
    if not is_main_process():
        return
    path = metrics_file().parent / HPARAMS_NAME
    try:
        with open(str(path)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    for k, v in params.items():
        v = _jsonable(v)
        doc[str(k)] = v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(str(tmp), "w", encoding="utf-8") as f:
        json.dump(doc, f, allow_nan=True)
    os.replace(str(tmp), str(path))


# the TrainingArguments always worth recording; the others only where they differ from their default
HF_KEY_ARGS = ("learning_rate", "per_device_train_batch_size", "num_train_epochs", "max_steps", "weight_decay",
               "warmup_steps", "warmup_ratio", "gradient_accumulation_steps", "lr_scheduler_type", "seed")
HF_SKIP = ("output_dir", "logging_dir", "run_name", "hub_token", "push_to_hub_token", "report_to")


def hf_hparams(args: Any) -> Dict[str, Any]:
    """The hyperparameters of an HF ``TrainingArguments``: the key ones and every one changed from its default."""
    import dataclasses

    out: Dict[str, Any] = {}
    for f in dataclasses.fields(args) if dataclasses.is_dataclass(args) else []:
        if f.name in HF_SKIP or f.name.startswith("_") or "token" in f.name:
            continue
        v = getattr(args, f.name, None)
        if not (v is None or isinstance(v, (int, float, str, bool))):
            v = getattr(v, "value", None) if hasattr(v, "value") else None  # enums (lr_scheduler_type)
            if v is None:
                continue
        default = f.default if f.default is not dataclasses.MISSING else None
        default = getattr(default, "value", default)
        if f.name in HF_KEY_ARGS or v != default:
            out[f.name] = v
    return out


# --- checkpoints -------------------------------------------------------------------------

def latest_checkpoint() -> Optional[Path]:
    """GPUJOB_RESUME when set and complete, else the newest complete checkpoint in ckpt_dir()."""
    resume = os.environ.get("GPUJOB_RESUME", "").strip()
    if resume and is_complete(resume):
        return Path(resume)
    return latest_complete(ckpt_dir())


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(str(root)):
        for name in files:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_extra(folder: Path, name: str, content: Any) -> None:
    if callable(content):
        content(folder)
    elif isinstance(content, bytes):
        (folder / name).write_bytes(content)
    elif isinstance(content, str):
        (folder / name).write_text(content, encoding="utf-8")
    else:
        (folder / name).write_text(json.dumps(_jsonable(content), indent=1), encoding="utf-8")


def _torch_save(obj: Any, path: Path) -> None:
    try:
        import torch
    except ImportError:
        import pickle

        with open(path, "wb") as f:
            pickle.dump(obj, f)
        return
    torch.save(obj, str(path))


def _rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {"python": random.getstate()}
    if sys.modules.get("numpy") is not None:
        import numpy as np

        state["numpy"] = np.random.get_state()
    if sys.modules.get("torch") is not None:
        import torch

        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _write_atomic(target: Path, write: Callable[[Path], None], all_ranks: Optional[Callable[[Path], None]]) -> None:
    """Write a checkpoint folder: tmp folder, fsync, marker, rename, fsync parent."""
    parent = target.parent
    tmp = parent / (".tmp-" + target.name)
    main = is_main_process()
    if main:
        parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            import shutil

            shutil.rmtree(str(tmp))
        tmp.mkdir()
    _barrier()
    if all_ranks is not None:
        all_ranks(tmp)
    _barrier()
    if main:
        write(tmp)
        _fsync_tree(tmp)
        marker = tmp / COMPLETE_MARKER
        marker.write_text(json.dumps({"t": time.time(), "world_size": world_size()}), encoding="utf-8")
        _fsync_dir(tmp)
        if target.exists():
            import shutil

            shutil.rmtree(str(target))
        os.replace(str(tmp), str(target))
        _fsync_dir(parent)
    _barrier()


def save(state: Dict[str, Any], step: int, rng: bool = True, keep: Optional[int] = None,
         **extra_files: Any) -> Path:
    """Atomically write checkpoint ``ckpt_dir()/step-<step>`` and rotate to the newest ``keep``.

    ``state`` goes to ``state.pt`` (torch.save; rank 0 only). With ``rng`` each rank also writes
    ``rng_<rank>.pt`` (python, numpy, torch, cuda). ``extra_files`` maps file names to bytes,
    str, JSON-able values, or a callable given the folder (e.g. ``model.save_pretrained``);
    pass names with dots as ``**{"config.json": ...}``. Call on every rank.
    """
    target = ckpt_dir() / ("step-%d" % int(step))
    rng_state = _rng_state() if rng else None

    def on_each_rank(folder: Path) -> None:
        if rng_state is not None:
            _torch_save(rng_state, folder / ("rng_%d.pt" % rank()))

    def on_main(folder: Path) -> None:
        _torch_save(state, folder / STATE_FILE)
        for name, content in extra_files.items():
            _write_extra(folder, name, content)

    _write_atomic(target, on_main, on_each_rank)
    n = keep if keep is not None else keep_last()
    if is_main_process() and n > 0:
        rotate(ckpt_dir(), n)
    return target


def save_best(state: Dict[str, Any], step: int, metric: str, value: float, **extra_files: Any) -> Path:
    """Atomically write ``ckpt_dir()/best`` (outside rotation) with ``best.json`` = step, metric, value."""
    target = ckpt_dir() / BEST_DIR
    info = {"step": int(step), "metric": metric, "value": value}

    def on_main(folder: Path) -> None:
        _torch_save(state, folder / STATE_FILE)
        (folder / "best.json").write_text(json.dumps(info), encoding="utf-8")
        for name, content in extra_files.items():
            _write_extra(folder, name, content)

    _write_atomic(target, on_main, None)
    return target


def load(path: Any = None, map_location: Any = "cpu", restore_rng_state: bool = False) -> Optional[Dict[str, Any]]:
    """Load ``state.pt`` from a checkpoint folder, or a checkpoint file itself (default:
    latest_checkpoint()); None when there is none.

    With ``restore_rng_state`` this rank's RNG is restored too; do that right before the loop
    continues, after building model and data (they consume random numbers).
    """
    folder = Path(path) if path is not None else latest_checkpoint()
    if folder is None:
        return None
    target = folder if folder.is_file() else folder / STATE_FILE  # a single-file checkpoint (a .pt) is the state
    try:
        import torch

        state = torch.load(str(target), map_location=map_location, weights_only=False)
    except ImportError:
        import pickle

        with open(target, "rb") as f:
            state = pickle.load(f)
    if restore_rng_state:
        restore_rng(folder)
    return state


def restore_rng(path: Any) -> bool:
    """Restore this rank's python/numpy/torch/cuda RNG saved by save(); False if none was saved."""
    f = Path(path) / ("rng_%d.pt" % rank())
    if not f.exists():
        return False
    try:
        import torch

        st = torch.load(str(f), map_location="cpu", weights_only=False)
    except ImportError:
        import pickle

        with open(f, "rb") as fh:
            st = pickle.load(fh)
    random.setstate(st["python"])
    if "numpy" in st:
        import numpy as np

        np.random.set_state(st["numpy"])
    if "torch" in st:
        import torch

        torch.set_rng_state(st["torch"])
        if "cuda" in st and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(st["cuda"])
    return True


# --- Hugging Face Trainer ----------------------------------------------------------------

def trainer_callback() -> Any:
    """A ``transformers.TrainerCallback``: save and stop at the next step end on a stop request,
    and copy the Trainer's logs into the metrics file. Installs the signal handlers now."""
    install_signal_handlers()
    _touch_watch()
    return trainer_callback_class()()


def trainer_callback_class() -> Any:
    """The class of :func:`trainer_callback`'s callback. Its first step end installs the signal
    handlers and acknowledges the stop file (what gpujob's automatic hook adds to a Trainer)."""
    from transformers import TrainerCallback

    class GpujobCallback(TrainerCallback):
        stopped_early = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            try:
                report_hparams(**hf_hparams(args))
            except Exception as e:  # the run's record loses its arguments, the training goes on
                sys.stderr.write("[gpujob] hyperparameters not recorded: {}: {}\n".format(type(e).__name__, e))
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if should_stop():
                control.should_save = True
                control.should_training_stop = True
                if not self.stopped_early and state.is_world_process_zero:  # the log says why training ended early
                    print("[gpujob] stop requested: saving {} at step {}; stopping".format(
                        os.path.join(str(args.output_dir), "checkpoint-{}".format(state.global_step)),
                        state.global_step), flush=True)
                self.stopped_early = True
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None,
                   **kwargs: Any) -> Any:
            if logs and state.is_world_process_zero:
                # max_steps: the Trainer's own total (epochs × steps included), so status has an ETA
                report(step=state.global_step, **dict({"max_steps": state.max_steps} if state.max_steps else {}, **logs))
            return control

    return GpujobCallback


def watch_stop_file() -> None:
    """Acknowledge the stop protocol: this process polls GPUJOB_STOP_FILE (the agent then grants
    the grace period before any signal). Idempotent; should_stop() does it on its first call."""
    _touch_watch()


def files_in(path: Any) -> List[str]:
    """Names of the files in a checkpoint folder (for logs and tests)."""
    return sorted(p.name for p in Path(path).iterdir()) if Path(path).is_dir() else []
