"""Metrics and progress from what a training script prints, for scripts that never call gpujob.

Fed the new bytes of ``output.log`` (stdout and stderr together), a ``LogParser`` splits them at
``\\n`` and at ``\\r`` (tqdm redraws a bar in place with ``\\r``) and recognises:

- Hugging Face ``Trainer`` dict lines, ``{'loss': '4.03', 'grad_norm': '0.865', ...}``
  (transformers 5 prints the values as strings, 4.x as numbers), ``eval_*`` dicts included;
- tqdm bars, ``42%|████▏     | 42/100 [00:10<00:14, 4.01it/s, loss=0.5]`` (also ``s/it``, and
  ``42it [00:10, 4.01it/s]`` without a total), with a description such as Lightning's
  ``Epoch 3:`` and a postfix of ``key=value`` metrics; Lightning's rich bar line
  ``Epoch 1/9 ━━━ 8/8 0:00:01 • 0:00:00 6.1it/s v_num: 0 train_loss: 0.017``;
- JSON objects printed one a line, ``{"step": 120, "loss": 0.5}``;
- plain prints: ``step 120`` / ``step 120/1000``, ``loss: 0.5``, ``loss=0.5``, ``val_acc=0.9``,
  ``train loss 0.5`` (→ ``train_loss``), ``Epoch 3/10`` (the step of a loop that counts only epochs);
- public scripts' lines: ``Train: 3 [ 4/10 ( 50%)]`` (image trainer), ``Train Epoch: 1 [640/60000 (1%)]``
  and ``Test set: ... Accuracy: 450/500 (90%)`` (MNIST), ``| epoch 3 | 20/ 171 batches |``
  (word-language-model), ``iter 230: loss 0.91`` (GPT trainer); evaluation lines give ``test_*`` /
  ``eval_*`` / ``val_*``, config echoes (``Overriding: x = 1``) nothing;
- the job file's ``metrics.patterns`` (named groups), tried first.

A record gets a step only where one is printed: the bar's count (plus whole epochs before it)
or a ``step N`` on the same line. Validation, test, sanity-check and data-preparation bars (``Map``, ``Downloading``, ``Loading
checkpoint shards``; units other than iterations, steps or batches) are not progress.
Bar redraws between two ``feed`` calls become one record (the newest), so a bar redrawn ten
times a second does not become ten records a second.
"""

import json
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

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
Pending = Tuple[float, int, Optional[int], str, str, str]  # a bar not read in full yet: t, step, total, rate, unit, postfix
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


