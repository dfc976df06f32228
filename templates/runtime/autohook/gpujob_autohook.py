"""Graceful stop for HF ``Trainer`` and Lightning ``Trainer`` scripts that never import gpujob.

Imported by this folder's ``sitecustomize`` only when ``transformers.trainer``,
``lightning.pytorch.trainer.trainer`` or ``pytorch_lightning.trainer.trainer`` has just been
loaded: ``patch_module`` wraps its ``Trainer.__init__`` to add one gpujob callback to every
Trainer:

- HF: ``gpujob_runtime``'s ``GpujobCallback``. At each step end it asks whether the job should
  stop (the stop file, SIGTERM or SIGINT; all ranks agree through an all-reduce MAX) and then
  sets ``should_save`` and ``should_training_stop``: the Trainer writes ``checkpoint-N`` and
  ``train()`` returns. Its logs go to GPUJOB_METRICS_FILE with ``max_steps``.
- Lightning: ``GpujobStop`` below. At each batch end that completes an optimizer step it
  agrees with every rank (``strategy.reduce_boolean_decision``), saves ``epoch=E-step=S.ckpt``
  where the user's ``ModelCheckpoint`` writes (and refreshes its ``last.ckpt``), then sets
  ``trainer.should_stop``. It also copies the logged scalars to GPUJOB_METRICS_FILE.

It also wraps ``Trainer.train`` / ``Trainer.fit``: a script that passes no checkpoint resumes
from GPUJOB_RESUME (the job's newest complete one) on a restart or ``gpujob resume``.

The first poll touches ``GPUJOB_STOP_FILE + ".watch"``, so the agent grants the stop grace
instead of signalling. Nothing heavy is imported here: only what the Trainer module itself
already loaded. A failure to patch is reported on stderr and leaves the script as it was.
"""

import functools
import os
import sys
from typing import Any, Dict, Optional

MARK = "_gpujob_autohook"


def _warn(what: str, e: BaseException) -> None:
    sys.stderr.write("[gpujob] automatic stop hook not installed ({}): {}: {}\n".format(what, type(e).__name__, e))


def patch_module(kind: str, module: Any) -> None:
    """Wrap ``module.Trainer.__init__`` to add gpujob's callback to each new Trainer."""
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, MARK, False):
        return
    add = _add_hf_callback if kind == "hf" else functools.partial(_add_lightning_callback, kind)
    original = trainer_cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            add(self)
        except Exception as e:
            _warn(type(self).__name__, e)

    setattr(__init__, MARK, True)
    trainer_cls.__init__ = __init__
    _patch_resume(kind, trainer_cls)
    if kind != "hf":
        _plain_progress(kind)


def _plain_progress(package: str) -> None:
    """Lightning picks its rich progress bar whenever ``rich`` is importable, and rich draws nothing into
    a file until the end: with the output going to the job's log (no terminal), the plain TQDM bar (and
    the plain model summary) instead, so ``gpujob tail`` and the log reader see progress while it trains.
    ``GPUJOB_RICH=1`` keeps rich; a bar the script passes itself is never touched."""
    if os.environ.get("GPUJOB_RICH") == "1" or sys.stdout.isatty():
        return
    mod = sys.modules.get(package + ".trainer.connectors.callback_connector")
    if mod is not None and getattr(mod, "_RICH_AVAILABLE", False):
        mod._RICH_AVAILABLE = False


# where each Trainer takes the checkpoint to resume from: (method, keyword, its position after self)
RESUME_ARG = {"hf": ("train", "resume_from_checkpoint", 0)}
LIGHTNING_RESUME_ARG = ("fit", "ckpt_path", 4)
_resumed = []  # type: list  # one automatic resume per process: the first train()/fit() only


def _resume_path(kind: str) -> Optional[str]:
    """GPUJOB_RESUME when it is a checkpoint this kind of Trainer loads (the job's own newest
    complete one: set only on a restart or ``gpujob resume`` of a job that has checkpoints)."""
    path = os.environ.get("GPUJOB_RESUME") or ""
    if kind == "hf":
        return path if path and os.path.isfile(os.path.join(path, "trainer_state.json")) else None
    return path if path.endswith(".ckpt") and os.path.isfile(path) else None


def _patch_resume(kind: str, trainer_cls: Any) -> None:
    """A script that calls ``train()`` / ``fit()`` without a checkpoint still resumes on a
    restart: the hook passes GPUJOB_RESUME. A checkpoint the script passes itself (even
    ``False``) is left alone."""
    name, keyword, position = RESUME_ARG.get(kind, LIGHTNING_RESUME_ARG)
    original = getattr(trainer_cls, name, None)
    if original is None or getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _resumed and len(args) <= position and kwargs.get(keyword) is None:
            path = _resume_path(kind)
            if path:
                kwargs[keyword] = path
                if int(os.environ.get("RANK", "0") or 0) == 0:
                    print("[gpujob] resuming from {} (GPUJOB_RESUME; the script passed no {})".format(path, keyword),
                          flush=True)
        _resumed.append(True)
        return original(self, *args, **kwargs)

    setattr(wrapped, MARK, True)
    setattr(trainer_cls, name, wrapped)


def _runtime() -> Any:
    import gpujob_runtime  # next to this folder on PYTHONPATH; standard library only

    return gpujob_runtime


# --- Hugging Face ------------------------------------------------------------------------

