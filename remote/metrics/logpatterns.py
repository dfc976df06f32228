"""What the lines of a training log look like: the patterns :class:`~remote.metrics.logparse.LogParser`
and its readers (progressbars: tqdm and rich bars; printedlines: dicts, JSON, plain prints) match, and their limits.
"""

import re
import sys
from typing import Optional

# A key runs to the end of its word (the next character must be a space, ":" or "="), so it never gives
# characters back: where the interpreter has possessive repeats (3.11) they say so, and a word that is no
# key fails at once instead of being tried again one character shorter each time (same matches, less work).
_KEEP = "+" if sys.version_info >= (3, 11) else ""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
DICT_PAIR = re.compile(r"'([^'\\]{1,80})':\s*'?(" + NUM + r")'?(?=\s*[,}])")
BAR = re.compile(r"(?:^|[\s|])(\d+)(?:/(\d+|\?))?(?:it)?\s*\[([^\]<,]*)(?:<([^\],]*))?(?:,\s*([^\]]*))?\]")
RATE = re.compile(r"(\?|[\d.]+)\s*(s/\w+|\w+/s)")
RICH = re.compile(r"^(?P<desc>.*?)\s*━*\s+(?P<n>\d+)/(?P<total>\d+)\s+(?P<elapsed>[\d:]+)\s*•\s*(?P<left>[\d:-]+)"
                  r"\s+(?P<rate>[\d.]+)(?P<unit>it/s|s/it)(?P<rest>.*)$")
EPOCH = re.compile(r"\bepoch\s*[:#=]?\s*\[?\s*(\d+)(?:\s*(?:/|of\b)\s*(\d+))?", re.I)
STEP = re.compile(r"\b(?:global_step|step|iter|iteration)\b\s*[:=#]?\s*\[?\s*(\d+)(?:\s*/\s*(\d+))?", re.I)
PAIR = re.compile(r"([A-Za-z][\w/.@-]{0,60}" + _KEEP + r")\s*[:=]\s*(" + NUM + r")(?![\w.])")
# "step 12 loss 0.53": a metric name and its number with only a space between (plain loops, examples/tiny)
SPACED = re.compile(r"\b([A-Za-z][\w/.-]{0,60}" + _KEEP + r")\s+(" + NUM + r")(?![\w.:=])")
METRIC_NAME = re.compile(r"loss|acc(?!um)|lr$|learning_rate|ppl|perplexity|grad_norm|f1|bleu|rouge|wer|cer|reward|score",
                         re.I)
NOT_PROGRESS = re.compile(r"valid|sanity|test|predict|eval|infer|map|filter|token|download|load|generat|extract|"
                          r"process|shard|sav|resolv|convert|upload", re.I)
STEP_UNITS = ("it", "its", "step", "steps", "batch", "batches", "iter", "iters", "ba")
MARKER = "==> gpujob: attempt "
SKIP_KEYS = ("v_num",)
JSON_STEP = {"global_step": "step", "iter": "step", "iteration": "step", "num_updates": "step", "it": "step"}
# "train loss 2.1, val loss 2.2" (nanoGPT, many plain loops): the word before a metric says whose it is;
# without it both would be "loss" and the validation value would pass for the training loss
QUALIFIER = re.compile(r"\b(train|training|val|valid|validation|eval|test|dev)$", re.I)
QUALIFIER_LEN = len("validation")  # the longest: QUALIFIER is searched in that many characters only
QUALIFIER_ENDS = "ngldtvNGLDTV"  # their last letters: a word ending otherwise is none of them
# "batch 30/100", a count within the epoch printed on the same line
BATCH = re.compile(r"\bbatch\s*[:#=]?\s*\[?\s*(\d+)\s*/\s*(\d+)", re.I)
PERCENT = re.compile(r"\d{1,3}$")
EPOCHS_BAR = re.compile(r"\bepochs?\b", re.I)  # an outer bar over the epochs: "Epochs: 30%|...| 3/10"
# Keras and many epoch loops print "Epoch 3/10" on a line of its own, the metrics on the next
EPOCH_HEADER = re.compile(r"^epoch\s*[:#]?\s*(\d+)\s*(?:/|of)\s*(\d+)\s*:?$", re.I)
# an image trainer's "Train: 3 [ 4/10 ( 50%)]" and MNIST's "Train Epoch: 3 [640/60000 (1%)]": epoch, then
# the count within it; word-language-model's "| epoch 3 | 20/ 171 batches |"
EPOCH_BATCH = re.compile(r"^(?:train(?:ing)?\s*(?:epoch)?)\s*:?\s*\[?\s*(\d+)\s*\]?\s*\[\s*(\d+)\s*/\s*(\d+)"
                         r"(?:\s*\(\s*([\d.]+)%\s*\))?\s*\]", re.I)
BATCHES = re.compile(r"\b(\d+)\s*/\s*(\d+)\s+batch(?:es)?\b", re.I)
# "Accuracy: 450/500 (90%)": the percentage, not the count
FRACTION = re.compile(r"([A-Za-z][\w@/.-]{0,60})\s*[:=]\s*\d+\s*/\s*\d+\s*\(\s*(" + NUM + r")\s*%\s*\)")
# a line of evaluation: its metrics are eval_*/test_*/val_*, never the training loss
EVAL_LINE = re.compile(r"^\W*(test|eval|evaluation|val|valid|validation)\b", re.I)
# config echoes: nanoGPT's "Overriding: max_iters = 500", the config file it prints, "lr = 1e-3" alone
CONFIG_ECHO = re.compile(r"^(?:overriding\b.*|[A-Za-z_]\w*\s+=\s+[^=]*)$", re.I)
ECHO_METRIC = re.compile(r"^(?:(?:train|val|eval|test)_)?(?:loss|acc|accuracy|ppl|perplexity)$", re.I)
# a user's formats (job file metrics.patterns): named groups; these say where the run is, the rest are metrics
PROGRESS_GROUPS = ("step", "epoch", "batch", "batches", "max_steps", "epochs")
MAX_LINE = 8192  # longer segments are not parsed (a bar or a dict line is far shorter)
MAX_PENDING = 1 << 16  # an unterminated segment longer than this is dropped
MEMO_MAX = 512  # entries a memo keeps (a flood repeats the same few keys and bar descriptions)


def as_number(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:
        return None
