package baton_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"baton.dev/baton"
)

// terms records what RunLeaderElection's callbacks saw.
type terms struct {
	started chan leadingTerm
	stopped chan error
}

type leadingTerm struct {
	ctx  context.Context
	term baton.Term
}

func newTerms() *terms {
	return &terms{started: make(chan leadingTerm, 8), stopped: make(chan error, 8)}
}

func (r *terms) callbacks() baton.LeaderCallbacks {
	return baton.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, term baton.Term) {
			r.started <- leadingTerm{ctx, term}
			<-ctx.Done() // an app that leads until told to stop
		},
		OnStoppedLeading: func(cause error) { r.stopped <- cause },
	}
}

func (r *terms) nextStart(t *testing.T) leadingTerm {
	t.Helper()
	select {
	case l := <-r.started:
		return l
	case <-time.After(bound):
		t.Fatal("never started leading")
		return leadingTerm{}
	}
}

// run runs RunLeaderElection in the background; the returned function stops it and returns
// its error.
func run(t *testing.T, c *baton.Client, config baton.LeaderElectionConfig) (done <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	var once sync.Once
	go func() { result <- c.RunLeaderElection(ctx, config) }()
	t.Cleanup(func() { once.Do(cancel) })
	return result, func() { once.Do(cancel) }
}

func TestLeaderElectionRunsTheLeaderAndCancelsItWhenDeposed(t *testing.T) {
	ctx := withBound(t)
	election := unique("election")
	a := startSidecar(t, "", unique("a"), []string{election})
	seen := newTerms()
	var mu sync.Mutex
	var leaders []string
	callbacks := seen.callbacks()
	callbacks.OnNewLeader = func(l *baton.Leader) {
		mu.Lock()
		defer mu.Unlock()
		if l != nil {
			leaders = append(leaders, l.Identity)
		}
	}
	_, _ = run(t, baton.New(a.addr), baton.LeaderElectionConfig{Election: election, Callbacks: callbacks})
	leading := seen.nextStart(t)
	b := startSidecar(t, "", unique("b"), []string{election})
	info := waitLeader(t, baton.New(b.addr), election, a.identity)
	if info.Leader == nil || info.Leader.Identity != a.identity || info.Leader.Token != leading.term.Token {
		t.Fatalf("b sees %+v, a leads with %+v", info.Leader, leading.term)
	}
	// a resigns behind the app's back: the term's context ends at once, b leads.
	if err := baton.New(a.addr).Resign(ctx, election); err != nil {
		t.Fatal(err)
	}
	if cause := waitDone(t, leading.ctx); !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("cause %v", cause)
	}
	if cause := <-seen.stopped; !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("OnStoppedLeading got %v", cause)
	}
	waitLeader(t, baton.New(b.addr), election, b.identity)
	mu.Lock()
	defer mu.Unlock()
	if len(leaders) == 0 || leaders[0] != a.identity {
		t.Fatalf("OnNewLeader saw %v", leaders)
	}
}

// SIGTERM while the app leads: the client stops the app's term, releases the election, and
// the other pod leads at once, long before the sidecar's 5 m --release-grace.
func TestSigtermHandsLeadershipOver(t *testing.T) {
	election := unique("handoff")
	a := startSidecar(t, "", unique("a"), []string{election}, "--release-grace", "5m")
	seen := newTerms()
	done, _ := run(t, baton.New(a.addr), baton.LeaderElectionConfig{Election: election, Callbacks: seen.callbacks()})
	leading := seen.nextStart(t)
	b := startSidecar(t, "", unique("b"), []string{election})

	a.signal(syscall.SIGTERM)
	waitLeader(t, baton.New(b.addr), election, b.identity)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunLeaderElection after the hand-over: %v", err)
		}
	case <-time.After(bound):
		t.Fatal("RunLeaderElection did not return after the hand-over")
	}
	// The last term is the one stepping-down ended (the sidecar may have said "not leading,
	// leading again" in between: that ends a term and starts another with the same token).
	last := leading
	for drained := false; !drained; {
		select {
		case l := <-seen.started:
			last = l
		default:
			drained = true
		}
	}
	if cause := context.Cause(last.ctx); !errors.Is(cause, baton.ErrSteppingDown) {
		t.Fatalf("the last term's cause %v", cause)
	}
	if state := a.waitExit(); !state.Success() {
		t.Fatalf("sidecar exit: %v", state)
	}
	a.waitLog("the app released the election")
}

// The sidecar's session is cut off from the ensemble: the leader stops acting at once (its
// context ends, ErrSuspended), the event stream says SUSPENDED, and once the link heals the
// same session resumes and the app leads again with the same fencing token.
func TestSuspendedSessionStopsTheLeader(t *testing.T) {
	ctx := withBound(t)
	election := unique("suspend")
	link := startProxy(t, env(t, "BATON_SDK_ENSEMBLE"))
	a := startSidecar(t, link.addr, unique("a"), []string{election})
	c := baton.New(a.addr)
	events := c.Events(ctx)
	seen := newTerms()
	run(t, c, baton.LeaderElectionConfig{Election: election, Callbacks: seen.callbacks()})
	leading := seen.nextStart(t)

	link.setCut(true)
	if cause := waitDone(t, leading.ctx); !errors.Is(cause, baton.ErrSuspended) && !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("cause %v", cause)
	}
	for e := range events {
		if e.State != nil && e.State.State == "SUSPENDED" {
			break
		}
	}
	link.setCut(false)
	again := seen.nextStart(t)
	if again.term.Token != leading.term.Token {
		t.Fatalf("a resumed session leads with token %d, was %d", again.term.Token, leading.term.Token)
	}
}

