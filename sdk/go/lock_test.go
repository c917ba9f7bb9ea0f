package baton_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"baton.dev/baton"
)

func withBound(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// A lease the sidecar would refuse (100 ms to 24 h) is refused before any call: nothing listens
// at the address, so a call would fail otherwise.
func TestTTLOutsideTheBoundsIsRefused(t *testing.T) {
	c := baton.New("127.0.0.1:1")
	for _, ttl := range []time.Duration{50 * time.Millisecond, 25 * time.Hour} {
		_, err := c.TryLock(withBound(t), "db", baton.LockOptions{TTL: ttl})
		if err == nil || !strings.Contains(err.Error(), "a lease is 100ms to 24h0m0s") {
			t.Fatalf("TTL %v: %v", ttl, err)
		}
	}
}

// waitDone waits (bounded) for a lock or term to end and returns why.
func waitDone(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(bound):
		t.Fatal("still held: the client never learnt it lost it")
		return nil
	}
}

func TestStreamHoldIsExclusiveAndReleasedByUnlock(t *testing.T) {
	ctx := withBound(t)
	name := unique("lock")
	a := baton.New(startSidecar(t, "", unique("a"), nil).addr)
	b := baton.New(startSidecar(t, "", unique("b"), nil).addr)

	lock, err := a.Lock(ctx, name, baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g := lock.Grant(); g.Hold != "stream" || g.Lock != name || g.Token <= 0 || !g.ExpiresAt.IsZero() || g.ValidUntil.IsZero() {
		t.Fatalf("grant %+v", g)
	}
	_, err = b.TryLock(ctx, name, baton.LockOptions{})
	var apiErr *baton.Error
	if !errors.Is(err, baton.ErrNotGranted) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Fatalf("a held lock was granted to another pod, or the wrong error: %v", err)
	}
	_, err = a.TryLock(ctx, name, baton.LockOptions{})
	if !errors.Is(err, baton.ErrAlreadyHeld) {
		t.Fatalf("want AlreadyHeld, got %v", err)
	}

	// b queues; a's Unlock hands the lock over, with a larger fencing token.
	granted := make(chan *baton.Lock, 1)
	go func() {
		l, err := b.Lock(ctx, name, baton.LockOptions{})
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	waitWaiters(t, a, name)
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := lock.Err(); !errors.Is(cause, baton.ErrReleased) {
		t.Fatalf("cause after Unlock: %v", cause)
	}
	next := <-granted
	if next == nil {
		t.FailNow()
	}
	defer next.Unlock(ctx)
	if next.Token() <= lock.Token() {
		t.Fatalf("fencing token did not grow: %d then %d", lock.Token(), next.Token())
	}
}

// waitWaiters polls GET /lock until someone queues on it (no event says so).
func waitWaiters(t *testing.T, c *baton.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		var state struct {
			Waiters []any `json:"waiters"`
		}
		if err := getJSON(c, "/lock/"+name, &state); err != nil {
			t.Fatal(err)
		}
		if len(state.Waiters) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nobody queued on %s", name)
}

// The sidecar is killed while the app holds a stream lock: the app learns it at once, well
// within validUntil (the documented bound), from its stream closing.
func TestKilledSidecarEndsTheStreamHold(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	lock, err := baton.New(s.addr).Lock(ctx, unique("lock"), baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	validUntil := lock.ValidUntil()
	s.signal(syscall.SIGKILL)
	cause := waitDone(t, lock.Context())
	learnt := time.Now()
	if !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("cause %v", cause)
	}
	if learnt.After(validUntil) {
		t.Fatalf("learnt of the loss at %v, after validUntil %v", learnt, validUntil)
	}
}

// The sidecar hangs (SIGSTOP: its socket stays open, nothing answers): the hold's stream
// says nothing, and the client must give the lock up when validUntil passes.
func TestHungSidecarEndsTheHoldAtValidUntil(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	lock, err := baton.New(s.addr).Lock(ctx, unique("lock"), baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.signal(syscall.SIGSTOP)
	defer s.signal(syscall.SIGCONT)
	cause := waitDone(t, lock.Context())
	if !errors.Is(cause, baton.ErrValidUntilPassed) {
		t.Fatalf("cause %v", cause)
	}
	if time.Now().Before(lock.ValidUntil()) {
		t.Fatalf("given up before validUntil %v", lock.ValidUntil())
	}
}

// A lease whose renewal fails (released behind the app's back) ends at that renewal, and the
// client renews no more.
func TestLeaseEndsAtTheFirstFailedRenewal(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	counted := countRenewals(t, s.addr)
	c := baton.New(counted.addr)
	name := unique("lease")
	lock, err := c.Lock(ctx, name, baton.LockOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if g := lock.Grant(); g.Hold != "lease" || g.ExpiresAt.IsZero() {
		t.Fatalf("grant %+v", g)
	}
	// Renewals keep it past its TTL.
	time.Sleep(4 * time.Second)
	if err := lock.Err(); err != nil {
		t.Fatalf("a renewed lease ended: %v", err)
	}
	if err := deleteToken(c, "/lock/"+name, lock.Token()); err != nil {
		t.Fatal(err)
	}
	cause := waitDone(t, lock.Context())
	if !errors.Is(cause, baton.ErrLost) || !errors.Is(cause, baton.ErrNotHeld) {
		t.Fatalf("cause %v", cause)
	}
	renewals := counted.renewals.Load()
	// Long enough for two more renewals (every second) had the loop gone on.
	time.Sleep(2500 * time.Millisecond)
	if after := counted.renewals.Load(); after != renewals {
		t.Fatalf("renewals went on after the failure: %d then %d", renewals, after)
	}
}

// The sidecar is killed while a lease is held: the next renewal fails and ends it.
func TestKilledSidecarEndsTheLease(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	lock, err := baton.New(s.addr).Lock(ctx, unique("lease"), baton.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	validUntil := lock.ValidUntil()
	s.signal(syscall.SIGKILL)
	cause := waitDone(t, lock.Context())
	if !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("cause %v", cause)
	}
	if time.Now().After(validUntil) {
		t.Fatalf("learnt of the loss after validUntil %v", validUntil)
	}
}

func TestSemaphorePermits(t *testing.T) {
	ctx := withBound(t)
	name := unique("sem")
	var held []*baton.Lock
	for i := 0; i < 2; i++ {
		c := baton.New(startSidecar(t, "", unique("p"), nil).addr)
		l, err := c.Semaphore(ctx, name, 2, baton.LockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if g := l.Grant(); g.Semaphore != name || g.Permits != 2 || g.Mode != "permit" {
			t.Fatalf("grant %+v", g)
		}
		held = append(held, l)
	}
	third := baton.New(startSidecar(t, "", unique("p"), nil).addr)
	if _, err := third.TrySemaphore(ctx, name, 2, baton.LockOptions{}); !errors.Is(err, baton.ErrNotGranted) {
		t.Fatalf("a third permit of 2: %v", err)
	}
	if _, err := third.TrySemaphore(ctx, name, 3, baton.LockOptions{}); !errors.Is(err, baton.ErrPermitsMismatch) && !errors.Is(err, baton.ErrNotGranted) {
		t.Fatalf("another N: %v", err)
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := third.Semaphore(ctx, name, 2, baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	held[1].Unlock(ctx)
	if _, err := third.Semaphore(ctx, name, 0, baton.LockOptions{}); !errors.Is(err, baton.ErrInvalidPermits) {
		t.Fatalf("0 permits: %v", err)
	}
}

// The app's connection to its sidecar is cut (a proxy between them closes it): the holder
// learns it lost the lock at once, and the sidecar releases it, so another holder gets it.
func TestCutAppConnectionEndsTheHoldOnBothSides(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	link := startProxy(t, s.addr)
	name := unique("lock")
	lock, err := baton.New(link.addr).Lock(ctx, name, baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	validUntil := lock.ValidUntil()
	link.setCut(true)
	if cause := waitDone(t, lock.Context()); !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("cause %v", cause)
	}
	if time.Now().After(validUntil) {
		t.Fatalf("learnt of the loss after validUntil %v", validUntil)
	}
	// Another pod (this one's release of the closed stream is on its way, not yet done).
	other := startSidecar(t, "", unique("b"), nil)
	next, err := baton.New(other.addr).Lock(ctx, name, baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Unlock(ctx)
	if next.Token() <= lock.Token() {
		t.Fatalf("fencing token did not grow: %d then %d", lock.Token(), next.Token())
	}
}

// A semaphore and a lock can be inspected, and a grant released by its token alone; a client
// given its own *http.Client sends through it.
func TestInspectAndReleaseByToken(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	var sent atomic.Int64
	c := baton.New(s.addr, baton.WithHTTPClient(&http.Client{Transport: countingTransport{&sent}}))
	name := unique("sem")
	permit, err := c.Semaphore(ctx, name, 2, baton.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	state, err := c.SemaphoreState(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if state.Permits != 2 || len(state.Holders) != 1 || !state.Self.Holds || state.Self.Token != permit.Token() {
		t.Fatalf("semaphore state %+v", state)
	}
	if err := c.ReleaseSemaphore(ctx, name, permit.Token()); err != nil {
		t.Fatal(err)
	}
	if state, err = c.SemaphoreState(ctx, name); err != nil || state.Self.Holds || len(state.Holders) != 0 {
		t.Fatalf("after release by token: %+v %v", state, err)
	}
	permit.Unlock(ctx)
	lockName := unique("lock")
	lock, err := c.TryLock(ctx, lockName, baton.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.LockState(ctx, lockName)
	if err != nil || !ls.Self.Holds || len(ls.Holders) != 1 || ls.Holders[0].Token != lock.Token() {
		t.Fatalf("lock state %+v %v", ls, err)
	}
	if err := c.ReleaseLock(ctx, lockName, lock.Token()); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseLock(ctx, lockName, lock.Token()); !errors.Is(err, baton.ErrNotHeld) && !errors.Is(err, baton.ErrStaleToken) {
		t.Fatalf("a second release: %v", err)
	}
	lock.Unlock(ctx)
	if sent.Load() == 0 {
		t.Fatal("the injected *http.Client was not used")
	}
}

type countingTransport struct{ n *atomic.Int64 }

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}
