"""The client of one sidecar."""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import cast

from . import _contract as api
from . import errors, leader, lock, types
from ._http import Event, EventStream, Transport, seconds
from .leader import Callback, election_op
from .lock import LOCK_OPS, SEMAPHORE_OPS, Lock

DEFAULT_ADDRESS = "127.0.0.1:4040"

# The name of the event this client adds to ``events()`` when the stream breaks.
DISCONNECTED = "disconnected"


class Client:
    """A client of the sidecar at ``address`` ("HOST:PORT" or "http://HOST:PORT"); None means
    $BATON_SIDECAR, else 127.0.0.1:4040. Safe to share between threads.

    ``stream_idle``: how long a stream may stay silent before it is taken as dead (the sidecar
    sends a keep-alive every 10 s)."""

    def __init__(self, address: str | None = None, *, stream_idle: float = 25.0):
        address = address or os.environ.get("BATON_SIDECAR") or DEFAULT_ADDRESS
        parsed = urllib.parse.urlsplit(address if "://" in address else "http://" + address)
        self._t = Transport(parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.stream_idle = stream_idle

    # --- leadership ---

    def leader(self, election: str = "") -> types.LeaderInfo:
        """GET /leader[/NAME]: {election, leader: {identity, token, ...} | None, self: {isLeader, validUntil, ...}}."""
        return cast(types.LeaderInfo, self._t.call(election_op(election, api.OP_LEADER, api.OP_LEADER_DEFAULT),
                                                   election))

    def wait_leader_change(self, election: str, token: int, wait: float, *,
                           stop: threading.Event | None = None) -> types.LeaderInfo:
        """Long-polls until the leader's token differs from token, or wait passes (``stop`` set: Cancelled)."""
        return cast(types.LeaderInfo, self._t.call(election_op(election, api.OP_LEADER, api.OP_LEADER_DEFAULT),
                                                   election, {api.PARAM_WAIT: seconds(wait), api.PARAM_TOKEN: token},
                                                   wait=wait, stop=stop))

    def resign(self, election: str = "") -> None:
        self._t.call(election_op(election, api.OP_LEADER_RESIGN, api.OP_LEADER_RESIGN_DEFAULT), election)

    def release(self, election: str = "") -> bool:
        """Answers stepping-down (run_leader_election does it for the app); whether it led."""
        op = election_op(election, api.OP_LEADER_RELEASE, api.OP_LEADER_RELEASE_DEFAULT)
        return bool(self._t.call(op, election).get("wasLeader"))

    def run_leader_election(self, on_started_leading: Callback, *, election: str = "",
                            campaign: bool = False, stop: threading.Event | None = None,
                            on_stopped_leading: Callable[[errors.Ended], None] | None = None,
                            on_new_leader: Callable[[types.Leader | None], None] | None = None) -> None:
        """Follows (or, with ``campaign`` under the sidecar's --candidacy app, stands in) an
        election until ``stop`` is set, calling ``on_started_leading(term)`` in a thread for each
        term this pod leads. ``term.ended`` is set the moment leadership is lost, the session is
        suspended, validUntil passes or the sidecar steps down; the function must return soon
        after. On the sidecar's SIGTERM (stepping-down) it ends the term, waits for the function,
        releases the election so the next pod leads at once, and returns."""
        leader.run_leader_election(self._t, on_started_leading, election=election, campaign=campaign,
                                   stop=stop, on_stopped_leading=on_stopped_leading,
                                   on_new_leader=on_new_leader, idle=self.stream_idle)

    # --- locks and semaphores ---

    def lock(self, name: str, *, mode: str | None = None, wait: float | None = None,
             ttl: float | None = None, on_lost: Callable[[Lock], None] | None = None,
             stop: threading.Event | None = None) -> Lock:
        """Acquires lock ``name``: held by a stream (it dies with this process) unless ``ttl``
        asks for a lease, which this client renews until the first renewal fails. ``wait`` in
        seconds: None queues until granted or ``stop`` is set (Cancelled), 0 tries once
        (NotGranted when held), up to 600 queues that long (NotGranted after); more than 600
        raises ValueError before any call, as does a ``ttl`` outside 0.1 s to 24 h. ``mode``:
        read or write. Use it in a ``with`` block, or call ``release()``."""
        query = {api.PARAM_MODE: mode} if mode else {}
        return lock.acquire(self._t, LOCK_OPS, name, query, wait=wait, ttl=ttl,
                            idle=self.stream_idle, on_lost=on_lost, stop=stop)

    def try_lock(self, name: str, *, mode: str | None = None, ttl: float | None = None,
                 on_lost: Callable[[Lock], None] | None = None) -> Lock:
        """``lock(name, wait=0)``: granted only if free now, else NotGranted."""
        return self.lock(name, mode=mode, wait=0, ttl=ttl, on_lost=on_lost)

    def semaphore(self, name: str, permits: int, *, wait: float | None = None, ttl: float | None = None,
                  on_lost: Callable[[Lock], None] | None = None,
                  stop: threading.Event | None = None) -> Lock:
        """One of ``permits`` permits of semaphore ``name``, waited for, held and released as a lock is."""
        return lock.acquire(self._t, SEMAPHORE_OPS, name, {api.PARAM_PERMITS: permits}, wait=wait,
                            ttl=ttl, idle=self.stream_idle, on_lost=on_lost, stop=stop)

    def try_semaphore(self, name: str, permits: int, *, ttl: float | None = None,
                      on_lost: Callable[[Lock], None] | None = None) -> Lock:
        """``semaphore(name, permits, wait=0)``: a permit only if one is free now, else NotGranted."""
        return self.semaphore(name, permits, wait=0, ttl=ttl, on_lost=on_lost)

    def lock_state(self, name: str) -> types.LockState:
        """GET /lock/NAME: holders, waiters, and whether (``self``) this pod holds it."""
        return cast(types.LockState, self._t.call(LOCK_OPS.inspect, name))

    def semaphore_state(self, name: str) -> types.LockState:
        """GET /semaphore/NAME: its permits, holders, waiters and this pod's part (``self``)."""
        return cast(types.LockState, self._t.call(SEMAPHORE_OPS.inspect, name))

    def release_lock(self, name: str, token: int) -> None:
        """Releases this pod's grant of lock ``name`` by its fencing token alone."""
        self._t.call(LOCK_OPS.release, name, {api.PARAM_TOKEN: token})

    def release_semaphore(self, name: str, token: int) -> None:
        """Releases this pod's permit of semaphore ``name`` by its token alone."""
        self._t.call(SEMAPHORE_OPS.release, name, {api.PARAM_TOKEN: token})

    # --- groups, barriers, events ---

    def members(self, election: str, *, version: str | None = None, wait: float = 0.0,
                stop: threading.Event | None = None) -> types.Members:
        """The live members of ``election`` in queue order; with ``version``, waits up to ``wait``
        for them to differ from that version (``stop`` set: Cancelled)."""
        query = {api.PARAM_VERSION: version, api.PARAM_WAIT: seconds(wait)} if version else None
        return cast(types.Members, self._t.call(api.OP_MEMBERS, election, query, wait=wait, stop=stop))

    def barrier(self, name: str, parties: int, wait: float, *, stop: threading.Event | None = None) -> None:
        """Enters barrier ``name``; returns once ``parties`` pods are in, raises NotPassed after
        ``wait`` (``stop`` set: Cancelled)."""
        self._t.call(api.OP_BARRIER, name, {api.PARAM_PARTIES: parties, api.PARAM_WAIT: seconds(wait)},
                     wait=wait, stop=stop)

    def events(self, stop: threading.Event | None = None) -> Iterator[Event]:
        """The pod's events (GET /events) until ``stop`` is set, reopening the stream when it breaks
        after an Event named DISCONNECTED (stop acting: nothing known is current until the next
        ``state``, which the reopened stream starts with). A ``state`` event's data ``state``
        SUSPENDED means stop acting too."""
        stop = stop or threading.Event()
        backoff = 0.1
        while not stop.is_set():
            why: BaseException | None = None
            try:
                stream = self._t.stream(api.OP_EVENTS, "", None, 0, self.stream_idle)
            except (errors.BatonError, OSError) as e:
                why, stream = e, None
            if stream is not None:
                backoff = 0.1
                done = threading.Event()
                closer = threading.Thread(target=_close_on_stop, args=(stream, stop, done), daemon=True)
                closer.start()
                try:
                    while True:
                        ev = stream.next()
                        if ev is None:
                            break
                        yield ev
                except Exception as e:  # noqa: BLE001 - any break reopens the stream
                    why = e
                finally:
                    done.set()
                    stream.close()
                    closer.join()
            if stop.is_set():
                return
            yield Event(DISCONNECTED, {"error": repr(why)})
            if stop.wait(backoff):
                return
            backoff = min(backoff * 2, 2.0)

    def healthy(self) -> bool:
        """Whether the sidecar has a session with the ensemble (GET /readyz)."""
        try:
            self._t.call(api.OP_READYZ)
            return True
        except (errors.BatonError, OSError):
            return False




def _close_on_stop(stream: EventStream, stop: threading.Event, done: threading.Event) -> None:
    """Closes stream when stop is set (ending a read blocked in it), until done is set."""
    while not done.is_set():
        if stop.wait(0.2):
            stream.close()
            return
