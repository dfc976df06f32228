"""YAML read under limits, keeping each key's position (``job.yaml:3:5``) for error messages.

A YAML file is a graph: an alias is one shared node, so a few lines of aliases ("billion laughs")
stand for billions of values, and the composer recurses once per nesting level. Everything read
here is bounded before it is expanded, so a crafted or mistaken file is refused at once.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from gpujob.errors import SpecError

Mark = str  # "job.yaml:3:5" or "--set retry.max_restarts"
# Limits of what a job file may hold: far above any real one, low enough that a crafted file
# (an alias bomb, thousands of nested brackets, a log file passed by mistake) is refused at once.
MAX_FILE_BYTES = 1 << 20
MAX_VALUES = 10_000  # values after expanding aliases (*name)
MAX_EVENTS = 50_000  # what the parser reports (a value, a collection's start and end): bounds its time
MAX_DEPTH = 50
_MERGE_TAG = "tag:yaml.org,2002:merge"
# LibYAML's parser where PyYAML has it: tens of times faster than the pure-Python one on a large file
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    """YAML 1.2's floats on top of PyYAML's 1.1 rules: 1.1 wants a dot and a signed exponent, so
    ``1e-5`` and ``3E4`` (as every config and doc writes them, and as JSON, Python and YAML 1.2 read
    them) would be strings, refused wherever a number is expected."""


_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")
# a copy of the resolvers for _Loader only (PyYAML copies on first add): yaml's own loaders unchanged
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
_LOADER: Any = _Loader


class WrittenFloat(float):
    """A job file's float that prints as it was written: ``env: {EPS: 1e-5}`` gives the job
    ``EPS=1e-5``, not Python's ``1e-05``; compares, hashes and serialises as the float it is."""

    text: str

    def __new__(cls, value: float, text: str) -> WrittenFloat:
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __getnewargs__(self) -> tuple[float, str]:  # type: ignore[override]  # copy and pickle
        return float(self), self.text

    def __str__(self) -> str:
        return self.text


class _Expander:
    """Composed YAML nodes → Python values with each key's position, under a budget of values:
    aliases are expanded once per use, so a few lines can stand for billions of values."""

    def __init__(self, source: str, marks: dict[tuple, Mark]) -> None:
        self.source, self.marks, self.left = source, marks, MAX_VALUES
        self.scalars = SafeConstructor()

    def mark(self, node: yaml.Node) -> Mark:
        return f"{self.source}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"

    def value(self, node: yaml.Node, path: tuple) -> Any:
        self.left -= 1
        if self.left < 0:
            raise SpecError(f"{self.mark(node)}: more than {MAX_VALUES} values once its aliases (*name) are expanded",
                            "a job file needs a few dozen values: remove the repeated aliases")
        self.marks[path] = self.mark(node)
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(v, path + (i,)) for i, v in enumerate(node.value)]
        try:
            v = self.scalars.construct_object(node)
            return WrittenFloat(v, node.value) if type(v) is float and node.tag.endswith(":float") else v
        except (yaml.YAMLError, ValueError, TypeError, AttributeError, OverflowError) as e:  # e.g. `!!int x`
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise SpecError(f"{self.mark(node)}: cannot read {str(node.value)[:40]!r} as {tag}: "
                            f"{getattr(e, 'problem', None) or e}", "remove the tag (!...) or fix the value") from None

    def mapping(self, node: yaml.MappingNode, path: tuple) -> dict:
        out: dict = {}
        merged: dict = {}
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:  # `<<: *defaults`: keys written here win
                for m in vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]:
                    v = self.value(m, path)
                    if not isinstance(v, dict):
                        raise SpecError(f"{self.mark(m)}: `<<` merges a mapping, not {type(v).__name__}",
                                        "write <<: *anchor_of_a_mapping")
                    merged = {**v, **merged}
                continue
            if not isinstance(knode, yaml.ScalarNode):
                raise SpecError(f"{self.mark(knode)}: a key must be a plain word, not a list or mapping",
                                "write key: value")
            key = knode.value
            self.marks[path + (key,)] = self.mark(knode)
            if key in out:
                raise SpecError(f"{self.mark(knode)}: key {key[:60]!r} appears twice", "keep one of them")
            out[key] = self.value(vnode, path + (key,))
            self.marks[path + (key,)] = self.mark(knode)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out


