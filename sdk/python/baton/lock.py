"""Locks and semaphore permits: held by a stream (the default: the lock dies with the process)
or by a lease this client renews, stopping at the first renewal that fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from . import _contract as api
from . import errors, types
from ._http import Event, EventStream, Transport, parse_time, path, seconds

# The sidecar's bounds, in seconds: the longest wait it takes in one call; a lease's.
MIN_WAIT, MAX_WAIT = api.WAIT_MIN_MS / 1000, api.WAIT_MAX_MS / 1000
MIN_TTL, MAX_TTL = api.TTL_MIN_MS / 1000, api.TTL_MAX_MS / 1000


class GrantOps(NamedTuple):
    """The operations on the grants of a lock, or of a semaphore."""

    acquire: api.Operation
    inspect: api.Operation
    release: api.Operation
    renew: api.Operation


LOCK_OPS = GrantOps(api.OP_LOCK_ACQUIRE, api.OP_LOCK_INSPECT, api.OP_LOCK_RELEASE, api.OP_LOCK_RENEW)
SEMAPHORE_OPS = GrantOps(api.OP_SEMAPHORE_ACQUIRE, api.OP_SEMAPHORE_INSPECT, api.OP_SEMAPHORE_RELEASE,
                         api.OP_SEMAPHORE_RENEW)


class Lock:
    """A held lock or permit; a context manager that releases it on exit.

    ``lost`` is a threading.Event set the moment the grant is known to have ended: lost,
    released, a renewal failed, or ``valid_until`` passed without fresher word (a hung
    sidecar); ``cause`` says why (an ``errors.Ended`` subclass). Pass ``token`` (the fencing
    token) to what the lock protects."""

    def __init__(self, transport: Transport, ops: GrantOps, name: str, grant: dict[str, Any],
                 stream: EventStream | None, ttl: float | None, on_lost: Callable[[Lock], None] | None):
        self._t, self._ops, self._name = transport, ops, name
        self._path = path(ops.inspect, name)  # for messages
        self.grant = cast(types.Grant, grant)
        self.token: int = grant["token"]
        self._stream, self._ttl, self._on_lost = stream, ttl, on_lost
        self.lost = threading.Event()
        self.cause: errors.Ended | None = None
        self.suspended = False
        self._valid_until = parse_time(grant.get("validUntil")) or 0.0
        self._mu = threading.Lock()
        self._threads = [threading.Thread(target=self._guard, daemon=True)]
        if stream is not None:
            self._threads.append(threading.Thread(target=self._follow, daemon=True))
        for t in self._threads:
            t.start()

    @property
    def valid_until(self) -> float:
        """The latest promise, as a POSIX timestamp: until then the holder may act."""
        with self._mu:
            return self._valid_until

    def held(self) -> bool:
        return not self.lost.is_set()

    def check(self) -> None:
        """Raises ``cause`` once the grant ended: call it before each protected step."""
        if self.lost.is_set():
            raise self.cause or errors.Lost(self._path)

    def release(self) -> None:
        """Releases (DELETE with the token; a stream hold's stream closes too) and stops renewing.
        Releasing a grant that already ended is not an error."""
        if not self.lost.is_set():
            try:
                self._t.call(self._ops.release, self._name, {api.PARAM_TOKEN: self.token})
            except (errors.StaleToken, errors.NotHeld):
                pass
            except (errors.BatonError, OSError):
                if self._stream is None:
                    raise
        self._end(errors.Released(self._path))
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    unlock = release

    def __enter__(self) -> Lock:  # noqa: PYI034 - Lock is final; typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _end(self, cause: errors.Ended) -> None:
        with self._mu:
            if self.lost.is_set():
                return
            self.cause = cause
            self.lost.set()
        if self._stream is not None:
            self._stream.close()
        if self._on_lost is not None and not isinstance(cause, errors.Released):
            self._on_lost(self)

    def _follow(self) -> None:
        assert self._stream is not None
        while True:
            try:
                ev = self._stream.next()
            except Exception as e:  # noqa: BLE001 - any break of the stream ends the hold
                self._end(errors.Lost(f"{self._path}: the hold's stream broke: {e!r}"))
                return
            if ev is None:
                self._end(errors.Lost(f"{self._path}: the sidecar ended the hold's stream"))
                return
            data = ev.data if isinstance(ev.data, dict) else {}
            if ev.name == "lost":
                self._end(errors.Lost(f"{self._path}: {data.get('reason')}"))
                return
            if ev.name == "released":
                self._end(errors.Released(f"{self._path}: {data.get('reason')}"))
                return
            if ev.name == "suspended":
                with self._mu:
                    self.suspended = True
                    until = parse_time(data.get("validUntil"))
                    if until is not None and until < self._valid_until:
                        self._valid_until = until
            elif ev.name == "resumed":
                with self._mu:
                    self.suspended = False

    def _guard(self) -> None:
        """Ends the grant at valid_until; keeps valid_until fresh: a lease by renewing it, a
        stream hold by asking the sidecar whether it still holds it."""
        while True:
            left = self.valid_until - time.time()
            if left <= 0:
                self._end(errors.ValidUntilPassed(self._path))
                return
            step = left / 3
            if self._ttl:
                step = min(step, self._ttl / 3)
            if self.lost.wait(max(step, 0.05)):
                return
            if time.time() >= self.valid_until:
                self._end(errors.ValidUntilPassed(self._path))
                return
            try:
                fresh = self._refresh()
            except (errors.BatonError, OSError) as e:
                if self._ttl:
                    # Never retried: the lease may be gone, and a renew loop outliving its lock
                    # is the bug this client exists to prevent.
                    cause = errors.Lost(f"{self._path}: renewal failed: {e!r}")
                    cause.__cause__ = e
                    self._end(cause)
                    return
                if isinstance(e, errors.BatonError) and e.status // 100 == 4:
                    cause = errors.Lost(f"{self._path}: {e!r}")
                    cause.__cause__ = e
                    self._end(cause)
                    return
                continue  # a stream hold: its stream says when it ends; validUntil bounds it
            with self._mu:
                if fresh and fresh > self._valid_until and (self._ttl or not self.suspended):
                    self._valid_until = fresh

    def _refresh(self) -> float | None:
        # Bounded by the time left: an answer after validUntil is worth nothing, and the guard
        # must be free to give the grant up then.
        left = max(self.valid_until - time.time(), 0.01)
        if self._ttl:
            grant = self._t.call(self._ops.renew, self._name, {api.PARAM_TOKEN: self.token}, timeout=left)
            return parse_time(grant.get("validUntil"))
        state = self._t.call(self._ops.inspect, self._name, timeout=left)
        me = state.get("self") or {}
        if not me.get("holds") or me.get("token") != self.token:
            raise errors.NotHeld(409, "NotHeld", "the sidecar no longer holds this grant")
        return parse_time(me.get("validUntil"))


def check_wait(wait: float | None) -> None:
    """A wait the sidecar would refuse is refused here, before any call."""
    if wait is not None and not MIN_WAIT <= wait <= MAX_WAIT:
        raise ValueError(f"wait={wait!r}: {MIN_WAIT:g} (try once) to {MAX_WAIT:g} s, or None to wait until "
                         f"granted or stop is set (in calls of at most {MAX_WAIT:g} s)")


def check_ttl(ttl: float | None) -> None:
    """A lease the sidecar would refuse is refused here, before any call (None or 0: a stream hold)."""
    if ttl and not MIN_TTL <= ttl <= MAX_TTL:
        raise ValueError(f"ttl={ttl!r}: a lease is {MIN_TTL:g} to {MAX_TTL:g} s (None: held by a stream)")


def acquire(transport: Transport, ops: GrantOps, name: str, query: dict[str, Any], *, wait: float | None,
            ttl: float | None, idle: float, on_lost: Callable[[Lock], None] | None,
            stop: threading.Event | None = None) -> Lock:
    """wait None: until granted or ``stop`` is set (in steps of the sidecar's longest wait); 0:
    try once."""
    check_wait(wait)
    check_ttl(ttl)
    while True:
        got = threading.Event()
        step = MAX_WAIT if wait is None else wait
        q = {**query, api.PARAM_WAIT: seconds(step)}
        try:
            if ttl:
                grant = transport.call(ops.acquire, name, {**q, api.PARAM_TTL: seconds(ttl)}, wait=step, stop=stop)
                return Lock(transport, ops, name, grant, None, ttl, on_lost)
            stream = transport.stream(ops.acquire, name, {**q, api.PARAM_HOLD: api.HOLD_STREAM}, step, idle,
                                      stop=stop)
            closer = threading.Thread(target=_close_on_stop, args=(stream, stop, got), daemon=True) \
                if stop is not None else None
            if closer is not None:
                closer.start()
            try:
                first: Event | None = stream.next()
            except BaseException as e:
                stream.close()
                if stop is not None and stop.is_set():
                    raise errors.Cancelled("stopped while waiting") from e
                raise
            finally:
                got.set()
                if closer is not None:
                    closer.join()
            if first is None or first.name != "granted":
                stream.close()
                raise errors.Lost(f"{path(ops.acquire, name)}: first event {first.name if first else None!r}")
            return Lock(transport, ops, name, first.data, stream, None, on_lost)
        except errors.NotGranted:
            if wait is not None:
                raise


def _close_on_stop(stream: EventStream, stop: threading.Event, done: threading.Event) -> None:
    """Closes stream when stop is set before done (ending a wait blocked in it)."""
    while not done.is_set():
        if stop.wait(0.1):
            if not done.is_set():
                stream.close()
            return

