"""The API's long-running pieces as Python objects: a job's log as an iterator, a tunnel as a context manager.

The use cases underneath block and call back (``follow_logs`` writes chunks, ``run_tunnel``
serves until told to stop); here they run in daemon threads so that a notebook can iterate or
leave a ``with`` block. Leaving early ends them: the log's streams are killed (a follow
waiting on a quiet job wakes up), the tunnel's loop is told to stop and closes its forward.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from gpujob.jsontypes import JSONObject

if TYPE_CHECKING:
    from gpujob.api.results import TunnelInfo

Write = Callable[[bytes], None]
_DONE = object()


def close_agent(agent: Any) -> None:
    """Close an agent's connection (the job on the host runs on)."""
    agent.close()


class Cancelled(Exception):
    """The reader of a log left: its producers stop at their next chunk or reconnect."""


class _Tracked:
    """An agent that remembers the streams it opens, so that a reader who leaves can end them."""

    def __init__(self, agent: Any, streams: list[Any]) -> None:
        self._agent, self._streams = agent, streams

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def stream(self, verb: str, args: list[str] | None = None) -> Any:
        s = self._agent.stream(verb, args)
        self._streams.append(s)
        return s


class LogPump:
    """Runs producers (each ``fn(connect, write)``, e.g. one per node) in threads and yields what they write."""

    def __init__(self, connect: Callable[[Any], Any], sources: list[Any], cancel: threading.Event | None = None) -> None:
        self.connect, self.sources = connect, sources
        self.q: queue.Queue[Any] = queue.Queue(maxsize=256)
        self.cancelled = threading.Event()
        self.stop = cancel  # the caller's: set from any thread, the reader stops within 0.5 s (never set here)
        self.streams: list[Any] = []
        self.agents: list[Any] = []

    def connector(self, source: Any) -> Callable[[], Any]:
        """A reconnect function for ``follow_logs`` that refuses once the reader has left."""

        def reconnect() -> Any:
            if self.cancelled.is_set():
                raise Cancelled()
            agent = self.connect(source)
            self.agents.append(agent)
            return _Tracked(agent, self.streams)

        return reconnect

    def write(self, chunk: bytes) -> None:
        while True:
            if self.cancelled.is_set():
                raise Cancelled()
            try:
                self.q.put(chunk, timeout=0.5)
                return
            except queue.Full:
                continue

    def run(self, produce: Callable[[Any, Callable[[], Any]], object]) -> Iterator[bytes]:  # (what it returns: unused)
        """Yield the chunks ``produce(source, reconnect)`` writes for every source; its first error is raised."""

        def one(source: Any) -> None:
            try:
                produce(source, self.connector(source))
                self.q.put(_DONE)
            except Cancelled:
                pass
            except BaseException as e:  # noqa: BLE001 - handed to the reader, who raises it
                self.q.put(e)

        threads = [threading.Thread(target=one, args=(s,), daemon=True) for s in self.sources]
        for t in threads:
            t.start()
        left = len(threads)
        try:
            while left:
                try:
                    item = self.q.get(timeout=0.5)
                except queue.Empty:
                    if self.stop is not None and self.stop.is_set():
                        return
                    continue
                if item is _DONE:
                    left -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the producers: their streams are killed, their connections closed."""
        self.cancelled.set()
        for end in [s.kill for s in self.streams] + [lambda a=a: close_agent(a) for a in self.agents]:
            try:
                end()
            except Exception:  # noqa: BLE001 - a stream or connection already gone
                pass


class Tunnel:
    """A forward served in the background: ``with tunnel as info:`` (a ``TunnelInfo``) until the block ends.

    ``wait()`` blocks while it serves (the CLI waits there for Ctrl-C) and raises its error
    if it gave up (the host stayed away).
    """

    def __init__(self, serve: Callable[[Callable[[JSONObject], None], threading.Event], None]) -> None:
        self._serve = serve
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.info: TunnelInfo | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TunnelInfo:
        def ready(doc: JSONObject) -> None:
            from gpujob.api.results import TunnelInfo

            self.info = TunnelInfo.from_json(doc)
            self._ready.set()

        def run() -> None:
            try:
                self._serve(ready, self._stop)
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                self._error = e
            finally:
                self._ready.set()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self.info is None:
            self._thread.join()
            raise self._error or RuntimeError("the tunnel ended before it was up")
        return self.info

    def wait(self) -> None:
        """Block while the tunnel serves; raise its error when it gives up."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(0.5)
        if self._error is not None:
            raise self._error

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
