"""Leadership in the shape of client-go's leaderelection: a function runs while this pod leads,
and is told (``term.ended``) the moment it no longer may act as leader."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _contract as api
from . import errors, types
from ._http import Transport, parse_time

Callback = Callable[["Term"], None]


class Term:
    """One stretch of leadership. ``ended`` is set the moment this pod must stop acting as leader
    (another leader, deposed, session suspended or lost, validUntil passed, stepping down);
    ``cause`` says why. Pass ``token`` (the fencing token) to what the leader writes to."""

    def __init__(self, election: str, token: int, since: float | None, valid_until: float):
        self.election, self.token, self.since = election, token, since
        self.valid_until = valid_until
        self.ended = threading.Event()
        self.cause: errors.Ended | None = None

    def check(self) -> None:
        """Raises ``cause`` once the term ended: call it before each step a leader takes."""
        if self.ended.is_set():
            raise self.cause or errors.Lost(self.election)


def election_op(election: str, named: api.Operation, only: api.Operation) -> api.Operation:
    """``named``, the operation on ``election``, or, for "" (the sidecar's only election),
    ``only``, its form without a name."""
    return named if election else only


class _Run:
    def __init__(self, t: Transport, election: str, campaign: bool, idle: float,
                 started: Callback, stopped: Callable[[errors.Ended], None] | None,
                 new_leader: Callable[[types.Leader | None], None] | None):
        self.t, self.election, self.campaign, self.idle = t, election, campaign, idle
        self.started, self.stopped, self.new_leader = started, stopped, new_leader
        self.term: Term | None = None
        self.worker: threading.Thread | None = None
        self.last_leader: object = ()  # nothing seen yet

    def saw_leader(self, leader: types.Leader | None) -> None:
        token = leader["token"] if leader else None
        if token != self.last_leader:
            self.last_leader = token
            if self.new_leader is not None:
                self.new_leader(leader)

    def start(self, token: int, since: str | None, valid_until: str | None) -> None:
        until = parse_time(valid_until)
        if until is None or until <= time.time():
            return
        term = Term(self.election, token, parse_time(since), until)
        self.term = term
        self.worker = threading.Thread(target=self.started, args=(term,), daemon=True)
        self.worker.start()

    def stop(self, cause: errors.Ended) -> None:
        """Ends the running term, if any, and waits for the leader's function to return."""
        term, self.term = self.term, None
        if term is None:
            return
        term.cause = cause
        term.ended.set()
        if self.worker is not None and self.worker is not threading.current_thread():
            self.worker.join()
        if self.stopped is not None:
            self.stopped(cause)

    def refresh(self) -> None:
        assert self.term is not None
        try:
            # Bounded by the time left, so the term still ends at valid_until.
            left = max(self.term.valid_until - time.time(), 0.01)
            info = self.t.call(election_op(self.election, api.OP_LEADER, api.OP_LEADER_DEFAULT), self.election,
                               timeout=left)
        except (errors.BatonError, OSError):
            return  # valid_until still bounds the term
        leader = info.get("leader") or {}
        me = info.get("self") or {}
        if me.get("isLeader") and leader.get("token") == self.term.token:
            until = parse_time(me.get("validUntil"))
            if until and until > self.term.valid_until:
                self.term.valid_until = until
        else:
            self.stop(errors.Lost(f"election {self.election}: this pod no longer leads"))

    def handle(self, name: str, data: dict[str, Any]) -> bool:
        """Applies one event; True after a stepping-down hand-over."""
        if name == "leader":
            self.saw_leader(data.get("leader"))
            leader = data.get("leader") or {}
            me = data.get("self") or {}
            leads = bool(me.get("isLeader")) and bool(leader)
            if self.term is not None and (not leads or leader.get("token") != self.term.token):
                self.stop(errors.Lost(f"election {self.election}: this pod no longer leads"))
            if leads and self.term is None:
                self.start(leader["token"], leader.get("since"), me.get("validUntil"))
            elif leads and self.term is not None:
                until = parse_time(me.get("validUntil"))
                if until and until > self.term.valid_until:
                    self.term.valid_until = until
        elif name == "elected":
            if self.term is not None and self.term.token != data.get("token"):
                self.stop(errors.Lost(f"election {self.election}: a new term"))
            if self.term is None:
                self.start(data["token"], data.get("since"), data.get("validUntil"))
        elif name == "candidate":
            self.saw_leader(data.get("leader"))
            self.stop(errors.Lost(f"election {self.election}: queued again"))
        elif name in ("deposed", "lost", "connected"):
            self.stop(errors.Lost(f"election {self.election}: {name}"))
        elif name == "suspended":
            # Leadership is uncertain while the session is cut off: stop acting now.
            self.stop(errors.Suspended(f"election {self.election}"))
        elif name == "resumed" and self.term is None:
            try:
                info = self.t.call(election_op(self.election, api.OP_LEADER, api.OP_LEADER_DEFAULT), self.election)
            except (errors.BatonError, OSError):
                return False
            if (info.get("self") or {}).get("isLeader") and info.get("leader"):
                leader = info["leader"]
                self.start(leader["token"], leader.get("since"), info["self"].get("validUntil"))
        elif name == "stepping-down":
            self.stop(errors.SteppingDown(f"election {self.election}"))
            # The app has stopped acting as leader: hand over now rather than after the grace.
            try:
                self.t.call(election_op(self.election, api.OP_LEADER_RELEASE, api.OP_LEADER_RELEASE_DEFAULT),
                            self.election)
            except (errors.BatonError, OSError):
                pass
            return True
        return False

    def follow(self, stop: threading.Event) -> tuple[bool, BaseException | None]:
        """Reads one stream until it ends or stop is set; (handed over, why it ended)."""
        if self.campaign:
            op = election_op(self.election, api.OP_LEADER_CAMPAIGN, api.OP_LEADER_CAMPAIGN_DEFAULT)
            stream = self.t.stream(op, self.election, None, 0, self.idle)
        else:
            op = election_op(self.election, api.OP_LEADER, api.OP_LEADER_DEFAULT)
            stream = self.t.stream(op, self.election, {api.PARAM_FOLLOW: api.FOLLOW_STREAM}, 0, self.idle)
        events: queue.Queue[tuple[Any, ...]] = queue.Queue()

        def read() -> None:
            while True:
                try:
                    ev = stream.next()
                except Exception as e:  # noqa: BLE001 - any break ends this stream
                    events.put(("error", e))
                    return
                events.put(("event", ev))
                if ev is None:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        handed_over = False
        try:
            while not stop.is_set():
                timeout = 0.2
                if self.term is not None:
                    left = self.term.valid_until - time.time()
                    if left <= 0:
                        self.stop(errors.ValidUntilPassed(f"election {self.election}"))
                        continue
                    timeout = max(min(left / 3, 0.2), 0.01)
                try:
                    kind, item = events.get(timeout=timeout)
                except queue.Empty:
                    if self.term is not None and self._due():
                        self.refresh()
                    continue
                if kind == "error":
                    return handed_over, item
                if item is None:
                    return handed_over, None
                if self.handle(item.name, item.data if isinstance(item.data, dict) else {}):
                    handed_over = True
            return handed_over, None
        finally:
            stream.close()
            reader.join()

    _next_refresh = 0.0

    def _due(self) -> bool:
        """Whether to ask for a fresher validUntil: every third of the time left."""
        assert self.term is not None
        now = time.time()
        if now < self._next_refresh:
            return False
        self._next_refresh = now + max((self.term.valid_until - now) / 3, 0.05)
        return True


def run_leader_election(t: Transport, on_started_leading: Callback, *, election: str = "",
                        campaign: bool = False, stop: threading.Event | None = None,
                        on_stopped_leading: Callable[[errors.Ended], None] | None = None,
                        on_new_leader: Callable[[types.Leader | None], None] | None = None,
                        idle: float = 25.0) -> None:
    stop = stop or threading.Event()
    run = _Run(t, election, campaign, idle, on_started_leading, on_stopped_leading, on_new_leader)
    backoff = 0.1
    while not stop.is_set():
        try:
            handed_over, why = run.follow(stop)
        except errors.ShuttingDown:
            return
        except errors.BatonError as e:
            if e.status // 100 == 4 and not isinstance(e, errors.CampaignInProgress):
                raise
            handed_over, why = False, e
        except OSError as e:
            handed_over, why = False, e
        run.stop(errors.Lost(f"election {election}: the stream ended: {why!r}"))
        if handed_over:
            return
        if stop.wait(backoff):
            break
        backoff = min(backoff * 2, 2.0)
    run.stop(errors.Released(f"election {election}: stopped"))
