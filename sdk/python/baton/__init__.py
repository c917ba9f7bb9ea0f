"""Client of the Baton sidecar's localhost HTTP API (DESIGN §2), standard library only:
leader election like client-go's leaderelection, locks and semaphores held by a stream or a
renewed lease with their fencing tokens, barriers, groups and the pod's event stream."""

from . import _contract

# BatonError, ERRORS and a class per error code, generated from the API's description.
from ._contract import *
from .aio import AsyncClient, AsyncLock, AsyncTerm
from .client import DISCONNECTED, Client
from .errors import Cancelled, Ended, Lost, Released, SteppingDown, Suspended, ValidUntilPassed
from .leader import Term
from .lock import Lock
from .types import Grant, Holder, Leader, LeaderInfo, LockState, Member, Members

__all__ = [
    "DISCONNECTED",
    "AsyncClient",
    "AsyncLock",
    "AsyncTerm",
    "Cancelled",
    "Client",
    "Ended",
    "Grant",
    "Holder",
    "Leader",
    "LeaderInfo",
    "Lock",
    "LockState",
    "Lost",
    "Member",
    "Members",
    "Released",
    "SteppingDown",
    "Suspended",
    "Term",
    "ValidUntilPassed",
]
__all__ += _contract.__all__
