"""Import paramiko without two things gpujob never uses, a third of its import time.

- ``invoke`` (70–130 ms): paramiko.config imports it only to run ``Match exec`` lines of an
  ssh_config; gpujob connects from its own profiles. Blocked by a ``None`` entry in
  ``sys.modules`` (paramiko takes its ImportError path; ``Match exec`` then raises ImportError).
- ``importlib.metadata`` (20–30 ms with its scan of site-packages): paramiko 5 asks it for its
  own version, which goes into its SSH banner only. During the import a stand-in answers
  from paramiko's ``.dist-info`` folder name; the real module is untouched for everyone else.

Import this module before ``import paramiko``; the second import is then a cache hit.
"""

from __future__ import annotations

import os
import sys
import types


def _version() -> str:
    """paramiko's version from the name of its ``paramiko-X.Y.Z.dist-info`` folder."""
    for entry in sys.path:
        base = entry or "."
        if os.path.isdir(os.path.join(base, "paramiko")):
            try:
                names = os.listdir(base)
            except OSError:
                continue
            for n in names:
                if n.startswith("paramiko-") and n.endswith(".dist-info"):
                    return n[len("paramiko-"):-len(".dist-info")]
    return "unknown"


def _load() -> None:
    sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]
    if "paramiko" in sys.modules or "importlib.metadata" in sys.modules:
        import paramiko  # noqa: F401  (already loaded, or the real module is there anyway)

        return
    import importlib

    stub = types.ModuleType("importlib.metadata")
    stub.version = lambda name: _version()  # type: ignore[attr-defined]  # only paramiko asks, for itself
    sys.modules["importlib.metadata"] = stub
    try:
        import paramiko  # noqa: F401
    finally:
        del sys.modules["importlib.metadata"]
        if getattr(importlib, "metadata", None) is stub:
            del importlib.metadata


_load()
