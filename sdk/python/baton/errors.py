"""Errors: one class per documented error code of the sidecar (DESIGN §2), and why a held lock
or a term of leadership ended."""

from __future__ import annotations


class BatonError(Exception):
    """An error answer of the sidecar: `{"error": {"code", "message"}}` with its HTTP status.

    Each documented code has its own subclass (``NotGranted``, ``StaleToken``, ...), so
    ``except baton.NotGranted`` works; ``code``, ``status`` and ``message`` are always set."""

    code = ""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


_CODES = [
    "NotGranted", "AlreadyHeld", "AcquireInProgress", "StaleToken", "MissingToken", "InvalidToken",
    "StreamHold", "TtlWithStream", "InvalidHold", "InvalidMode", "NotHeld", "LockLost",
    "PermitsMismatch", "MissingPermits", "InvalidPermits", "NotPassed", "PartiesMismatch",
    "MissingParties", "InvalidParties", "NotLeader", "NoElection", "UnknownElection",
    "FollowWithWait", "InvalidFollow", "CampaignInProgress", "CandidacyAlways", "NotSteppingDown",
    "ShuttingDown", "AppUnhealthy", "NotConnected", "SessionSuspended", "SessionLost",
    "EnsembleError", "NodeVanished", "InvalidName", "InvalidDuration", "InvalidQuery",
    "UnknownParameter", "DuplicateParameter", "BadBody", "PayloadTooLarge", "NotFound",
    "MethodNotAllowed", "ProbePortReadOnly",
]

ERRORS: dict[str, type[BatonError]] = {
    name: type(name, (BatonError,), {"code": name, "__doc__": f"The sidecar's {name} error."})
    for name in _CODES
}
globals().update(ERRORS)


def from_answer(status: int, code: str, message: str) -> BatonError:
    """The error of an answer: the code's own class, else BatonError."""
    return ERRORS.get(code, BatonError)(status, code, message)


class Ended(Exception):
    """Why a lock, permit or term ended (``lock.cause``, ``term.cause``)."""


class Lost(Ended):
    """The sidecar said the grant or term ended, its stream broke, or a renewal failed."""


class ValidUntilPassed(Ended):
    """validUntil passed without fresher word: nothing promises the grant or term any more."""


class Released(Ended):
    """Released by the app, or by the sidecar (``released``)."""


class Suspended(Ended):
    """The sidecar's session was cut off: a leader stops acting at once."""


class SteppingDown(Ended):
    """The sidecar got SIGTERM and hands leadership over."""