def _check_shape(text: str, source: str) -> None:
    """Refuse nesting past ``MAX_DEPTH`` before composing (the composer recurses once per level),
    and a file of more than ``MAX_EVENTS`` parts (a data file passed by mistake) before reading it all."""
    depth = 0
    for n, ev in enumerate(yaml.parse(text, Loader=_LOADER)):
        if n > MAX_EVENTS:
            m = ev.start_mark
            at = f"{source}:{m.line + 1}" if m else source  # (a parsed event has its mark)
            raise SpecError(f"{at}: more than {MAX_VALUES} values: not a job file",
                            "a job file needs a few dozen values: is this the right file?")
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                m = ev.start_mark
                at = f"{source}:{m.line + 1}:{m.column + 1}" if m else source
                raise SpecError(f"{at}: nested more than {MAX_DEPTH} levels deep",
                                "a job file needs a few levels: is this the right file?")
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def _compose(text: str, source: str) -> yaml.Node | None:
    """The YAML node tree of ``text``, refusing NUL bytes and deep nesting; YAML errors pass through."""
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise SpecError(f"{source}:{line}: holds a NUL byte: not a text file (a binary file?)",
                        "give the job's YAML file (written with gpujob init or by hand)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a command-line word that was not UTF-8 (surrogate escapes)
        raise SpecError(f"{source}: {text[e.start:e.start + 1]!r} is not UTF-8 text", "write the value in UTF-8") from None
    _check_shape(text, source)
    return yaml.compose(text, Loader=_LOADER)


def load_yaml(text: str, source: str) -> tuple[Any, dict[tuple, Mark]]:
    """Parse YAML keeping each key's position; syntax errors and crafted input become ``SpecError``."""
    marks: dict[tuple, Mark] = {}
    try:
        node = _compose(text, source)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark
        pos = f"{source}:{m.line + 1}:{m.column + 1}" if m else source
        raise SpecError(f"{pos}: not valid YAML: {e.problem}", "fix the YAML syntax at that line") from None
    except yaml.YAMLError as e:  # the reader's errors (a character YAML does not allow) are not marked
        raise SpecError(f"{source}: not valid YAML: {e}", "fix the YAML syntax (is this the job file?)") from None
    if node is None:
        return {}, marks
    return _Expander(source, marks).value(node, ()), marks


def read_job_file(p: Path) -> str:
    """The text of job file ``p``; a folder, a binary or huge file, or one that cannot be read is a ``SpecError``."""
    try:
        if p.is_dir():
            inside = " (it holds job.yaml: pass that)" if (p / "job.yaml").is_file() else ""
            raise SpecError(f"{p} is a folder, not a job file{inside}", f"gpujob submit {p / 'job.yaml'}")
        with open(p, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"job file {p} not found", "check the path, or create one with gpujob init") from None
    except OSError as e:
        raise SpecError(f"cannot read job file {p}: {e.strerror or e}", "check the path and its permissions") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"{p} is over {MAX_FILE_BYTES >> 20} MB: not a job file", "give the job's YAML file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SpecError(f"{p}:{line}: not UTF-8 text (byte {data[e.start]:#04x}); a binary file?",
                        "save the job file as UTF-8, or give the job's YAML file") from None


def read_value(text: str, source: str, marks: dict[tuple, Mark], path: tuple) -> Any:
    """One value given as YAML text (``--set key=text``), within the same limits; text that is
    not YAML stays text."""
    try:
        node = _compose(text, source)
        return "" if node is None else _Expander(source, marks).value(node, path)
    except yaml.YAMLError:
        return text
