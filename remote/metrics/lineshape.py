"""Where the patterns of a printed line match, found once for every line of the same shape.

A log flood prints one format over and over (``epoch 3 | step 1200 | train loss 0.53 | ...``): the lines differ
in their digits only. No pattern :class:`~remote.metrics.printedlines.LineReader` runs on a plain line tells one
ASCII digit from another (``\\d``, ``\\w``, letters; no literal digit), so each matches at the same places in the
line and in its *blind* copy, every ASCII digit made ``0`` (same length, same places). The blind line is the key:
:func:`shape_of` runs the patterns on it once and keeps the spans; the reader takes names and numbers from the line
itself at those spans (so a key such as ``f1`` or ``top5_acc`` is read as printed). ``BLIND`` makes the blind copy of
a whole chunk of log bytes at once (a digit is one byte in UTF-8, never part of a longer character).
"""

from typing import Any, Dict, List, Match, NamedTuple, Optional, Tuple

from remote.metrics.logpatterns import (
    BATCH,
    BATCHES,
    EPOCH,
    EPOCH_BATCH,
    EVAL_LINE,
    FRACTION,
    MEMO_MAX,
    METRIC_NAME,
    PAIR,
    QUALIFIER,
    QUALIFIER_ENDS,
    QUALIFIER_LEN,
    SKIP_KEYS,
    SPACED,
    STEP,
)

BLIND = bytes.maketrans(b"123456789", b"000000000")
SHAPE_MAX_LINE = 1024  # longer lines are read without being kept (the memo's size stays bounded)

Span4 = Tuple[int, int, int, int]  # a name's or count's start, end; the number's start, end (-1, -1: none)


class Shape(NamedTuple):
    whose: Optional[str]  # an evaluation line's qualifier (test, eval, val, ...)
    fractions: List[Span4]  # "Accuracy: 450/500 (90%)": the name, the percentage
    # name (None: it has digits, read from the line; names that are no metric are left out), the name's and the
    # number's spans (in the line less its fractions), the qualifier before it ("train loss")
    pairs: List[Tuple[Optional[str], int, int, int, int, Optional[str]]]
    first_wins: bool  # an evaluation line or "Train: E [b/B]": "Loss: 0.7 (0.7)" is the value now and its mean
    train_batch: Optional[Tuple[int, ...]]  # "Train: 3 [ 4/10 ( 50%)]": epoch, batch, batches, percentage (-1: none)
    counted: Optional[Span4]  # (not count: a tuple's method) "step 120/1000" or "batch 30/100": the count, its total (-1: none)
    count_is_batch: bool
    epoch: Optional[Span4]  # "Epoch 3/10": the epoch, its total (-1: none)


_shapes: Dict[str, Shape] = {}
# a blind line (as split, unstripped) -> how LogParser read the last line of that shape, where the way did not
# depend on its digits: its Shape (a plain print), or None (no record: a config echo, no metric word)
routes: Dict[str, Optional[Shape]] = {}
UNKNOWN = Shape(None, [], [], False, None, None, False, None)  # (a marker: not in routes)


def remember(blind: Optional[str], how: Optional[Shape]) -> None:
    """Keep how a line of this shape is read (``blind`` None: the way depended on more than its shape)."""
    if blind is not None and len(blind) <= SHAPE_MAX_LINE:
        if len(routes) >= MEMO_MAX:
            routes.clear()
        routes[blind] = how
_metric_keys: Dict[str, bool] = {}


def is_metric(k: str) -> bool:
    """``k`` names a metric (METRIC_NAME, not SKIP_KEYS): answered once a key."""
    got = _metric_keys.get(k)
    if got is None:
        if len(_metric_keys) >= MEMO_MAX:
            _metric_keys.clear()
        got = _metric_keys[k] = METRIC_NAME.search(k) is not None and k not in SKIP_KEYS
    return got


def metric_key(k: str, whose: Optional[str]) -> str:
    """An evaluation line's metric: ``Loss`` on a ``Test set:`` line is ``test_loss``."""
    k = k.lower().replace("average ", "")
    if whose is None or k.startswith(whose + "_"):
        return k
    return whose + "_" + k


def pair_name(k: str, qual: Optional[str], sh: Shape) -> Optional[str]:
    """The record's name for the metric ``k`` printed with a number (None: ``k`` is no metric)."""
    if not is_metric(k):
        return None
    if sh.whose is not None:
        return metric_key(k, sh.whose)
    if sh.train_batch is not None:
        return k.lower()
    return (qual + "_" + k).lower() if qual else k


def qualifier(s: str, end: int) -> Any:
    """``train``/``val``/... right before ``s[end:]``, spaces or ``_`` between (``train loss 2.1``, ``val_loss``):
    the word says whose the metric is. Looked for just before ``end``, not in all of the line before it."""
    j = end
    while j > 0 and (s[j - 1] == "_" or s[j - 1].isspace()):
        j -= 1
    if j == end or s[j - 1] not in QUALIFIER_ENDS:
        return None
    return QUALIFIER.search(s, max(0, j - QUALIFIER_LEN), j)  # \b sees the character before the window


def _span(m: "Match[str]", *groups: int) -> Tuple[int, ...]:
    return tuple(i for g in groups for i in m.span(g))


def _span4(m: "Match[str]", name: int, number: int) -> Span4:
    return m.span(name) + m.span(number)


def shape_of(blind: str) -> Shape:
    """The spans of the patterns in ``blind`` (a line with its digits as 0, or any line: its own shape)."""
    got = _shapes.get(blind)
    if got is None:
        got = _find(blind)
        if len(blind) <= SHAPE_MAX_LINE:
            if len(_shapes) >= MEMO_MAX:
                _shapes.clear()
            _shapes[blind] = got
    return got


def _find(s: str) -> Shape:
    # each pattern runs only where its literal part is in the line: most lines of a log match none
    low = s.lower()
    em = EVAL_LINE.match(s)
    whose = None if em is None else "eval" if em.group(1).lower() == "evaluation" else em.group(1).lower()
    fractions = [_span4(m, 1, 2) for m in FRACTION.finditer(s)] if "%" in s else []
    s_rest = FRACTION.sub(" ", s) if fractions else s
    ib = EPOCH_BATCH.match(s) if whose is None and low.startswith("train") else None
    sm = None if ib or ("step" not in low and "iter" not in low) else STEP.search(s)
    bm = None if sm or ib or "batch" not in low else BATCH.search(s) or BATCHES.search(s)
    found = list(PAIR.finditer(s_rest)) if ":" in s_rest or "=" in s_rest else []
    spans = []  # type: List[Tuple[str, int, int, int, int, Optional[str]]]
    for m in found or SPACED.finditer(s_rest):
        qm = qualifier(s_rest, m.start())
        spans.append((m.group(1),) + m.span(1) + m.span(2) + (qm.group(1) if qm else None,))
    cm = sm or bm
    ep = EPOCH.search(s) if "epoch" in low else None
    sh = Shape(whose, fractions, [], whose is not None or ib is not None, _span(ib, 1, 2, 3, 4) if ib else None,
               _span4(cm, 1, 2) if cm else None, bm is not None, _span4(ep, 1, 2) if ep else None)
    for k, ka, kb, va, vb, qual in spans:
        if "0" in k:  # a name with digits is read from each line (f1, top5_acc: not the same metric)
            sh.pairs.append((None, ka, kb, va, vb, qual))
        else:
            name = pair_name(k, qual, sh)
            if name is not None:
                sh.pairs.append((name, ka, kb, va, vb, qual))
    return sh
