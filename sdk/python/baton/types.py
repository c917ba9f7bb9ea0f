"""The shapes of the sidecar's JSON answers, as ``TypedDict``s: what ``Client.leader()``,
``members()``, ``lock_state()`` and ``semaphore_state()`` return (plain dicts at run time,
typed for mypy and pyright). Instants are RFC 3339 strings, or None."""

from __future__ import annotations

from typing import TypedDict


class Leader(TypedDict):
    """Who leads an election, with the term's fencing token."""

    identity: str
    address: str
    pod: str
    since: str | None
    token: int


class LeaderSelf(TypedDict):
    """This pod's part in an election."""

    identity: str
    isLeader: bool
    state: str  # CONNECTED, SUSPENDED, LOST
    validUntil: str | None


class LeaderInfo(TypedDict):
    """GET /leader[/NAME]."""

    election: str
    leader: Leader | None  # None while nobody leads
    self: LeaderSelf


class Member(TypedDict):
    """One candidate of an election."""

    identity: str
    address: str
    pod: str
    since: str | None
    token: int
    leader: bool
    node: str


class Members(TypedDict):
    """GET /members/NAME: the live members in queue order (the first leads) and their version."""

    election: str
    version: str
    members: list[Member]


class Grant(TypedDict, total=False):
    """The sidecar's answer to an acquire (``Lock.grant``): what is held, its fencing token, and
    until when the holder may act without fresher word."""

    lock: str  # a lock's name
    semaphore: str  # a semaphore's name
    permits: int  # a semaphore's N
    mode: str  # exclusive, read, write, permit
    token: int
    hold: str  # stream or lease
    expiresAt: str | None  # a lease's end
    validUntil: str | None


class Holder(TypedDict, total=False):
    """One grant or waiter of a lock (``mode``) or semaphore (``permits``)."""

    identity: str
    mode: str
    permits: int | None
    token: int
    leaseExpiresAt: str | None
    node: str


class LockSelf(TypedDict, total=False):
    """This pod's part in a lock or semaphore."""

    identity: str
    holds: bool
    token: int | None
    hold: str | None  # stream or lease
    mode: str | None
    expiresAt: str | None
    validUntil: str | None


class LockState(TypedDict, total=False):
    """GET /lock/NAME (``lock``, ``holder``) and GET /semaphore/NAME (``semaphore``, ``permits``)."""

    lock: str
    holder: Holder | None
    semaphore: str
    permits: int | None
    holders: list[Holder]
    waiters: list[Holder]
    self: LockSelf