def _add_hf_callback(trainer: Any) -> None:
    handler = getattr(trainer, "callback_handler", None)
    if handler is None:
        return
    if any(type(cb).__name__ == "GpujobCallback" for cb in handler.callbacks):
        return  # the script (a gpujob template) added it itself, or a subclass' __init__ ran twice
    trainer.add_callback(_runtime().trainer_callback_class()())


# --- Lightning ---------------------------------------------------------------------------

_LIGHTNING_CLASSES: Dict[str, Any] = {}


def _add_lightning_callback(package: str, trainer: Any) -> None:
    cls = _LIGHTNING_CLASSES.get(package)
    if cls is None:
        cls = _LIGHTNING_CLASSES[package] = _lightning_callback_class(package)
    if any(type(cb).__name__ == "GpujobStop" for cb in trainer.callbacks):
        return
    trainer.callbacks.append(cls())


def _scalars(metrics: Dict[str, Any]) -> Dict[str, float]:
    out = {}
    for k, v in metrics.items():
        try:
            if getattr(v, "numel", lambda: 1)() == 1:
                out[str(k)] = float(v)
        except (TypeError, ValueError, RuntimeError):
            continue
    return out


def _total_steps(trainer: Any) -> Optional[int]:
    if trainer.max_steps and trainer.max_steps > 0:
        return int(trainer.max_steps)
    try:
        total = trainer.estimated_stepping_batches
    except Exception:
        return None
    return int(total) if isinstance(total, (int, float)) and 0 < total < float("inf") else None


def _drop_minimums(trainer: Any) -> None:
    """Lightning ignores ``should_stop`` until ``min_steps``/``min_epochs`` are met ("Training
    will continue..."): a stop asked for by the user or the agent must not wait for them."""
    loop = getattr(trainer, "fit_loop", None)
    try:
        loop.min_epochs = 0
        loop.epoch_loop.min_steps = None
    except AttributeError:  # another Lightning layout: the stop still comes with the grace period
        pass


def _lightning_callback_class(package: str) -> Any:
    callbacks = __import__(package + ".callbacks", fromlist=["Callback"])

    class GpujobStop(callbacks.Callback):
        """Save at the next optimizer step and stop, on every rank, when the job should stop."""

        def __init__(self) -> None:
            self.stopped_early = False

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            """Record ``save_hyperparameters()``'s values (the module's and the data module's)."""
            try:
                hp = dict(getattr(pl_module, "hparams", {}) or {})
                dm = getattr(trainer, "datamodule", None)
                hp.update(dict(getattr(dm, "hparams", {}) or {}) if dm is not None else {})
                if hp and trainer.is_global_zero:
                    _runtime().report_hparams(**{str(k): v for k, v in hp.items()})
            except Exception as e:
                _warn("hyperparameters", e)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
            if (batch_idx + 1) % accumulate:
                return  # mid-accumulation: not a step boundary
            gj = _runtime()
            gj.watch_stop_file()
            self._report(trainer, gj)
            local = gj.stop_requested() or bool(getattr(trainer, "received_sigterm", False))
            try:
                agreed = trainer.strategy.reduce_boolean_decision(local, all=False)
            except TypeError:  # Lightning < 1.8: no `all`
                agreed = trainer.strategy.reduce_boolean_decision(local)
            if agreed and not self.stopped_early:
                self.stopped_early = True
                self._save(trainer)
                _drop_minimums(trainer)
                trainer.should_stop = True

        def _report(self, trainer: Any, gj: Any) -> None:
            every = int(getattr(trainer, "log_every_n_steps", 50) or 50)
            if trainer.is_global_zero and trainer.global_step % every == 0:
                gj.report(step=trainer.global_step, epoch=trainer.current_epoch, max_steps=_total_steps(trainer),
                          **_scalars(trainer.callback_metrics))

        def _save(self, trainer: Any) -> None:
            cb = trainer.checkpoint_callback  # the first ModelCheckpoint, or None
            step, epoch = trainer.global_step, trainer.current_epoch
            folder = getattr(cb, "dirpath", None) or os.environ.get("GPUJOB_CKPT_DIR") or os.path.join(
                trainer.default_root_dir, "checkpoints")
            path = os.path.join(folder, "epoch={}-step={}.ckpt".format(epoch, step))
            if cb is not None and getattr(cb, "dirpath", None):
                try:  # the user's own file name pattern
                    path = cb.format_checkpoint_name(cb._monitor_candidates(trainer))
                except Exception:
                    pass
            exists = trainer.strategy.broadcast(os.path.exists(path))
            if not exists:
                trainer.save_checkpoint(path)
            if cb is not None and getattr(cb, "save_last", False):
                last = getattr(cb, "last_model_path", "") or cb.format_checkpoint_name(
                    cb._monitor_candidates(trainer), cb.CHECKPOINT_NAME_LAST)
                if trainer.is_global_zero:
                    _replace_with_link(path, last)
                cb.last_model_path = last
            if cb is not None:  # ModelCheckpoint's own bookkeeping: no second file for this step
                cb._last_global_step_saved = step
                cb._last_checkpoint_saved = path
            trainer.strategy.barrier("gpujob_stop")
            if trainer.is_global_zero:
                print("[gpujob] stop requested: saved {} at step {}; stopping".format(path, step), flush=True)

    return GpujobStop


def _replace_with_link(src: str, dst: str) -> None:
    """Make ``dst`` the same file as ``src`` (a hard link, else a copy), atomically."""
    if os.path.abspath(src) == os.path.abspath(dst):
        return
    tmp = dst + ".gpujob-tmp"
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError:
            import shutil

            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except OSError as e:
        _warn("last checkpoint", e)
