"""Which codec pays on a slow link: compress a source-tree sync stream and a checkpoint-like
random file with each stdlib codec (the agent must decompress with the standard library).

    python benchmarks/sync/codecs.py [--mbit 100]

Estimated transfer time = max(compress, wire bytes / link rate, decompress): the stages overlap.
"""

from __future__ import annotations

import argparse
import bz2
import io
import lzma
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def payloads() -> dict[str, bytes]:
    from bench import make_small

    from remote import stream

    w = Path(tempfile.mkdtemp())
    make_small(w / "src", 3000)
    items = [stream.Item(str(p.relative_to(w / "src")), p, p.stat().st_size, 0, 0o644, is_dir=p.is_dir())
             for p in sorted((w / "src").rglob("*"))]
    buf = io.BytesIO()
    stream.write_items(buf, items)
    return {"3000 source files (stream)": buf.getvalue(), "16 MB random (checkpoint-like)": os.urandom(16 << 20)}


CODECS = {
    "none": (lambda d: d, lambda d: d),
    "gz:1": (lambda d: zlib.compress(d, 1), zlib.decompress),
    "gz:6": (lambda d: zlib.compress(d, 6), zlib.decompress),
    "gz:9": (lambda d: zlib.compress(d, 9), zlib.decompress),
    "bz2:9": (lambda d: bz2.compress(d, 9), bz2.decompress),
    "xz:0": (lambda d: lzma.compress(d, preset=0), lzma.decompress),
    "xz:6": (lambda d: lzma.compress(d, preset=6), lzma.decompress),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbit", type=float, default=100)
    a = ap.parse_args()
    rate = a.mbit * 1e6 / 8
    print(f"| payload | codec | ratio | compress MB/s | decompress MB/s | est. s at {a.mbit:.0f} Mbit |")
    print("|---|---|---:|---:|---:|---:|")
    for name, data in payloads().items():
        for codec, (c, d) in CODECS.items():
            t = time.monotonic()
            z = c(data)
            tc = time.monotonic() - t
            t = time.monotonic()
            d(z)
            td = time.monotonic() - t
            est = max(tc, len(z) / rate, td)
            print(f"| {name} | {codec} | {len(z) / len(data):.3f} | {len(data) / 1e6 / max(tc, 1e-9):.0f} | "
                  f"{len(data) / 1e6 / max(td, 1e-9):.0f} | {est:.2f} |", flush=True)


if __name__ == "__main__":
    main()
