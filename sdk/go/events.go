package baton

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// Event is one event of the pod's stream (GET /events), or Disconnected from this client.
type Event struct {
	// Name: state, leader, granted, lost, released, stepping-down; or Disconnected when the
	// stream to the sidecar broke (nothing known is current any more: stop acting until the
	// next state event, which the reopened stream starts with).
	Name string
	// State is set on state events: CONNECTED, SUSPENDED (stop acting: what is held is
	// uncertain), LOST; a new Generation is a new session.
	State *SessionState
	// Leader is set on leader events.
	Leader *LeaderInfo
	// Data is the event's JSON as sent (grants, lost and released locks, stepping-down).
	Data json.RawMessage
	// Err is why the stream broke, on Disconnected.
	Err error
}

// SessionState is the data of a state event.
type SessionState struct {
	State      string `json:"state"`
	Generation int64  `json:"generation"`
}

// Disconnected is the name of the event this client adds when the stream breaks.
const Disconnected = "disconnected"

// Events follows the pod's event stream until ctx is done, reopening it when it breaks (after
// an event named Disconnected). The channel closes when ctx is done.
func (c *Client) Events(ctx context.Context) <-chan Event {
	out := make(chan Event, 16)
	go func() {
		defer close(out)
		backoff := 100 * time.Millisecond
		send := func(e Event) bool {
			select {
			case out <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for ctx.Err() == nil {
			stream, err := c.stream(ctx, opEvents, "", nil)
			if err == nil {
				backoff = 100 * time.Millisecond
				for {
					var ev event
					ev, err = stream.next()
					if err != nil {
						break
					}
					e := Event{Name: ev.Name, Data: ev.Data}
					switch ev.Name {
					case "state":
						e.State = new(SessionState)
						_ = ev.decode(e.State)
					case "leader":
						e.Leader = new(LeaderInfo)
						_ = ev.decode(e.Leader)
					}
					if !send(e) {
						break
					}
				}
				stream.close()
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, io.EOF) {
				err = errStreamEnded
			}
			if !send(Event{Name: Disconnected, Err: err}) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
	return out
}
