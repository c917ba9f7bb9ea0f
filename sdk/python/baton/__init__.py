"""Client of the Baton sidecar's localhost HTTP API (DESIGN §2), standard library only:
leader election like client-go's leaderelection, locks and semaphores held by a stream or a
renewed lease with their fencing tokens, barriers, groups and the pod's event stream."""

from .client import DISCONNECTED, Client
from .errors import *
from .errors import ERRORS, BatonError, Ended, Lost, Released, SteppingDown, Suspended, ValidUntilPassed
from .leader import Term
from .lock import Lock

__all__ = [
           "DISCONNECTED",
           "ERRORS",
           "BatonError",
           "Client",
           "Ended",
           "Lock",
           "Lost",
           "Released",
           "SteppingDown",
           "Suspended",
           "Term",
           "ValidUntilPassed",
]
__all__ += list(ERRORS)  # the error classes, named by their codes
