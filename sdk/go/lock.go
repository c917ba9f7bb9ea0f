package baton

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Grant is the sidecar's answer to an acquire: what is held, its fencing token, and until
// when the holder may act without fresher word (validUntil, DESIGN §2).
type Grant struct {
	Lock       string `json:"lock"`      // the lock's name (empty for a semaphore)
	Semaphore  string `json:"semaphore"` // the semaphore's name (empty for a lock)
	Permits    int    `json:"permits"`   // a semaphore's N
	Mode       string `json:"mode"`      // exclusive, read, write, permit
	Token      int64  `json:"token"`     // the fencing token: pass it to what the lock protects
	Hold       string `json:"hold"`      // stream or lease
	ExpiresAt  Time   `json:"expiresAt"` // a lease's end (zero on a stream hold)
	ValidUntil Time   `json:"validUntil"`
}

// LockOptions say how to acquire. The zero value: an exclusive lock held by a stream (it dies
// with this process). How long to queue is the context's business (Go's idiom for the other
// clients' `wait`): Lock queues until granted or ctx is done, a deadline of ctx bounds the
// wait (ErrNotGranted when it passes), and TryLock does not queue at all (wait 0).
type LockOptions struct {
	// Mode: "" (exclusive), "read" or "write".
	Mode string
	// TTL > 0 takes a lease instead of a stream hold; this client renews it (every third of
	// the TTL, sooner when validUntil is nearer) and stops at the first renewal that fails.
	TTL time.Duration
}

// Lock is a held lock or semaphore permit. Its Context is cancelled the moment the grant is
// known lost, or validUntil passes without fresher word; context.Cause says which (ErrLost,
// ErrValidUntilPassed, ErrReleased, or the failed renewal's error).
type Lock struct {
	c      *Client
	ops    grantOps
	name   string
	path   string // /lock/NAME or /semaphore/NAME, for messages
	grant  Grant
	ctx    context.Context
	cancel context.CancelCauseFunc
	stream *eventReader // nil for a lease

	mu         sync.Mutex
	validUntil time.Time
	suspended  bool
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
}

// grantOps are the operations on the grants of a lock, or of a semaphore.
type grantOps struct{ acquire, inspect, release, renew operation }

var (
	lockOps      = grantOps{opLockAcquire, opLockInspect, opLockRelease, opLockRenew}
	semaphoreOps = grantOps{opSemaphoreAcquire, opSemaphoreInspect, opSemaphoreRelease, opSemaphoreRenew}
)

// Lock acquires lock name, queueing until it is granted or ctx is done: with a deadline,
// ErrNotGranted when it passes; cancelled, ctx's error. A deadline further than the sidecar's
// limit on one call (600 s) is waited out in calls of that limit. A TTL outside the sidecar's
// bounds (100 ms to 24 h) is refused before any call.
func (c *Client) Lock(ctx context.Context, name string, opts LockOptions) (*Lock, error) {
	return c.acquire(ctx, lockOps, name, lockQuery(opts), opts, false)
}

// TryLock acquires lock name only if it is free now (wait 0): ErrNotGranted when it is held.
func (c *Client) TryLock(ctx context.Context, name string, opts LockOptions) (*Lock, error) {
	return c.acquire(ctx, lockOps, name, lockQuery(opts), opts, true)
}

// Semaphore acquires one of permits permits of semaphore name, queueing as Lock does; it is
// held, renewed and released as a lock is.
func (c *Client) Semaphore(ctx context.Context, name string, permits int, opts LockOptions) (*Lock, error) {
	return c.acquire(ctx, semaphoreOps, name, url.Values{paramPermits: {strconv.Itoa(permits)}}, opts, false)
}

// TrySemaphore acquires a permit only if one is free now (wait 0): ErrNotGranted when not.
func (c *Client) TrySemaphore(ctx context.Context, name string, permits int, opts LockOptions) (*Lock, error) {
	return c.acquire(ctx, semaphoreOps, name, url.Values{paramPermits: {strconv.Itoa(permits)}}, opts, true)
}

