package baton

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// LeaderInfo is the answer of GET /leader[/NAME].
type LeaderInfo struct {
	Election string  `json:"election"`
	Leader   *Leader `json:"leader"` // nil while nobody leads
	Self     struct {
		Identity   string `json:"identity"`
		IsLeader   bool   `json:"isLeader"`
		State      string `json:"state"` // CONNECTED, SUSPENDED, LOST
		ValidUntil Time   `json:"validUntil"`
	} `json:"self"`
}

// Leader is who leads an election, with the term's fencing token.
type Leader struct {
	Identity string `json:"identity"`
	Address  string `json:"address"`
	Pod      string `json:"pod"`
	Since    Time   `json:"since"`
	Token    int64  `json:"token"`
}

// electionOp is named, the operation on election, or, for election "" (the sidecar's only
// one), only, its form without a name.
func electionOp(election string, named, only operation) operation {
	if election == "" {
		return only
	}
	return named
}

// Leader asks who leads election ("" for the sidecar's only one).
func (c *Client) Leader(ctx context.Context, election string) (LeaderInfo, error) {
	var info LeaderInfo
	err := c.call(ctx, electionOp(election, opLeader, opLeaderDefault), election, nil, 0, &info)
	return info, err
}

// WaitLeaderChange long-polls until the leader's token differs from token, or wait passes.
func (c *Client) WaitLeaderChange(ctx context.Context, election string, token int64, wait time.Duration) (LeaderInfo, error) {
	var info LeaderInfo
	q := url.Values{paramWait: {seconds(wait)}, paramToken: {strconv.FormatInt(token, 10)}}
	err := c.call(ctx, electionOp(election, opLeader, opLeaderDefault), election, q, wait, &info)
	return info, err
}

// Resign steps down and queues again at the back.
func (c *Client) Resign(ctx context.Context, election string) error {
	return c.call(ctx, electionOp(election, opLeaderResign, opLeaderResignDefault), election, nil, 0, nil)
}

// Release answers `stepping-down`: resign election for good during the sidecar's SIGTERM
// hand-off. RunLeaderElection does it for the app.
func (c *Client) Release(ctx context.Context, election string) (wasLeader bool, err error) {
	var answer struct {
		WasLeader bool `json:"wasLeader"`
	}
	err = c.call(ctx, electionOp(election, opLeaderRelease, opLeaderReleaseDefault), election, nil, 0, &answer)
	return answer.WasLeader, err
}

// Term is one stretch of leadership.
type Term struct {
	Election string
	Token    int64 // the fencing token: pass it to what the leader writes to
	Since    time.Time
}

// LeaderCallbacks are called by RunLeaderElection, like client-go's leaderelection callbacks.
type LeaderCallbacks struct {
	// OnStartedLeading runs in its own goroutine while this pod leads. ctx is cancelled the
	// moment leadership is lost, the session is suspended, validUntil passes, or the sidecar
	// steps down (context.Cause says which); the function must return soon after.
	OnStartedLeading func(ctx context.Context, term Term)
	// OnStoppedLeading is called after OnStartedLeading returned, with why the term ended.
	OnStoppedLeading func(cause error)
	// OnNewLeader is called whenever another leader (or none: nil) is seen.
	OnNewLeader func(leader *Leader)
}

// LeaderElectionConfig configures RunLeaderElection.
type LeaderElectionConfig struct {
	// Election is the election's name ("" for the sidecar's only one).
	Election string
	// Campaign stands in the election only while RunLeaderElection runs (the sidecar's
	// --candidacy app); otherwise the sidecar stands on its own and this follows.
	Campaign  bool
	Callbacks LeaderCallbacks
}

