"""HTTP to the sidecar with the standard library: plain calls, and text/event-stream answers
read with a timeout (the sidecar sends `: keep-alive` every 10 s, so a longer silence means a hung
sidecar or a cut connection)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._contract import Operation
from .errors import BatonError, Cancelled, from_answer

# How far beyond the wait a call may go: the sidecar answers within wait, so a longer silence is
# a hung sidecar, never a slow grant.
CALL_SLACK = 10.0


def seconds(d: float) -> str:
    ms = round(d * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def path(op: Operation, name: str) -> str:
    """The operation's path for ``name`` (an election, lock, semaphore or barrier name)."""
    return op.path.replace("{name}", urllib.parse.quote(name, safe=""), 1)


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 instant as a POSIX timestamp; None for null."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _error(status: int, body: bytes) -> BatonError:
    try:
        err = json.loads(body)["error"]
        return from_answer(status, err["code"], err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        return BatonError(status, str(status), body.decode("utf-8", "replace").strip())


class Transport:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port

    def url(self, op: Operation, name: str, query: dict[str, Any] | None = None) -> str:
        return path(op, name) + ("?" + urllib.parse.urlencode(query) if query else "")

    def call(self, op: Operation, name: str = "", query: dict[str, Any] | None = None, wait: float = 0.0,
             timeout: float | None = None, stop: threading.Event | None = None) -> Any:
        """One request of ``op`` for ``name``; the 2xx JSON answer, or the error's class raised.
        ``timeout`` (default wait plus CALL_SLACK) bounds each socket operation; ``stop`` set ends
        it with Cancelled."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or wait + CALL_SLACK)
        try:
            with _closing_on(stop, conn):
                conn.request(op.method, self.url(op, name, query))
                resp = conn.getresponse()
                body = resp.read()
        finally:
            conn.close()
        if resp.status // 100 != 2:
            raise _error(resp.status, body)
        return json.loads(body) if body else None

    def stream(self, op: Operation, name: str, query: dict[str, Any] | None, wait: float, idle: float,
               stop: threading.Event | None = None) -> EventStream:
        """Opens the event stream of ``op`` for ``name``; a refusal before it starts raises the
        error's class; ``stop`` set while it opens ends it with Cancelled."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=wait + CALL_SLACK)
        try:
            with _closing_on(stop, conn):
                conn.request(op.method, self.url(op, name, query), headers={"Accept": "text/event-stream"})
                resp = conn.getresponse()
            if resp.status // 100 != 2:
                raise _error(resp.status, resp.read())
            if not resp.getheader("Content-Type", "").startswith("text/event-stream"):
                raise BatonError(resp.status, "NotAStream",
                                 f"{path(op, name)} answered {resp.getheader('Content-Type')}")
            conn.sock.settimeout(idle)
        except BaseException:
            conn.close()
            raise
        return EventStream(conn, resp)


class _closing_on:
    """While in the block, closes conn's socket once stop is set (ending a blocked read); the
    block's error then becomes Cancelled."""

    def __init__(self, stop: threading.Event | None, conn: http.client.HTTPConnection):
        self._stop, self._conn = stop, conn
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> None:
        if self._stop is not None:
            if self._stop.is_set():
                raise Cancelled("stopped before the call")
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        assert self._stop is not None
        while not self._done.is_set():
            if self._stop.wait(0.1):
                sock = self._conn.sock
                if sock is not None and not self._done.is_set():
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if kind is not None and self._stop is not None and self._stop.is_set():
            raise Cancelled("stopped while waiting") from value


@dataclass
class Event:
    name: str
    data: Any


class EventStream:
    """A text/event-stream being read. close() from any thread ends a blocked next()."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self._conn, self._resp = conn, resp
        self._closed = threading.Event()

    def next(self) -> Event | None:
        """The next event; None when the sidecar ended the stream. Raises OSError (socket.timeout
        when it fell silent) or http.client errors when it broke."""
        name, data = "", list[str]()
        while True:
            raw = self._resp.readline()
            if not raw:
                if self._closed.is_set():
                    raise ConnectionAbortedError("the stream was closed")
                return None
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if name or data:
                    text = "\n".join(data)
                    return Event(name or "message", json.loads(text) if text else None)
            elif line.startswith(":"):
                continue  # `: keep-alive`, `: lagged N`
            else:
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)

    def close(self) -> None:
        self._closed.set()
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()