func lockQuery(opts LockOptions) url.Values {
	q := url.Values{}
	if opts.Mode != "" {
		q.Set(paramMode, opts.Mode)
	}
	return q
}

func (c *Client) acquire(ctx context.Context, ops grantOps, name string, q url.Values, opts LockOptions, try bool) (*Lock, error) {
	if opts.TTL > 0 && (opts.TTL < ttlMin || opts.TTL > ttlMax) {
		return nil, fmt.Errorf("baton: TTL %v: a lease is %v to %v", opts.TTL, ttlMin, ttlMax)
	}
	for {
		var wait time.Duration
		if !try {
			wait = waitMax
			if deadline, ok := ctx.Deadline(); ok {
				wait = max(waitMin, min(waitMax, time.Until(deadline).Truncate(time.Millisecond)))
			}
		}
		q.Set(paramWait, seconds(wait))
		lock, err := c.acquireOnce(ctx, ops, name, q, opts, wait)
		// A wait cut at the sidecar's limit on one call goes on while ctx allows.
		if errors.Is(err, ErrNotGranted) && !try && wait == waitMax && ctx.Err() == nil {
			continue
		}
		return lock, err
	}
}

// Holder is one grant of a lock or semaphore, as GET /lock/NAME and GET /semaphore/NAME show it.
type Holder struct {
	Identity       string `json:"identity"`
	Mode           string `json:"mode"`    // a lock's: exclusive, read or write
	Permits        int    `json:"permits"` // a semaphore's N as this holder gave it
	Token          int64  `json:"token"`
	LeaseExpiresAt Time   `json:"leaseExpiresAt"` // zero on a stream hold
	Node           string `json:"node"`
}

// Self is this pod's part in a lock or semaphore: whether it holds it, and until when it may act.
type Self struct {
	Identity   string `json:"identity"`
	Holds      bool   `json:"holds"`
	Token      int64  `json:"token"` // zero when it does not hold
	Hold       string `json:"hold"`  // stream or lease
	Mode       string `json:"mode"`
	ExpiresAt  Time   `json:"expiresAt"`
	ValidUntil Time   `json:"validUntil"`
}

// LockState is the answer of GET /lock/NAME and GET /semaphore/NAME: who holds it, who
// queues, and this pod's part. Permits is a semaphore's N (zero for a lock).
type LockState struct {
	Lock      string   `json:"lock"`
	Semaphore string   `json:"semaphore"`
	Permits   int      `json:"permits"`
	Holders   []Holder `json:"holders"`
	Waiters   []Holder `json:"waiters"`
	Self      Self     `json:"self"`
}

// LockState reads lock name: holders, waiters and whether this pod holds it.
func (c *Client) LockState(ctx context.Context, name string) (LockState, error) {
	var s LockState
	err := c.call(ctx, lockOps.inspect, name, nil, 0, &s)
	return s, err
}

// SemaphoreState reads semaphore name: its permits, holders, waiters and this pod's part.
func (c *Client) SemaphoreState(ctx context.Context, name string) (LockState, error) {
	var s LockState
	err := c.call(ctx, semaphoreOps.inspect, name, nil, 0, &s)
	return s, err
}

// ReleaseLock releases this pod's grant of lock name by its fencing token (a grant taken by
// another process of the pod, or one this process no longer has a *Lock for).
func (c *Client) ReleaseLock(ctx context.Context, name string, token int64) error {
	return c.call(ctx, lockOps.release, name, url.Values{paramToken: {strconv.FormatInt(token, 10)}}, 0, nil)
}

// ReleaseSemaphore releases this pod's permit of semaphore name by its token.
func (c *Client) ReleaseSemaphore(ctx context.Context, name string, token int64) error {
	return c.call(ctx, semaphoreOps.release, name, url.Values{paramToken: {strconv.FormatInt(token, 10)}}, 0, nil)
}

