// Command refusal: go-zookeeper/zk meets a Baton refusal (tests/e2e/tests/refusals.rs).
//
// refusal HOST:PORT: with a shared quota of 5,000 bytes, the first 3,000-byte create passes,
// the second is refused; then reads, a small create and deletes must work on the same session,
// with no disconnection seen. Prints each step; exits 0 only if all of it held.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

const (
	base = "/refusals"
	// Each call waits at most this long: a client whose connection died fails, not hangs.
	callDeadline = 15 * time.Second
)

var big = bytes.Repeat([]byte("x"), 3000)

// states records the session states the client reports after it first connected.
type states struct {
	mu        sync.Mutex
	connected bool
	after     []zk.State
}

func (s *states) event(e zk.Event) {
	if e.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected {
		s.after = append(s.after, e.State)
	} else if e.State == zk.StateHasSession {
		s.connected = true
	}
}

func (s *states) seen() []zk.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]zk.State(nil), s.after...)
}

// call runs op with a deadline, so that a lost connection fails the step that hung.
func call(what string, op func() error) error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-time.After(callDeadline):
		return fmt.Errorf("%s: no answer within %v", what, callDeadline)
	}
}

func must(what string, op func() error) {
	if err := call(what, op); err != nil {
		fail("%s: %v", what, err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: %s HOST:PORT", os.Args[0])
	}
	seen := &states{}
	conn, _, err := zk.Connect([]string{os.Args[1]}, 20*time.Second, zk.WithEventCallback(seen.event), zk.WithLogInfo(false))
	if err != nil {
		fail("connect: %v", err)
	}
	defer conn.Close()
	open := zk.WorldACL(zk.PermAll)
	// Connect returns before the session exists: the first call waits for it.
	must("create base", func() error {
		_, err := conn.Create(base, nil, 0, open)
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
	session := conn.SessionID()
	fmt.Printf("session 0x%x\n", session)

	must("create big-1", func() error { _, err := conn.Create(base+"/big-1", big, 0, open); return err })
	fmt.Println("created big-1")
	refusal := call("create big-2", func() error { _, err := conn.Create(base+"/big-2", big, 0, open); return err })
	if refusal == nil {
		fail("big-2 was not refused")
	}
	fmt.Printf("refused big-2: %T: %v (ErrBadArguments: %t)\n", refusal, refusal, errors.Is(refusal, zk.ErrBadArguments))

	must("exists big-1", func() error {
		ok, _, err := conn.Exists(base + "/big-1")
		if err == nil && !ok {
			err = errors.New("big-1 is gone")
		}
		return err
	})
	must("get big-1", func() error {
		data, _, err := conn.Get(base + "/big-1")
		if err == nil && !bytes.Equal(data, big) {
			err = fmt.Errorf("big-1 holds %d bytes", len(data))
		}
		return err
	})
	fmt.Println("read big-1")
	must("create small", func() error { _, err := conn.Create(base+"/small", []byte("s"), 0, open); return err })
	must("delete small", func() error { return conn.Delete(base+"/small", -1) })
	fmt.Println("created and deleted small")
	must("delete big-1", func() error { return conn.Delete(base+"/big-1", -1) })
	must("create big-2 after the delete", func() error { _, err := conn.Create(base+"/big-2", big, 0, open); return err })
	fmt.Println("big-2 created once big-1 was deleted")

	if now := conn.SessionID(); now != session {
		fail("session changed from 0x%x to 0x%x", session, now)
	}
	if after := seen.seen(); len(after) != 0 {
		fail("session states seen after connecting: %v", after)
	}
	fmt.Printf("same session 0x%x, no disconnection\n", session)
	fmt.Println("ok")
}
