package baton

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// event is one server-sent event: its name and its data (JSON in every stream of the API).
type event struct {
	Name string
	Data json.RawMessage
}

func (e event) decode(out any) error {
	if err := json.Unmarshal(e.Data, out); err != nil {
		return fmt.Errorf("baton: event %s: %w", e.Name, err)
	}
	return nil
}

// eventReader reads a text/event-stream, and closes it when nothing (not even a keep-alive
// comment) arrived for idle: a stream read without a timeout would wait forever on a hung
// sidecar or a connection cut without a reset.
type eventReader struct {
	body    io.ReadCloser
	lines   *bufio.Reader
	idle    time.Duration
	mu      sync.Mutex
	timer   *time.Timer
	expired bool
}

var errIdle = errors.New("baton: the stream fell silent (no keep-alive)")

func newEventReader(body io.ReadCloser, idle time.Duration) *eventReader {
	r := &eventReader{body: body, lines: bufio.NewReader(body), idle: idle}
	r.timer = time.AfterFunc(idle, func() {
		r.mu.Lock()
		r.expired = true
		r.mu.Unlock()
		body.Close()
	})
	return r
}

// next returns the next event; io.EOF when the sidecar ended the stream.
func (r *eventReader) next() (event, error) {
	var ev event
	var data []string
	for {
		line, err := r.lines.ReadString('\n')
		if err != nil {
			r.mu.Lock()
			expired := r.expired
			r.mu.Unlock()
			if expired {
				return ev, errIdle
			}
			if errors.Is(err, io.EOF) && line == "" && ev.Name == "" && len(data) == 0 {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("baton: reading the stream: %w", err)
		}
		r.timer.Reset(r.idle)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.Name != "" || len(data) > 0 {
				if ev.Name == "" {
					ev.Name = "message"
				}
				ev.Data = json.RawMessage(strings.Join(data, "\n"))
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			// A comment: `: keep-alive`, `: lagged N`.
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				ev.Name = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

func (r *eventReader) close() {
	r.timer.Stop()
	r.body.Close()
}