func (c *Client) acquireOnce(ctx context.Context, ops grantOps, name string, q url.Values, opts LockOptions, wait time.Duration) (lock *Lock, err error) {
	path := ops.acquire.at(name)
	l := &Lock{c: c, ops: ops, name: name, path: path, stop: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx)) // ctx's values, not its end
	defer func() {
		if err != nil {
			l.cancel(err) // nothing was granted: free the context
		}
	}()
	if opts.TTL > 0 {
		q.Set(paramTtl, seconds(opts.TTL))
		q.Del(paramHold)
		if err := c.call(ctx, ops.acquire, name, q, wait, &l.grant); err != nil {
			return nil, err
		}
	} else {
		q.Set(paramHold, holdStream)
		q.Del(paramTtl)
		// The stream outlives ctx (it is the hold); ctx only bounds the wait for the grant.
		streamCtx, closeStream := context.WithCancel(context.WithoutCancel(ctx))
		unhook := context.AfterFunc(ctx, closeStream)
		stream, err := c.stream(streamCtx, ops.acquire, name, q)
		if err != nil {
			closeStream()
			return nil, err
		}
		first, err := stream.next()
		if !unhook() || err != nil || first.Name != "granted" {
			stream.close()
			closeStream()
			if err == nil {
				err = fmt.Errorf("baton: %s: %w: first event %q", path, ErrLost, first.Name)
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, err
		}
		if err := first.decode(&l.grant); err != nil {
			stream.close()
			closeStream()
			return nil, err
		}
		l.stream = stream
		context.AfterFunc(l.ctx, closeStream)
	}
	l.validUntil = l.grant.ValidUntil.Time
	l.wg.Add(1)
	go l.guard(opts.TTL)
	if l.stream != nil {
		l.wg.Add(1)
		go l.follow()
	}
	return l, nil
}

// Token is the grant's fencing token.
func (l *Lock) Token() int64 { return l.grant.Token }

// Grant is the sidecar's grant as received.
func (l *Lock) Grant() Grant { return l.grant }

// Context is cancelled when the lock is lost, released, or validUntil passes.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while held, else why it ended.
func (l *Lock) Err() error { return context.Cause(l.ctx) }

// ValidUntil is the latest promise: until then the holder may act without fresher word.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Suspended reports whether the sidecar's session is cut off right now: the lock stands until
// ValidUntil, and is then given up unless the session comes back.
func (l *Lock) Suspended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.suspended
}

// Unlock releases the lock (DELETE with its token, then the stream closes) and stops renewing;
// ctx bounds the DELETE (a stream hold is released by closing its stream whatever the DELETE
// met). Releasing a grant that already ended is not an error.
func (l *Lock) Unlock(ctx context.Context) error {
	var err error
	if l.ctx.Err() == nil {
		// Never longer than a plain call: the release must not hang on a hung sidecar.
		ctx, cancel := context.WithTimeout(ctx, callSlack)
		defer cancel()
		q := url.Values{paramToken: {strconv.FormatInt(l.grant.Token, 10)}}
		err = l.c.call(ctx, l.ops.release, l.name, q, 0, nil)
		if errors.Is(err, ErrStaleToken) || errors.Is(err, ErrNotHeld) {
			err = nil
		}
		// A stream hold is released by closing the stream too, whatever the DELETE met.
		if l.stream != nil {
			err = nil
		}
	}
	l.end(ErrReleased)
	l.wg.Wait()
	return err
}

// Close is Unlock with a background context bounded by the client's call timeout, for io.Closer.
func (l *Lock) Close() error { return l.Unlock(context.Background()) }

func (l *Lock) end(cause error) {
	l.cancel(cause)
	l.stopOnce.Do(func() { close(l.stop) })
}

