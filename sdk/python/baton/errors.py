"""Errors: one class per documented error code of the sidecar (DESIGN §2), generated into
``_contract`` from the API's description and re-exported here, and why a held lock or a term of
leadership ended."""

from __future__ import annotations

# Re-exported: BatonError, ERRORS and a class per error code.
from ._contract import *
from ._contract import ERRORS, BatonError


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
