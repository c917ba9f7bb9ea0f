"""Errors: one class per documented error code of the sidecar (DESIGN §2), and why a held lock
or a term of leadership ended."""

from __future__ import annotations


class BatonError(Exception):
    """An error answer of the sidecar: `{"error": {"code", "message"}}` with its HTTP status.

    Each documented code has its own subclass (``NotGranted``, ``StaleToken``, ...), so
    ``except baton.NotGranted`` works; ``code``, ``status`` and ``message`` are always set."""

    code: str = ""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


# One class per documented code, written out (not made at run time) so type checkers see them.


class NotGranted(BatonError):
    """409: not granted within wait (wait=0: held elsewhere)"""

    code = "NotGranted"


class AlreadyHeld(BatonError):
    """409: this pod holds the lock already"""

    code = "AlreadyHeld"


class AcquireInProgress(BatonError):
    """409: another acquire of this lock runs on this pod"""

    code = "AcquireInProgress"


class StaleToken(BatonError):
    """409: the token is not the current grant's"""

    code = "StaleToken"


class MissingToken(BatonError):
    """400: renew or release without ?token"""

    code = "MissingToken"


class InvalidToken(BatonError):
    """400: the token is not an integer"""

    code = "InvalidToken"


class StreamHold(BatonError):
    """409: a stream hold has no lease to renew"""

    code = "StreamHold"


class TtlWithStream(BatonError):
    """400: hold=stream takes no ttl"""

    code = "TtlWithStream"


class InvalidHold(BatonError):
    """400: hold is not stream"""

    code = "InvalidHold"


class InvalidMode(BatonError):
    """400: mode is not read or write"""

    code = "InvalidMode"


class NotHeld(BatonError):
    """409: this pod holds no such grant"""

    code = "NotHeld"


class LockLost(BatonError):
    """the grant ended (session lost, app unhealthy)"""

    code = "LockLost"


class PermitsMismatch(BatonError):
    """409: another pod queued with another N"""

    code = "PermitsMismatch"


class MissingPermits(BatonError):
    """400"""

    code = "MissingPermits"


class InvalidPermits(BatonError):
    """400: permits outside 1..10000"""

    code = "InvalidPermits"


class NotPassed(BatonError):
    """409: the barrier's wait ran out"""

    code = "NotPassed"


class PartiesMismatch(BatonError):
    """409: another party waits for another N"""

    code = "PartiesMismatch"


class MissingParties(BatonError):
    """400"""

    code = "MissingParties"


class InvalidParties(BatonError):
    """400"""

    code = "InvalidParties"


class NotLeader(BatonError):
    """503 on /leader/NAME/ready"""

    code = "NotLeader"


class NoElection(BatonError):
    """404: the sidecar stands in no election"""

    code = "NoElection"


class UnknownElection(BatonError):
    """404: not one of the sidecar's --election"""

    code = "UnknownElection"


class FollowWithWait(BatonError):
    """400"""

    code = "FollowWithWait"


class InvalidFollow(BatonError):
    """400"""

    code = "InvalidFollow"


class CampaignInProgress(BatonError):
    """409: one campaign stream per election per pod"""

    code = "CampaignInProgress"


class CandidacyAlways(BatonError):
    """409: campaign under --candidacy always"""

    code = "CandidacyAlways"


class NotSteppingDown(BatonError):
    """409: release outside a SIGTERM hand-off"""

    code = "NotSteppingDown"


class ShuttingDown(BatonError):
    """503: SIGTERM: nothing new is granted"""

    code = "ShuttingDown"


class AppUnhealthy(BatonError):
    """503: --app-health says the app is unhealthy"""

    code = "AppUnhealthy"


class NotConnected(BatonError):
    """503: the sidecar has no session"""

    code = "NotConnected"


class SessionSuspended(BatonError):
    """503: the session is cut off"""

    code = "SessionSuspended"


class SessionLost(BatonError):
    """the session expired"""

    code = "SessionLost"


class EnsembleError(BatonError):
    """5xx: the ensemble answered with an error"""

    code = "EnsembleError"


class NodeVanished(BatonError):
    """the recipe's node was deleted under it"""

    code = "NodeVanished"


class InvalidName(BatonError):
    """400"""

    code = "InvalidName"


class InvalidDuration(BatonError):
    """400"""

    code = "InvalidDuration"


class InvalidQuery(BatonError):
    """400"""

    code = "InvalidQuery"


class UnknownParameter(BatonError):
    """400"""

    code = "UnknownParameter"


class DuplicateParameter(BatonError):
    """400"""

    code = "DuplicateParameter"


class BadBody(BatonError):
    """400"""

    code = "BadBody"


class PayloadTooLarge(BatonError):
    """413"""

    code = "PayloadTooLarge"


class NotFound(BatonError):
    """404"""

    code = "NotFound"


class MethodNotAllowed(BatonError):
    """405"""

    code = "MethodNotAllowed"


class ProbePortReadOnly(BatonError):
    """403: the probe port serves probes only"""

    code = "ProbePortReadOnly"


ERRORS: dict[str, type[BatonError]] = {cls.code: cls for cls in (
    NotGranted,
    AlreadyHeld,
    AcquireInProgress,
    StaleToken,
    MissingToken,
    InvalidToken,
    StreamHold,
    TtlWithStream,
    InvalidHold,
    InvalidMode,
    NotHeld,
    LockLost,
    PermitsMismatch,
    MissingPermits,
    InvalidPermits,
    NotPassed,
    PartiesMismatch,
    MissingParties,
    InvalidParties,
    NotLeader,
    NoElection,
    UnknownElection,
    FollowWithWait,
    InvalidFollow,
    CampaignInProgress,
    CandidacyAlways,
    NotSteppingDown,
    ShuttingDown,
    AppUnhealthy,
    NotConnected,
    SessionSuspended,
    SessionLost,
    EnsembleError,
    NodeVanished,
    InvalidName,
    InvalidDuration,
    InvalidQuery,
    UnknownParameter,
    DuplicateParameter,
    BadBody,
    PayloadTooLarge,
    NotFound,
    MethodNotAllowed,
    ProbePortReadOnly,
)}
"""Each documented error code and its class."""


def from_answer(status: int, code: str, message: str) -> BatonError:
    """The error of an answer: the code's own class, else BatonError."""
    return ERRORS.get(code, BatonError)(status, code, message)


class Cancelled(Exception):
    """A call that could block was ended by its ``stop`` event before it was answered."""


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