def _num(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:
        return None


def _seconds(clock: str) -> Optional[float]:
    """``01:02:03`` / ``02:03`` / ``1d, 01:02:03`` → seconds."""
    clock = clock.strip()
    days = 0.0
    if "d," in clock:
        d, _, clock = clock.partition("d,")
        days = float(d.strip() or 0)
        clock = clock.strip()
    try:
        parts = [float(p) for p in clock.split(":")]
    except ValueError:
        return None
    secs = 0.0
    for p in parts:
        secs = secs * 60 + p
    return days * 86400 + secs


def _plausible(rate_s: str, unit: str, secs: Optional[float], n: int, first: Optional[Tuple[int, float]] = None) -> bool:
    """A bar's rate that could be true: a resumed HF Trainer's bar jumps to the resumed step at once
    (``update(1800)``), and tqdm then shows ``16899.26it/s`` for many redraws; ten times more steps than
    the bar has counted over its elapsed time is that jump, not speed (the records' pace is used).
    ``first``: (count, elapsed) where this bar was first seen; the steps since then are what it counted
    since (a jump to step 140 of 240 made 752 it/s over 1 s look possible: 150 steps were counted)."""
    rate = _num(rate_s)
    if rate is None or not secs:
        return True  # "00:00" is anything under a second: no judging
    per_s = 1.0 / rate if unit.startswith("s/") and rate > 0 else rate
    if first is not None and secs > first[1] and per_s * (secs - first[1]) > 10 * (n - first[0]) + 10:
        return False
    return per_s * secs <= 10 * n + 10  # 10: a first compile's slow steps, then the real pace, is no jump


_MEMO_MAX = 512  # entries a memo keeps (a flood repeats the same few keys and bar descriptions)
_metric_keys = {}  # type: Dict[str, bool]
_bar_descs = {}  # type: Dict[str, Tuple[bool, Any, bool]]


def _is_metric(k: str) -> bool:
    """``k`` names a metric (METRIC_NAME, not SKIP_KEYS): asked for every pair of every line, answered once a key."""
    got = _metric_keys.get(k)
    if got is None:
        if len(_metric_keys) >= _MEMO_MAX:
            _metric_keys.clear()
        got = _metric_keys[k] = METRIC_NAME.search(k) is not None and k not in SKIP_KEYS
    return got


def _bar_desc(desc: str) -> Tuple[bool, Any, bool]:
    """(not progress, its epoch match, an outer epochs bar) of a bar's description: every redraw has the same."""
    got = _bar_descs.get(desc)
    if got is None:
        if len(_bar_descs) >= _MEMO_MAX:
            _bar_descs.clear()
        skip = bool(desc) and NOT_PROGRESS.search(desc) is not None
        em = EPOCH.search(desc) if desc and not skip else None
        got = _bar_descs[desc] = (skip, em, bool(desc) and em is None and not skip and EPOCHS_BAR.search(desc) is not None)
    return got


def _qualifier(s: str, end: int) -> Any:
    """``train``/``val``/... right before ``s[end:]``, spaces or ``_`` between (``train loss 2.1``, ``val_loss``):
    the word says whose the metric is. Looked for just before ``end``, not in all of the line before it."""
    j = end
    while j > 0 and (s[j - 1] == "_" or s[j - 1].isspace()):
        j -= 1
    if j == end or s[j - 1] not in QUALIFIER_ENDS:
        return None
    return QUALIFIER.search(s, max(0, j - QUALIFIER_LEN), j)  # \b sees the character before the window


class LogParser:
    """Incremental: ``feed(new_bytes, t)`` returns the records those bytes complete."""

    def __init__(self, epochs: Optional[int] = None, patterns: Optional[List[str]] = None) -> None:
        self.pending = b""
        self.epochs_hint = epochs  # total epochs from the job (run-command flags, env), if known
        self.patterns = []  # type: List[Any]  # the job file's metrics.patterns, compiled
        for rx in patterns or []:
            try:
                self.patterns.append(re.compile(rx))
            except re.error:
                continue  # the laptop checked them; an agent's older Python may still refuse one
        self.progress = {}  # type: Dict[str, Any]
        # whether the script counts epochs from 0 or 1, from the first epoch the log shows: the script's
        # habit, so it outlives an attempt (a resumed run's first line, "Train: 7 [...]", tells nothing)
        self.epoch_base = None  # type: Optional[int]
        self._reset()

    def _reset(self) -> None:
        self.main_total = None  # type: Optional[int]
        self.main_n = 0
        self.bars_done = 0  # finished main bars without an epoch in their description
        self.bar_seen = {}  # type: Dict[Optional[int], Tuple[int, float]]  # per bar total: (count, elapsed) first seen
        self.step = None  # type: Optional[int]
        self.bar_pending = None  # type: Optional[Pending]
        self.epoch_bar_total = None  # type: Optional[int]  # the total of an outer "Epochs" bar
        self.epoch_line = None  # type: Optional[Tuple[int, Optional[int]]]  # the last epoch printed, of how many
        self.raw_step = None  # type: Optional[Tuple[int, int]]  # (epoch, step as printed) of the last such line
        self.per_epoch = None  # type: Optional[bool]  # the printed step starts again each epoch ("Epoch [2/10], Step [100/600]")

    # ---- context kept between readers -------------------------------------------------------
    def carry(self) -> Dict[str, Any]:
        """What a later reader of the same log needs of this one (the Collector's state keeps it; status
        parses the lines the Collector has not read yet with it): the epoch base, where bars were first seen."""
        return {"epoch_base": self.epoch_base, "bars": [[k, n, s] for k, (n, s) in self.bar_seen.items()]}

    def carried(self, doc: Any) -> None:
        """Take what ``carry`` gave (from a file: anything of the wrong shape is dropped)."""
        if not isinstance(doc, dict):
            return
        base = doc.get("epoch_base")
        if isinstance(base, int) and not isinstance(base, bool) and base in (0, 1):
            self.epoch_base = base
        bars = doc.get("bars")
        for b in bars if isinstance(bars, list) else []:
            if isinstance(b, list) and len(b) == 3 and (b[0] is None or isinstance(b[0], int)) and \
                    isinstance(b[1], int) and isinstance(b[2], (int, float)):
                self.bar_seen[b[0]] = (b[1], float(b[2]))

    # ---- input ---------------------------------------------------------------------------
    def feed(self, data: bytes, t: float) -> List[Dict[str, Any]]:
        buf = self.pending + data
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut < 0:
            self.pending = buf if len(buf) <= MAX_PENDING else b""
            return []
        self.pending = buf[cut + 1:]
        if len(self.pending) > MAX_PENDING:
            self.pending = b""
        out = []  # type: List[Dict[str, Any]]
        text = buf[:cut].decode("utf-8", "replace")
        for line in text.split("\n"):
            for seg in line.split("\r"):
                if seg and len(seg) <= MAX_LINE:
                    self._segment(seg, t, out)
        self._flush_bar(out)
        return out

    def _segment(self, seg: str, t: float, out: List[Dict[str, Any]]) -> None:
        if "\x1b" in seg:
            seg = ANSI.sub("", seg)
        s = seg.strip()
        if not s:
            return
        if s.startswith(MARKER):
            self._flush_bar(out)
            self._reset()
            return
        if s[0] == "{" and '":' in s and s[-1] == "}" and self._json(s, t, out):
            return
        if s[0] == "{" and "':" in s:
            rec = {k: v for k, v in ((k, _num(v)) for k, v in DICT_PAIR.findall(s)) if v is not None}
            if rec:
                self._flush_bar(out)
                self._add(rec, t, out)
            return
        if "/s" in s or "s/" in s:
            end = self._bar(s, t) if "[" in s else -1
            if end >= 0:
                if s[end:].strip():  # a print that followed the bar on the same line
                    self._segment(s[end:], t, out)
                return
            if "•" in s and self._rich(s, t):
                return
        if self.patterns and self._taught(s, t, out):
            return
        low = s.lower()
        if "=" in s and CONFIG_ECHO.match(s) and not ECHO_METRIC.match(s.split("=")[0].strip()):
            return
        hm = EPOCH_HEADER.match(s)
        if hm:
            self.epoch_line = (int(hm.group(1)), int(hm.group(2)))
            return
        if "loss" in low or "step" in low or "iter" in low or "acc" in low or "lr" in low:
            self._plain(s, low, t, out)

    # ---- shapes --------------------------------------------------------------------------
    def _bar(self, s: str, t: float) -> int:
        """Where the bar in ``s`` ends (-1: no bar)."""
        m = BAR.search(s)
        if not m:
            return -1
        n, total_s, _elapsed, _left, rest = m.groups()
        if not rest or ("/s" not in rest and "s/" not in rest):
            return -1
        rm = RATE.search(rest)
        if not rm:
            return -1
        unit = rm.group(2)
        if (unit[2:] if unit.startswith("s/") else unit[:-2]).lower() not in STEP_UNITS:
            return m.end()  # datasets' "examples/s", downloads' "MB/s": not training steps
        desc = s[:m.start()]
        desc = PERCENT.sub("", desc.split("%|")[0]) if "%|" in desc else desc  # "Epoch:  30%|": not epoch 30
        skip, em, outer = _bar_desc(desc)
        if skip:
            return m.end()
        total = int(total_s) if total_s and total_s != "?" else None
        secs = _seconds(_elapsed) if _elapsed else None
        seen = self.bar_seen.get(total)
        if seen is None or int(n) < seen[0] or (secs is not None and secs < seen[1]):  # a new bar, or a new pass
            seen = self.bar_seen[total] = (int(n), secs or 0.0)
        rate_s = rm.group(1) if _plausible(rm.group(1), unit, secs, int(n), seen) else "?"
        self._progress(int(n), total, em, t, (rate_s, unit, rest[rm.end():]), epochs_bar=outer)
        return m.end()

    def _rich(self, s: str, t: float) -> bool:
        m = RICH.match(s)
        if not m or NOT_PROGRESS.search(m.group("desc")):
            return bool(m)
        rate = (m.group("rate"), m.group("unit"), m.group("rest"))
        self._progress(int(m.group("n")), int(m.group("total")), EPOCH.search(m.group("desc")), t, rate, rich=True)
        return True

    def _progress(self, n: int, total: Optional[int], em: Any, t: float, rate: Tuple[str, str, str],
                  rich: bool = False, epochs_bar: bool = False) -> None:
        """``rate``: the bar's rate, its unit (``it/s``, ``s/it``) and the postfix after it.
        ``epochs_bar``: an outer ``trange(E, desc="Epochs")``: its total is the number of epochs."""
        if epochs_bar and total:
            self.epoch_bar_total = total
            if self.main_total is not None and total != self.main_total:
                return  # it counts the epochs; the inner bar counts the steps
        if n == 0:
            return  # a bar not started yet (or Lightning's reset before the next epoch) tells nothing
        if self.main_total is not None and total != self.main_total:
            return  # another bar (HF's evaluation bar has no description): not the training's
        epoch = epochs = None
        base = 0
        if em:
            epoch = int(em.group(1))
            if em.group(2) is None or rich:
                epochs = int(em.group(2)) + 1 if em.group(2) else None  # Lightning counts epochs from 0
            else:  # a script's own "epoch 2/10": counted from wherever its first one started
                if self.epoch_base is None:
                    self.epoch_base = min(epoch, 1)
                base = self.epoch_base
                epochs = int(em.group(2))
        elif self.main_total is not None and total == self.main_total and n < self.main_n:
            self.bars_done += 1  # a new bar of the same length: the next pass over the data
        self.main_total, self.main_n = total, n
        before = epoch - base if epoch is not None else self.bars_done
        step = n + before * total if total else n
        outer = self.epoch_bar_total if self.epoch_bar_total != total else None  # another bar counts epochs
        multi = em is not None or self.bars_done > 0 or outer is not None
        epochs = epochs or self.epochs_hint or outer
        grand = None  # type: Optional[int]
        if total and multi and epochs:
            grand = epochs * total
        elif total and not multi:
            grand = total
        self.step = step
        # the rate and the postfix are read only for the bar that becomes a record (_flush_bar):
        # most redraws are overwritten by the next one before anyone looks
        self.bar_pending = (t, step, grand) + rate

    def _flush_bar(self, out: List[Dict[str, Any]]) -> None:
        """The newest bar becomes a record (before any record printed after it: the file stays in order)."""
        if self.bar_pending is None:
            return
        t, step, grand, rate_s, unit, post = self.bar_pending
        self.bar_pending = None
        rate = _num(rate_s) if rate_s != "?" else None
        if rate is not None and unit.startswith("s/"):
            rate = 1.0 / rate if rate > 0 else None
        self.progress = {"step": step, "total": grand, "rate": rate, "t": t}
        if grand and rate:
            self.progress["eta_s"] = round(max(0.0, grand - step) / rate, 1)
        rec = {"t": t, "step": step}  # type: Dict[str, Any]
        if grand:
            rec["max_steps"] = grand
        for k, v in PAIR.findall(post):
            if k not in SKIP_KEYS:
                x = _num(v)
                if x is not None:
                    rec[k] = x
        out.append(rec)

    def _json(self, s: str, t: float, out: List[Dict[str, Any]]) -> bool:
        """A JSON object printed on a line (``print(json.dumps({"step": 10, "loss": 0.53}))``)."""
        try:
            doc = json.loads(s)
        except ValueError:
            return False
        if not isinstance(doc, dict):
            return False
        rec = {}  # type: Dict[str, Any]
        for k, v in doc.items():
            if isinstance(v, str):
                v = _num(v)  # "0.53" as transformers 5 formats it
            if isinstance(v, (int, float)) and not isinstance(v, bool) and len(k) <= 80:
                rec[JSON_STEP.get(k, k)] = v
        if "step" in rec and isinstance(rec["step"], (int, float)):
            rec["step"] = self.step = int(rec["step"])
        if not any(k not in ("step", "epoch", "max_steps") for k in rec):
            return bool(rec)
        self._flush_bar(out)
        self._add(rec, t, out)
        return True

    def _plain(self, s: str, low: str, t: float, out: List[Dict[str, Any]]) -> None:
        # Each pattern runs only where its literal part is in the line (``low``: the line in lower case):
        # a log flood (20,000 lines a second) is parsed here line by line, and a search over the whole
        # line for a pattern that cannot match was most of the supervisor's time.
        rec = {}  # type: Dict[str, Any]
        em = EVAL_LINE.match(s)
        whose = None if em is None else "eval" if em.group(1).lower() == "evaluation" else em.group(1).lower()
        if "%" in s:
            for m in FRACTION.finditer(s):
                rec[self._key(m.group(1), whose)] = float(m.group(2))
        s_rest = FRACTION.sub(" ", s) if rec else s
        ib = EPOCH_BATCH.match(s) if whose is None and low.startswith("train") else None
        sm = None if ib or ("step" not in low and "iter" not in low) else STEP.search(s)
        bm = None if sm or ib or "batch" not in low else BATCH.search(s) or BATCHES.search(s)
        pairs = PAIR.finditer(s_rest) if ":" in s_rest or "=" in s_rest else ()
        for m in list(pairs) or list(SPACED.finditer(s_rest)):
            k, v = m.group(1), m.group(2)
            if _is_metric(k):
                x = _num(v)
                if x is not None:
                    qm = _qualifier(s_rest, m.start())
                    if whose is not None:
                        rec.setdefault(self._key(k, whose), x)  # "Loss: 0.7 (0.7)": the first is the value now
                    elif ib is not None:
                        rec.setdefault(k.lower(), x)
                    else:
                        rec[(qm.group(1) + "_" + k).lower() if qm else k] = x
        if not rec:
            return
        if ib:
            self._epoch_batch(int(ib.group(1)), int(ib.group(2)), int(ib.group(3)), rec, _num(ib.group(4) or ""))
        elif whose is not None:
            pass  # an evaluation line is no step of training: it takes the current one (_add)
        elif sm or bm:
            m = sm or bm
            self._printed_step(s, int(m.group(1)), int(m.group(2)) if m.group(2) else None, rec, bm is not None, low)
        else:
            self._epoch_progress(s, rec)
        self._flush_bar(out)
        self._add(rec, t, out)

    @staticmethod
    def _key(k: str, whose: Optional[str]) -> str:
        k = k.lower().replace("average ", "")
        if whose is None or k.startswith(whose + "_"):
            return k
        return whose + "_" + k

    def _epoch_batch(self, epoch: int, n: int, of: int, rec: Dict[str, Any], pct: Optional[float] = None) -> None:
        """``Train: E [b/B (p%)]``: b of B in epoch E (counted from the first epoch the log shows, 0 or 1).
        The image trainer prints the batch's 0-based index with the share done after it ((b+1)/B: its
        last line is ``[19/20 (100%)]``), MNIST the samples before it (b/B): the percentage says which."""
        if pct is not None and 0 <= n < of and abs(100.0 * (n + 1) / of - pct) < abs(100.0 * n / of - pct):
            n += 1
        if self.epoch_base is None:
            self.epoch_base = min(epoch, 1)
        rec["epoch"] = epoch
        rec["step"] = self.step = (epoch - self.epoch_base) * of + n
        if self.epochs_hint and of:
            rec["max_steps"] = self.epochs_hint * of

    def _taught(self, s: str, t: float, out: List[Dict[str, Any]]) -> bool:
        """The job file's ``metrics.patterns`` (named groups): a line one of them matches is read by them
        alone. ``step``, or ``epoch`` with ``batch``/``batches``, say where the run is; other groups are metrics."""
        got = {}  # type: Dict[str, str]
        for rx in self.patterns:
            m = rx.search(s)
            if m:
                got.update({k: v for k, v in m.groupdict().items() if v is not None})
        if not got:
            return False
        rec = {}  # type: Dict[str, Any]
        for k, v in got.items():
            x = _num(v)
            if x is not None and k not in PROGRESS_GROUPS:
                rec[k] = x
        num = {k: int(float(got[k])) for k in PROGRESS_GROUPS if k in got and _num(got[k]) is not None}
        if "step" in num:
            rec["step"] = self.step = num["step"]
        elif "epoch" in num and "batch" in num and num.get("batches"):
            self._epoch_batch(num["epoch"], num["batch"], num["batches"], rec)
            rec.pop("max_steps", None)
        elif "epoch" in num:
            rec["epoch"] = num["epoch"]
        epochs = num.get("epochs") or self.epochs_hint
        if num.get("max_steps"):
            rec["max_steps"] = num["max_steps"]
        elif epochs and num.get("batches"):
            rec["max_steps"] = epochs * num["batches"]
        if any(k not in ("step", "epoch", "max_steps") for k in rec) or "step" in rec:
            self._flush_bar(out)
            self._add(rec, t, out)
        return True

    def _printed_step(self, s: str, n: int, of: Optional[int], rec: Dict[str, Any], batch: bool = False,
                      low: str = "") -> None:
        """``step N[/M]`` on a line; with an epoch beside it the count may start again each epoch
        (PyTorch's tutorial loop prints ``Epoch [2/10], Step [100/600]``): seen going back while the
        epoch went up, the step is counted on over the epochs before."""
        step, total = n, of
        em = EPOCH.search(s) if "epoch" in (low or s.lower()) else None
        if em:
            epoch, epochs = int(em.group(1)), int(em.group(2)) if em.group(2) else None
            rec["epoch"] = epoch
            if batch:  # "| epoch 3 | 20/ 171 batches |": a later line without an epoch (a test) belongs to it
                self.epoch_line = (epoch, epochs)
            if self.epoch_base is None:
                self.epoch_base = min(epoch, 1)
            if batch:
                self.per_epoch = True  # "batch 30/100" counts within the epoch
            elif self.raw_step is not None and epoch > self.raw_step[0] and self.per_epoch is None:
                self.per_epoch = n < self.raw_step[1]
            self.raw_step = (epoch, n)
            if self.per_epoch and of:
                step = (epoch - self.epoch_base) * of + n
                epochs = epochs or self.epochs_hint
                total = epochs * of if epochs else None
        elif batch:
            return  # a batch count without its epoch says nothing of the run's progress
        rec["step"] = self.step = step
        if total:
            rec["max_steps"] = total

    def _epoch_progress(self, s: str, rec: Dict[str, Any]) -> None:
        """A line that names its epoch (``Epoch 3/10 - loss: 0.5``, or after an ``Epoch 3/10`` header)
        records it; where the log never shows a step (no bar, no ``step N``), the epoch is the only
        count of progress there is, so it stands for the step and its total for the total."""
        em = EPOCH.search(s)
        epoch, epochs = (int(em.group(1)), int(em.group(2)) if em.group(2) else None) if em else \
            (self.epoch_line or (None, None))
        if epoch is None:
            return
        if self.main_total is not None and self.epoch_bar_total is None and not self.bars_done and not epochs:
            # one bar counts every step of the run (accelerate's tqdm(range(max_train_steps))): a line's
            # "epoch 0: perplexity ..." reports an epoch that ended; kept, it read as the epoch under way
            # ("Epoch 2/3 ...", with its total, says where the run is)
            return
        if em:  # later lines without one (a logging line of the same epoch) belong to it
            self.epoch_line = (epoch, epochs or (self.epoch_line[1] if self.epoch_line else None))
        rec["epoch"] = epoch
        if self.epoch_base is None:
            self.epoch_base = min(epoch, 1)  # "Epoch 0/24" printed at its end: one epoch is done then
        if self.step is None and self.main_total is None:
            rec["step"] = epoch - self.epoch_base + 1
            if epochs:
                rec["max_steps"] = epochs

    def _add(self, rec: Dict[str, Any], t: float, out: List[Dict[str, Any]]) -> None:
        if "step" not in rec and self.step is not None:
            rec["step"] = self.step  # the bar's count when the line was printed
        rec["t"] = t
        out.append(rec)

