"""The asyncio client: the same operations as ``baton.Client``, awaitable, for asyncio apps
(FastAPI, aiohttp). Each call that waits runs the threaded client's in a worker thread
(``asyncio.to_thread``); cancelling the awaiting task sets that call's ``stop`` event, so the
wait ends on the sidecar too, and a grant that raced the cancellation is released."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from . import errors, types
from .client import Client
from .leader import Term
from .lock import Lock, check_ttl, check_wait

T = TypeVar("T")


async def _cancellable(call: Callable[[threading.Event], T], undo: Callable[[T], None] | None = None) -> T:
    """Runs call(stop) in a thread; a cancelled await sets stop, waits for the thread, undoes
    what it got (a grant) and re-raises the cancellation."""
    stop = threading.Event()
    task = asyncio.ensure_future(asyncio.to_thread(call, stop))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        stop.set()
        try:
            got = await task
        except BaseException:  # noqa: BLE001, S110 - the call's own end (Cancelled) is expected
            pass
        else:
            if undo is not None:
                await asyncio.to_thread(undo, got)
        raise


class AsyncLock:
    """A held lock or permit, for ``async with``. ``lost`` is an ``asyncio.Event`` set the moment
    the grant is known to have ended (``cause`` says why); ``token`` is the fencing token."""

    def __init__(self, lock: Lock, lost: asyncio.Event):
        self.lock, self.lost = lock, lost
        self.token: int = lock.token
        self.grant: types.Grant = lock.grant

    @property
    def cause(self) -> errors.Ended | None:
        return self.lock.cause

    @property
    def valid_until(self) -> float:
        return self.lock.valid_until

    def held(self) -> bool:
        return self.lock.held()

    def check(self) -> None:
        """Raises ``cause`` once the grant ended: call it before each protected step."""
        self.lock.check()

    async def release(self) -> None:
        await asyncio.to_thread(self.lock.release)
        self.lost.set()

    async def __aenter__(self) -> AsyncLock:  # noqa: PYI034 - final; typing.Self needs 3.11
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class AsyncTerm:
    """One stretch of leadership: ``ended`` is an ``asyncio.Event`` set the moment this pod must
    stop acting as leader; ``cause``, ``token`` and ``check()`` as on ``baton.Term``."""

    def __init__(self, term: Term, ended: asyncio.Event):
        self.term, self.ended = term, ended
        self.election, self.token = term.election, term.token

    @property
    def cause(self) -> errors.Ended | None:
        return self.term.cause

    def check(self) -> None:
        self.term.check()


class AsyncClient:
    """A client of the sidecar at ``address`` (see ``baton.Client``) for asyncio."""

    def __init__(self, address: str | None = None, *, stream_idle: float = 25.0):
        self.sync = Client(address, stream_idle=stream_idle)

    async def lock(self, name: str, *, mode: str | None = None, wait: float | None = None,
                   ttl: float | None = None) -> AsyncLock:
        """``Client.lock``: wait None queues until granted or the awaiting task is cancelled,
        0 tries once, up to 600 s bounds it, more raises ValueError (as does a ttl outside 0.1 s to
        24 h)."""
        check_wait(wait)
        check_ttl(ttl)
        return await self._acquire(lambda stop, on_lost: self.sync.lock(
            name, mode=mode, wait=wait, ttl=ttl, on_lost=on_lost, stop=stop))

    async def try_lock(self, name: str, *, mode: str | None = None, ttl: float | None = None) -> AsyncLock:
        return await self.lock(name, mode=mode, wait=0, ttl=ttl)

    async def semaphore(self, name: str, permits: int, *, wait: float | None = None,
                        ttl: float | None = None) -> AsyncLock:
        check_wait(wait)
        check_ttl(ttl)
        return await self._acquire(lambda stop, on_lost: self.sync.semaphore(
            name, permits, wait=wait, ttl=ttl, on_lost=on_lost, stop=stop))

    async def try_semaphore(self, name: str, permits: int, *, ttl: float | None = None) -> AsyncLock:
        return await self.semaphore(name, permits, wait=0, ttl=ttl)

    async def _acquire(self, acquire: Callable[[threading.Event, Callable[[Lock], None]], Lock]) -> AsyncLock:
        loop = asyncio.get_running_loop()
        lost = asyncio.Event()

        def on_lost(_: Lock) -> None:
            loop.call_soon_threadsafe(lost.set)

        lock = await _cancellable(lambda stop: acquire(stop, on_lost), lambda got: got.release())
        if not lock.held():
            lost.set()
        return AsyncLock(lock, lost)

    async def lock_state(self, name: str) -> types.LockState:
        return await asyncio.to_thread(self.sync.lock_state, name)

    async def semaphore_state(self, name: str) -> types.LockState:
        return await asyncio.to_thread(self.sync.semaphore_state, name)

    async def release_lock(self, name: str, token: int) -> None:
        await asyncio.to_thread(self.sync.release_lock, name, token)

    async def release_semaphore(self, name: str, token: int) -> None:
        await asyncio.to_thread(self.sync.release_semaphore, name, token)

    async def leader(self, election: str = "") -> types.LeaderInfo:
        return await asyncio.to_thread(self.sync.leader, election)

    async def members(self, election: str) -> types.Members:
        return await asyncio.to_thread(self.sync.members, election)

    async def barrier(self, name: str, parties: int, wait: float) -> None:
        """``Client.barrier``; cancelling the awaiting task leaves the barrier."""
        await _cancellable(lambda stop: self.sync.barrier(name, parties, wait, stop=stop))

    async def healthy(self) -> bool:
        return await asyncio.to_thread(self.sync.healthy)

    async def run_leader_election(self, on_started_leading: Callable[[AsyncTerm], Coroutine[Any, Any, None]], *,
                                  election: str = "", campaign: bool = False) -> None:
        """``Client.run_leader_election`` until the awaiting task is cancelled (or the sidecar
        steps down): ``await on_started_leading(term)`` runs on this loop for each term this pod
        leads, and must return soon after ``term.ended`` is set."""
        loop = asyncio.get_running_loop()

        def started(term: Term) -> None:
            ended = asyncio.Event()
            done = asyncio.run_coroutine_threadsafe(on_started_leading(AsyncTerm(term, ended)), loop)
            while not done.done():
                if term.ended.wait(0.05):
                    loop.call_soon_threadsafe(ended.set)
                    break
            try:
                done.result()
            except Exception:  # noqa: BLE001, S110 - as the threaded runner: the term is what matters
                pass

        await _cancellable(lambda stop: self.sync.run_leader_election(
            started, election=election, campaign=campaign, stop=stop))
