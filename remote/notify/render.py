"""An event as a message: a title and plain text (the log tail last, inside a ``` fence), and
:func:`fit`, which cuts a text to a platform's limit."""

from typing import Any, Mapping, Sequence, Tuple, cast

_VERB = {
    "started": ("\u25b6\ufe0f", "started"),
    "succeeded": ("\u2705", "succeeded"),
    "failed": ("\u274c", "failed"),
    "restarted": ("\U0001f501", "restarted"),
    "stopped": ("\u23f9\ufe0f", "stopped"),
    "autostopped": ("\u23f9\ufe0f", "auto-stopped"),
    "lost": ("\u26a0\ufe0f", "lost contact"),
    "gpu_error": ("\U0001f6a8", "GPU error"),
    "mirror_failing": ("\u26a0\ufe0f", "checkpoint mirror failing"),
    "test": ("\U0001f514", "test notification"),
    "disk_release": ("\u23f3", "disk released soon"),
    "budget": ("\U0001f4b8", "budget limit passed"),  # the account's, from the laptop (gpujob budget)
    "balance_low": ("\U0001f4b8", "balance low"),
}


def _fmt_duration(s: Any) -> str:
    try:
        s = int(round(float(s)))
    except (TypeError, ValueError):
        return str(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return "%dh %02dm" % (h, m)
    if m:
        return "%dm %02ds" % (m, sec)
    return "%ds" % sec


def _fmt_num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    return "%.4g" % v


def render(event: Mapping[str, object]) -> Tuple[str, str]:
    """(title, text) of an event: plain text, the log tail last inside a ``` fence."""
    kind = str(event.get("event", "test"))
    icon, verb = _VERB.get(kind, ("", kind))
    who = event.get("name") or event.get("job_id") or event.get("host") or "job"  # a host's event has no job
    title = ("%s gpujob: %s %s" % (icon, who, verb)).strip()
    lines = []
    job = str(event.get("name") or "")
    if event.get("job_id") and event.get("job_id") != job:
        job = ("%s (%s)" % (job, event["job_id"])) if job else str(event["job_id"])
    if job:
        lines.append("Job: %s" % job)
    if event.get("host"):
        lines.append("Host: %s" % event["host"])
    lines.append("Status: %s" % verb)
    if event.get("duration_s") is not None:
        lines.append("Duration: %s" % _fmt_duration(event["duration_s"]))
    if event.get("cost") is not None:
        c = event["cost"]
        try:  # a number, or text that reads as one; anything else is shown as it is
            cost = "%.2f" % float(c if isinstance(c, (int, float, str)) else str(c))
        except (TypeError, ValueError):
            cost = str(event["cost"])
        lines.append("Cost: %s %s" % (cost, event.get("currency") or ""))
    for key, label in (("reason", "Reason"), ("diagnosis", "Diagnosis"), ("remedy", "Remedy")):
        if event.get(key):
            lines.append("%s: %s" % (label, event[key]))
    only = event.get("only_there")
    if isinstance(only, list) and only:  # disk_release: the checkpoints a powered-off host alone holds
        lines.append("Only on the instance:")
        lines.extend("- %s" % x for x in only[:20])
    metrics = event.get("metrics") or {}
    if isinstance(metrics, dict) and metrics:
        items = ["%s=%s" % (k, _fmt_num(v)) for k, v in list(metrics.items())[:16]]
        lines.append("Metrics: %s" % ", ".join(items))
    if event.get("tb_url"):
        lines.append("TensorBoard: %s" % event["tb_url"])
    if kind == "test":
        lines.append("This is a test message from gpujob: the channel works.")
    tail = cast(Sequence[object], event.get("log_tail") or [])  # its lines (remote/run/events.py)
    if tail:
        lines.append("Last %d log lines:" % len(tail))
        lines.append("```")
        lines.extend(str(x).rstrip("\n").replace("```", "'''") for x in tail[-20:])
        lines.append("```")
    return title.strip(), "\n".join(lines)


# A message's text holds what the job printed (its log tail, an exception's text as the diagnosis,
# metric names): third-party output, which must not become a chat platform's markup. Without
# these, a log line `<!channel>` pinged a whole Slack channel, `@everyone` a Discord server, and
# `[Resume the job](https://evil.example)` or `![](https://evil.example/pixel)` showed as a link
# or fetched an image in gpujob's own message (WeCom and DingTalk render the tail unfenced).
_SLACK = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_DISCORD = {ord(c): "\\" + c for c in "\\*_~`|[]<>@"}
_DEFANG = {ord("["): "\uff3b", ord("]"): "\uff3d", ord("<"): "\uff1c", ord(">"): "\uff1e"}


def slack_text(text: str) -> str:
    """Slack's three control characters escaped, as its API asks: no mention, no link markup."""
    return text.translate(_SLACK)


def discord_text(text: str) -> str:
    """Markdown punctuation escaped with a backslash outside ``` fences (inside, Discord shows it as it is)."""
    lines, fenced = text.split("\n"), False
    for i, line in enumerate(lines):
        if line == "```":
            fenced = not fenced
        elif not fenced:
            lines[i] = line.translate(_DISCORD)
    return "\n".join(lines)


def defanged(text: str) -> str:
    """For a markdown with no escapes (WeCom's, DingTalk's): brackets and angle brackets as their
    full-width forms, so no link, image, mention or tag can form; the words stay readable."""
    return text.translate(_DEFANG)


def fit(text: str, limit: int, in_bytes: bool = False) -> str:
    """``text`` cut to ``limit`` characters (or UTF-8 bytes) keeping its head and its tail."""
    size = (lambda s: len(s.encode("utf-8"))) if in_bytes else len
    if size(text) <= limit:
        return text
    if limit < 100:
        while size(text) > limit - 1 and text:
            text = text[:-1]
        return text + "\u2026"
    mark = "\n\u2026(truncated)\u2026\n"
    budget = limit - size(mark)
    head_n, tail_n = int(budget * 0.4), budget - int(budget * 0.4)
    head, tail = text[:head_n], text[-tail_n:] if tail_n > 0 else ""
    while size(head) > budget * 0.4 and head:
        head = head[:-max(1, len(head) // 20)]
    while size(tail) > budget - size(head) and tail:
        tail = tail[max(1, len(tail) // 20):]
    return head + mark + tail