// follow reads a stream hold's events until the stream ends.
func (l *Lock) follow() {
	defer l.wg.Done()
	defer l.stream.close()
	for {
		ev, err := l.stream.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errStreamEnded
			}
			l.end(fmt.Errorf("%w: %s: the hold's stream ended: %w", ErrLost, l.path, err))
			return
		}
		var data struct {
			Reason     string `json:"reason"`
			ValidUntil Time   `json:"validUntil"`
		}
		_ = ev.decode(&data)
		switch ev.Name {
		case "lost":
			l.end(fmt.Errorf("%w: %s: %s", ErrLost, l.path, data.Reason))
			return
		case "released":
			l.end(fmt.Errorf("%w: %s: %s", ErrReleased, l.path, data.Reason))
			return
		case "suspended":
			l.mu.Lock()
			l.suspended = true
			// Never later than what the grant promised; the sidecar's word may be earlier.
			if !data.ValidUntil.IsZero() && data.ValidUntil.Before(l.validUntil) {
				l.validUntil = data.ValidUntil.Time
			}
			l.mu.Unlock()
		case "resumed":
			l.mu.Lock()
			l.suspended = false
			l.mu.Unlock()
		}
	}
}

// guard cancels the lock at validUntil, and keeps validUntil fresh: a lease by renewing it
// (stopping at the first failure), a stream hold by asking the sidecar whether it still holds.
func (l *Lock) guard(ttl time.Duration) {
	defer l.wg.Done()
	for {
		validUntil := l.ValidUntil()
		left := time.Until(validUntil)
		if validUntil.IsZero() || left <= 0 {
			l.end(fmt.Errorf("%w: %s", ErrValidUntilPassed, l.path))
			return
		}
		next := left / 3
		if ttl > 0 {
			next = min(next, ttl/3)
		}
		next = max(next, 50*time.Millisecond)
		deadline := time.NewTimer(left)
		refresh := time.NewTimer(next)
		select {
		case <-l.stop:
			deadline.Stop()
			refresh.Stop()
			return
		case <-deadline.C:
			refresh.Stop()
			l.end(fmt.Errorf("%w: %s", ErrValidUntilPassed, l.path))
			return
		case <-refresh.C:
			deadline.Stop()
		}
		fresh, err := l.refresh(ttl > 0, left)
		if err != nil {
			if ttl > 0 {
				// A renewal that failed is never retried: the lease may be gone, and a
				// renew loop outliving its lock is the bug this client exists to prevent.
				l.end(fmt.Errorf("%w: %s: renewal failed: %w", ErrLost, l.path, err))
				return
			}
			var apiErr *Error
			if errors.As(err, &apiErr) && apiErr.Status != 0 && apiErr.Status/100 == 4 {
				l.end(fmt.Errorf("%w: %s: %w", ErrLost, l.path, err))
				return
			}
			// A stream hold: its stream says when it ends; validUntil still bounds it.
			continue
		}
		l.mu.Lock()
		if fresh.After(l.validUntil) && (!l.suspended || ttl > 0) {
			l.validUntil = fresh
		}
		l.mu.Unlock()
	}
}

// refresh renews a lease, or reads a stream hold's state, and returns the new validUntil.
func (l *Lock) refresh(renew bool, left time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(l.ctx, left)
	defer cancel()
	token := strconv.FormatInt(l.grant.Token, 10)
	if renew {
		var g Grant
		err := l.c.call(ctx, l.ops.renew, l.name, url.Values{paramToken: {token}}, 0, &g)
		return g.ValidUntil.Time, err
	}
	var state struct {
		Self struct {
			Holds      bool  `json:"holds"`
			Token      int64 `json:"token"`
			ValidUntil Time  `json:"validUntil"`
		} `json:"self"`
	}
	if err := l.c.call(ctx, l.ops.inspect, l.name, nil, 0, &state); err != nil {
		return time.Time{}, err
	}
	if !state.Self.Holds || state.Self.Token != l.grant.Token {
		return time.Time{}, &Error{Status: http.StatusConflict, Code: ErrNotHeld.Code, Message: "the sidecar no longer holds this grant"}
	}
	return state.Self.ValidUntil.Time, nil
}
