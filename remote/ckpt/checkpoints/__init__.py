"""Checkpoints of every common kind: finding, ordering, completeness, rotation, the best one.

This package is standard library only, Python 3.8+, and stands alone: its modules import each other
relatively and nothing else of ``remote``. The agent uses it as ``remote.ckpt.checkpoints`` (to compute
GPUJOB_RESUME, rotate, judge a pull); the bundle ships the same folder as the runtime package
``gpujob_checkpoints`` (gpujob/bundle.py), which the runtime helper imports in the job. This
``__init__`` names what callers use; the modules hold:

- ``kinds``: the ``Checkpoint`` record, the kinds' names, the step and metrics in a name, what a path is;
- ``formats``: whether a single file is whole by its format (zip/torch pickle, safetensors);
- ``openfiles``: files processes hold open for writing (``/proc``);
- ``completeness``: each kind's rule below, and why a checkpoint is not complete;
- ``discovery``: the walk, the order, the newest complete one;
- ``ranking``: the best one; ``rotation``: deleting old ones; ``strays``: ones gpujob does not watch.

Kinds (docs/checkpoints.md has the user's version):

- ``hf``: a Hugging Face Trainer ``checkpoint-<N>/``. Complete when ``trainer_state.json``
  exists (the Trainer writes it last), the ``rng_state*.pth`` files are there (all ranks when
  the world size is known) and ``checkpoint-is-incomplete.txt`` is absent.
- ``folder``: a script's own ``checkpoint-<N>/`` without HF's files (or a folder a pattern names):
  complete when it holds files, each whole or settled, no job process writes in it, and it holds
  every file the folder before it in its series holds (a save cut short between two files).
- ``gpujob``: the runtime helper's ``step-<N>/``, written as ``.tmp-step-<N>/`` and renamed;
  complete when its marker ``.gpujob-complete`` (written last) exists.
- ``accelerate``: a ``save_state`` folder (``checkpoints/checkpoint_<n>`` with automatic
  naming, or any folder holding ``random_states_<rank>.pkl``): complete when the random
  states (written last) of ranks 0..max are whole archives and no job process writes in it.
- ``deepspeed``: ``global_step<N>/``: complete when the ``latest`` file beside it names it or
  a newer tag (DeepSpeed writes ``latest`` after the save) and no job process writes in it.
- ``lightning`` (``*.ckpt``) and ``file`` (``*.pt``, ``*.pth``, ``*.bin``, ``*.safetensors``,
  ``*.tar``): one file, complete when no job process has it open for writing (looked up while
  it changed within ``WRITE_WINDOW`` s) and its format
  says it is whole (a zip archive from ``torch.save`` has its central directory; a
  safetensors file is as long as its header says) or, for other formats, it has not changed
  for ``SETTLE`` seconds. A file written under a temporary name and renamed into place is
  complete as it appears: temporary names (``*.tmp``, ``*.part``, dot files) are never
  checkpoints.

Discovery walks ``FIND_DEPTH`` levels below the checkpoint folder (an image trainer's
``<output>/<experiment>/``); checkpoint-looking files elsewhere in the job's folders are strays
(``stray_paths``), a model saved at the end is an artifact (``artifacts``).

Order: within a series (names that differ only in their numbers) by the step in the name
(``checkpoint-N``, ``global_stepN``, ``step=N``, a trailing number); across series and for
names without a step (``last.ckpt``) by modification time.
"""

# plain ``from . import``: this file's own imports read as the standard library's (tests/remote/ckpt/test_checkpoints.py)
from . import completeness, discovery, formats, kinds, openfiles, ranking, rotation, strays

COMPLETE_MARKER = kinds.COMPLETE_MARKER
HF_INCOMPLETE = kinds.HF_INCOMPLETE
HF_STATE = kinds.HF_STATE
HF_SIGNS = kinds.HF_SIGNS
FILE_EXTS = kinds.FILE_EXTS
SETTLE = kinds.SETTLE
STALE = kinds.STALE
WRITE_WINDOW = kinds.WRITE_WINDOW
FOLDER_KINDS = kinds.FOLDER_KINDS
SIDE_FILES = kinds.SIDE_FILES
PathLike = kinds.PathLike
Checkpoint = kinds.Checkpoint
step_of = kinds.step_of
name_metrics = kinds.name_metrics
PICKLE_MAX = formats.PICKLE_MAX
file_whole = formats.file_whole
PROC = openfiles.PROC
WRITE_MODES = openfiles.WRITE_MODES
SAVED_EXTS = openfiles.SAVED_EXTS
write_fds = openfiles.write_fds
open_for_writing = openfiles.open_for_writing
being_saved = openfiles.being_saved
incomplete_reason = completeness.incomplete_reason
FIND_DEPTH = discovery.FIND_DEPTH
FIND_ENTRIES = discovery.FIND_ENTRIES
WALK_SKIP = discovery.WALK_SKIP
find = discovery.find
is_complete = discovery.is_complete
list_checkpoints = discovery.list_checkpoints
latest = discovery.latest
latest_complete = discovery.latest_complete
BEST_NAME = ranking.BEST_NAME
metric_mode = ranking.metric_mode
metric_history = ranking.metric_history
best = ranking.best
rotate = rotation.rotate
STRAY_SKIP = strays.STRAY_SKIP
STRAY_DEPTH = strays.STRAY_DEPTH
STRAY_ENTRIES = strays.STRAY_ENTRIES
ARTIFACT_EXTS = strays.ARTIFACT_EXTS
ARTIFACT_MIN = strays.ARTIFACT_MIN
stray_paths = strays.stray_paths
stray_dir = strays.stray_dir
stray_advice = strays.stray_advice
artifacts = strays.artifacts