// RunLeaderElection follows (or, with Campaign, stands in) an election until ctx is done,
// running OnStartedLeading for each term this pod leads. On the sidecar's SIGTERM
// (`stepping-down`) it cancels the term, waits for OnStartedLeading to return, releases the
// election so the next pod leads at once, and returns nil. A lost stream is reopened.
func (c *Client) RunLeaderElection(ctx context.Context, config LeaderElectionConfig) error {
	r := &leaderRun{c: c, config: config}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		done, err := r.follow(ctx)
		r.stop(fmt.Errorf("%w: the stream ended: %v", ErrLost, err))
		if done {
			return nil
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status/100 == 4 && !errors.Is(err, ErrCampaignInProgress) {
			return err
		}
		if errors.Is(err, ErrShuttingDown) {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	r.stop(context.Cause(ctx))
	return nil
}

type leaderRun struct {
	c      *Client
	config LeaderElectionConfig

	term       Term
	cancel     context.CancelCauseFunc // nil while not leading
	finished   chan struct{}
	validUntil time.Time
	lastLeader int64
	seenLeader bool
}

type streamEvent struct {
	ev  event
	err error
}

// follow reads one stream until it ends or ctx is done; done is true after a hand-over.
func (r *leaderRun) follow(ctx context.Context) (done bool, err error) {
	op := electionOp(r.config.Election, opLeader, opLeaderDefault)
	q := url.Values{paramFollow: {followStream}}
	if r.config.Campaign {
		op, q = electionOp(r.config.Election, opLeaderCampaign, opLeaderCampaignDefault), nil
	}
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := r.c.stream(streamCtx, op, r.config.Election, q)
	if err != nil {
		return false, err
	}
	events := make(chan streamEvent)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stream.close()
		for {
			ev, err := stream.next()
			select {
			case events <- streamEvent{ev, err}:
			case <-streamCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	defer cancel()
	steppingDown := false
	for {
		var deadline, refresh <-chan time.Time
		var timers []*time.Timer
		if r.cancel != nil {
			left := time.Until(r.validUntil)
			d := time.NewTimer(max(left, 0))
			f := time.NewTimer(max(left/3, 50*time.Millisecond))
			timers = append(timers, d, f)
			deadline, refresh = d.C, f.C
		}
		stopTimers := func() {
			for _, t := range timers {
				t.Stop()
			}
		}
		select {
		case <-ctx.Done():
			stopTimers()
			return false, ctx.Err()
		case <-deadline:
			stopTimers()
			r.stop(fmt.Errorf("%w: election %s", ErrValidUntilPassed, r.config.Election))
		case <-refresh:
			stopTimers()
			r.refresh(ctx)
		case se := <-events:
			stopTimers()
			if se.err != nil {
				if errors.Is(se.err, io.EOF) {
					se.err = errStreamEnded
				}
				return steppingDown, se.err
			}
			if r.handle(ctx, se.ev) {
				steppingDown = true
			}
		}
	}
}

// handle applies one event; true on `stepping-down`, after the hand-over is done.
func (r *leaderRun) handle(ctx context.Context, ev event) bool {
	switch ev.Name {
	case "leader":
		var info LeaderInfo
		if ev.decode(&info) != nil {
			return false
		}
		r.sawLeader(info.Leader)
		leads := info.Self.IsLeader && info.Leader != nil
		if r.cancel != nil && (!leads || info.Leader.Token != r.term.Token) {
			r.stop(fmt.Errorf("%w: election %s: this pod no longer leads", ErrLost, r.config.Election))
		}
		switch {
		case leads && r.cancel == nil:
			r.start(Term{Election: info.Election, Token: info.Leader.Token, Since: info.Leader.Since.Time}, info.Self.ValidUntil.Time)
		case leads:
			r.extend(info.Self.ValidUntil.Time)
		}
	case "elected":
		var data struct {
			Election   string `json:"election"`
			Token      int64  `json:"token"`
			Since      Time   `json:"since"`
			ValidUntil Time   `json:"validUntil"`
		}
		if ev.decode(&data) != nil {
			return false
		}
		if r.cancel != nil && r.term.Token != data.Token {
			r.stop(fmt.Errorf("%w: election %s: a new term", ErrLost, r.config.Election))
		}
		if r.cancel == nil {
			r.start(Term{Election: data.Election, Token: data.Token, Since: data.Since.Time}, data.ValidUntil.Time)
		}
	case "candidate":
		var data struct {
			Leader *Leader `json:"leader"`
		}
		if ev.decode(&data) == nil {
			r.sawLeader(data.Leader)
		}
		if r.cancel != nil {
			r.stop(fmt.Errorf("%w: election %s: queued again", ErrLost, r.config.Election))
		}
	case "deposed", "lost", "connected":
		if r.cancel != nil {
			r.stop(fmt.Errorf("%w: election %s: %s", ErrLost, r.config.Election, ev.Name))
		}
	case "suspended":
		// Leadership is uncertain while the session is cut off: stop acting now.
		if r.cancel != nil {
			r.stop(fmt.Errorf("%w: election %s", ErrSuspended, r.config.Election))
		}
	case "resumed":
		// The same session is back and nothing was lost: lead again if the sidecar says so.
		if r.cancel == nil {
			if info, err := r.c.Leader(ctx, r.config.Election); err == nil && info.Self.IsLeader && info.Leader != nil {
				r.start(Term{Election: info.Election, Token: info.Leader.Token, Since: info.Leader.Since.Time}, info.Self.ValidUntil.Time)
			}
		}
	case "stepping-down":
		r.stop(fmt.Errorf("%w: election %s", ErrSteppingDown, r.config.Election))
		// The app has stopped acting as leader: hand over now rather than after the grace.
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callSlack) // the values of ctx (tracing), not its end
		defer cancel()
		_, _ = r.c.Release(releaseCtx, r.config.Election)
		return true
	}
	return false
}

func (r *leaderRun) sawLeader(l *Leader) {
	var token int64
	if l != nil {
		token = l.Token
	}
	if r.seenLeader && token == r.lastLeader {
		return
	}
	r.seenLeader, r.lastLeader = true, token
	if r.config.Callbacks.OnNewLeader != nil {
		r.config.Callbacks.OnNewLeader(l)
	}
}

func (r *leaderRun) start(term Term, validUntil time.Time) {
	if validUntil.IsZero() || !time.Now().Before(validUntil) {
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	r.term, r.cancel, r.validUntil = term, cancel, validUntil
	r.finished = make(chan struct{})
	finished := r.finished
	go func() {
		defer close(finished)
		if r.config.Callbacks.OnStartedLeading != nil {
			r.config.Callbacks.OnStartedLeading(ctx, term)
		}
	}()
}

func (r *leaderRun) extend(validUntil time.Time) {
	if validUntil.After(r.validUntil) {
		r.validUntil = validUntil
	}
}

// stop cancels the running term, if any, and waits for OnStartedLeading to return.
func (r *leaderRun) stop(cause error) {
	if r.cancel == nil {
		return
	}
	r.cancel(cause)
	<-r.finished
	r.cancel = nil
	if r.config.Callbacks.OnStoppedLeading != nil {
		r.config.Callbacks.OnStoppedLeading(cause)
	}
}

// refresh asks the sidecar for a fresher validUntil while leading.
func (r *leaderRun) refresh(ctx context.Context) {
	ctx, cancel := context.WithDeadline(ctx, r.validUntil)
	defer cancel()
	info, err := r.c.Leader(ctx, r.config.Election)
	if err != nil {
		return // the deadline still bounds the term
	}
	if info.Self.IsLeader && info.Leader != nil && info.Leader.Token == r.term.Token {
		r.extend(info.Self.ValidUntil.Time)
		return
	}
	r.stop(fmt.Errorf("%w: election %s: this pod no longer leads", ErrLost, r.config.Election))
}
