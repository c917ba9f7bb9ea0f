package baton

import (
	"errors"
	"fmt"
)

// Error is an error answer of the sidecar: `{"error": {"code", "message"}}` with its HTTP
// status. Compare it with the Err* values of this package: errors.Is(err, baton.ErrNotGranted)
// matches on the code alone.
type Error struct {
	Status  int    // the HTTP status, 0 on the Err* values
	Code    string // stable and machine-readable (DESIGN §2), e.g. "NotGranted"
	Message string // for people
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return "baton: " + e.Code
	}
	return fmt.Sprintf("baton: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches another *Error with the same code, so errors.Is works with the Err* values.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

func code(c string) *Error { return &Error{Code: c} }

// The sidecar's documented error codes (DESIGN §2), one value each for errors.Is.
var (
	ErrNotGranted         = code("NotGranted")         // 409: not granted within wait (wait=0: held elsewhere)
	ErrAlreadyHeld        = code("AlreadyHeld")        // 409: this pod holds the lock already
	ErrAcquireInProgress  = code("AcquireInProgress")  // 409: another acquire of this lock runs on this pod
	ErrStaleToken         = code("StaleToken")         // 409: the token is not the current grant's
	ErrMissingToken       = code("MissingToken")       // 400: renew or release without ?token
	ErrInvalidToken       = code("InvalidToken")       // 400: the token is not an integer
	ErrStreamHold         = code("StreamHold")         // 409: a stream hold has no lease to renew
	ErrTtlWithStream      = code("TtlWithStream")      // 400: hold=stream takes no ttl
	ErrInvalidHold        = code("InvalidHold")        // 400: hold is not stream
	ErrInvalidMode        = code("InvalidMode")        // 400: mode is not read or write
	ErrNotHeld            = code("NotHeld")            // 409: this pod holds no such grant
	ErrLockLost           = code("LockLost")           // the grant ended (session lost, app unhealthy)
	ErrPermitsMismatch    = code("PermitsMismatch")    // 409: another pod queued with another N
	ErrMissingPermits     = code("MissingPermits")     // 400
	ErrInvalidPermits     = code("InvalidPermits")     // 400: permits outside 1..10000
	ErrNotPassed          = code("NotPassed")          // 409: the barrier's wait ran out
	ErrPartiesMismatch    = code("PartiesMismatch")    // 409: another party waits for another N
	ErrMissingParties     = code("MissingParties")     // 400
	ErrInvalidParties     = code("InvalidParties")     // 400
	ErrNotLeader          = code("NotLeader")          // 503 on /leader/NAME/ready
	ErrNoElection         = code("NoElection")         // 404: the sidecar stands in no election
	ErrUnknownElection    = code("UnknownElection")    // 404: not one of the sidecar's --election
	ErrFollowWithWait     = code("FollowWithWait")     // 400
	ErrInvalidFollow      = code("InvalidFollow")      // 400
	ErrCampaignInProgress = code("CampaignInProgress") // 409: one campaign stream per election per pod
	ErrCandidacyAlways    = code("CandidacyAlways")    // 409: campaign under --candidacy always
	ErrNotSteppingDown    = code("NotSteppingDown")    // 409: release outside a SIGTERM hand-off
	ErrShuttingDown       = code("ShuttingDown")       // 503: SIGTERM: nothing new is granted
	ErrAppUnhealthy       = code("AppUnhealthy")       // 503: --app-health says the app is unhealthy
	ErrNotConnected       = code("NotConnected")       // 503: the sidecar has no session
	ErrSessionSuspended   = code("SessionSuspended")   // 503: the session is cut off
	ErrSessionLost        = code("SessionLost")        // the session expired
	ErrEnsembleError      = code("EnsembleError")      // 5xx: the ensemble answered with an error
	ErrNodeVanished       = code("NodeVanished")       // the recipe's node was deleted under it
	ErrInvalidName        = code("InvalidName")        // 400
	ErrInvalidDuration    = code("InvalidDuration")    // 400
	ErrInvalidQuery       = code("InvalidQuery")       // 400
	ErrUnknownParameter   = code("UnknownParameter")   // 400
	ErrDuplicateParameter = code("DuplicateParameter") // 400
	ErrBadBody            = code("BadBody")            // 400
	ErrPayloadTooLarge    = code("PayloadTooLarge")    // 413
	ErrNotFound           = code("NotFound")           // 404
	ErrMethodNotAllowed   = code("MethodNotAllowed")   // 405
	ErrProbePortReadOnly  = code("ProbePortReadOnly")  // 403: the probe port serves probes only
)

// Why a lock, permit or leadership ended, as the cause of its context (context.Cause).
var (
	// ErrLost: the sidecar said the grant or the term ended (`lost`, `deposed`, another leader).
	ErrLost = errors.New("baton: lost")
	// ErrValidUntilPassed: validUntil passed without fresher word from the sidecar; the grant or
	// term may still stand, but nothing promises it any more.
	ErrValidUntilPassed = errors.New("baton: validUntil passed")
	// ErrReleased: the app released it (Unlock, Close) or the sidecar released it (`released`).
	ErrReleased = errors.New("baton: released")
	// ErrSuspended: the sidecar's session was cut off from the ensemble; a leader stops
	// acting at once (what it holds is uncertain).
	ErrSuspended = errors.New("baton: session suspended")
	// ErrSteppingDown: the sidecar got SIGTERM and asks the app to hand leadership over.
	ErrSteppingDown = errors.New("baton: stepping down")
)
