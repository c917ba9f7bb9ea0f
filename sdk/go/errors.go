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

// code is the Err* value of a code (contract.go, generated, has one for each).
func code(c string) *Error { return &Error{Code: c} }

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