// With --candidacy app the pod stands only while RunLeaderElection runs: stopping it hands
// leadership to the other pod.
func TestCampaignStandsWhileRunning(t *testing.T) {
	ctx := withBound(t)
	election := unique("campaign")
	a := startSidecar(t, "", unique("a"), []string{election}, "--candidacy", "app")
	b := startSidecar(t, "", unique("b"), []string{election})
	waitLeader(t, baton.New(b.addr), election, b.identity)
	// b resigns once a campaigns, so a leads.
	seen := newTerms()
	done, stop := run(t, baton.New(a.addr), baton.LeaderElectionConfig{Election: election, Campaign: true, Callbacks: seen.callbacks()})
	waitMembers(t, baton.New(b.addr), election, 2)
	if err := baton.New(b.addr).Resign(ctx, election); err != nil {
		t.Fatal(err)
	}
	leading := seen.nextStart(t)
	stop()
	if cause := waitDone(t, leading.ctx); cause == nil {
		t.Fatal("no cause")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitLeader(t, baton.New(b.addr), election, b.identity)
}

func waitMembers(t *testing.T, c *baton.Client, election string, n int) baton.Members {
	t.Helper()
	ctx := withBound(t)
	m, err := c.Members(ctx, election)
	for err == nil && len(m.Members) < n {
		m, err = c.WaitMembers(ctx, election, m.Version, 30*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMembersAndBarrier(t *testing.T) {
	ctx := withBound(t)
	election := unique("group")
	a := startSidecar(t, "", unique("a"), []string{election})
	b := startSidecar(t, "", unique("b"), []string{election})
	m := waitMembers(t, baton.New(a.addr), election, 2)
	// Queue order is creation order, and both sidecars start their candidacy at once.
	names := map[string]bool{m.Members[0].Identity: true, m.Members[1].Identity: true}
	if !m.Members[0].Leader || m.Members[1].Leader || !names[a.identity] || !names[b.identity] {
		t.Fatalf("members %+v", m)
	}
	barrier := unique("barrier")
	other := make(chan error, 1)
	go func() { other <- baton.New(b.addr).Barrier(ctx, barrier, 2, bound) }()
	if err := baton.New(a.addr).Barrier(ctx, barrier, 2, bound); err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if err := baton.New(a.addr).Barrier(ctx, unique("alone"), 2, 0); !errors.Is(err, baton.ErrNotPassed) {
		t.Fatalf("a barrier nobody else enters: %v", err)
	}
}

// The same client against Apache ZooKeeper as the sidecar's ensemble.
func TestAgainstZooKeeper(t *testing.T) {
	ctx := withBound(t)
	election := unique("zk")
	zk := env(t, "BATON_SDK_ZOOKEEPER")
	a := startSidecar(t, zk, unique("a"), []string{election})
	c := baton.New(a.addr)
	seen := newTerms()
	run(t, c, baton.LeaderElectionConfig{Election: election, Callbacks: seen.callbacks()})
	leading := seen.nextStart(t)
	lock, err := c.Lock(ctx, unique("lock"), baton.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lock.Token() <= leading.term.Token {
		t.Fatalf("tokens are czxids: the lock's %d came after the term's %d", lock.Token(), leading.term.Token)
	}
	a.signal(syscall.SIGKILL)
	if cause := waitDone(t, lock.Context()); !errors.Is(cause, baton.ErrLost) {
		t.Fatalf("lock: %v", cause)
	}
	if cause := waitDone(t, leading.ctx); cause == nil {
		t.Fatal("term: no cause")
	}
}

// waitLeader long-polls c until identity leads election (a hand-over may pass through a moment
// with no leader, which a single long-poll would answer).
func waitLeader(t *testing.T, c *baton.Client, election, identity string) baton.LeaderInfo {
	t.Helper()
	ctx := withBound(t)
	var token int64
	for {
		info, err := c.WaitLeaderChange(ctx, election, token, bound)
		if err != nil {
			t.Fatalf("waiting for %s to lead %s: %v", identity, election, err)
		}
		if info.Leader != nil && info.Leader.Identity == identity {
			return info
		}
		token = 0
		if info.Leader != nil {
			token = info.Leader.Token
		}
	}
}

// The pod's event stream outlives its sidecar: when the sidecar dies the client says so
// (Disconnected: stop acting), and when a sidecar serves the address again the stream is
// reopened and starts with the current state.
func TestEventsReconnectAfterTheSidecarRestarts(t *testing.T) {
	ctx := withBound(t)
	s := startSidecar(t, "", unique("a"), nil)
	events := baton.New(s.addr).Events(ctx)
	next := func(want func(baton.Event) bool) baton.Event {
		t.Helper()
		for e := range events {
			if want(e) {
				return e
			}
		}
		t.Fatal("the event stream ended")
		return baton.Event{}
	}
	connected := func(e baton.Event) bool { return e.State != nil && e.State.State == "CONNECTED" }
	next(connected)
	s.signal(syscall.SIGKILL)
	gone := next(func(e baton.Event) bool { return e.Name == baton.Disconnected })
	if gone.Err == nil {
		t.Fatal("Disconnected without a reason")
	}
	startSidecar(t, "", unique("a"), nil, "--listen", s.addr)
	next(connected)
}
