// Package baton is a client for the Baton sidecar's localhost HTTP API (DESIGN §2): leader
// election in the shape of client-go's leaderelection, locks and semaphores held by a stream
// or a renewed lease with their fencing tokens, barriers, groups and the pod's event stream.
// Standard library only.
package baton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultAddress is where the injected sidecar listens.
const DefaultAddress = "127.0.0.1:4040"

// Client talks to one sidecar. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
	// StreamIdle is how long a stream may stay silent before it is taken as dead: the
	// sidecar sends `: keep-alive` every 10 s, so a longer silence means a hung sidecar or a
	// cut connection. Default 25 s.
	StreamIdle time.Duration
}

// Option configures a Client made by New.
type Option func(*Client)

// WithHTTPClient makes the client send every request with h (its Transport for tracing or
// tests, say). h's Timeout must be zero or longer than any wait and every stream's life: this
// client bounds each call itself, and a stream hold lives as long as the lock.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) { c.http = h }
}

// New returns a client of the sidecar at address ("HOST:PORT" or "http://HOST:PORT"); an
// empty address means $BATON_SIDECAR, else 127.0.0.1:4040.
func New(address string, opts ...Option) *Client {
	if address == "" {
		address = os.Getenv("BATON_SIDECAR")
	}
	if address == "" {
		address = DefaultAddress
	}
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		// Never through a proxy: the sidecar is on this pod's loopback.
		Proxy: nil,
	}
	c := &Client{
		base:       strings.TrimRight(address, "/"),
		http:       &http.Client{Transport: transport},
		StreamIdle: 25 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// callSlack bounds a plain call beyond the wait the sidecar was asked for: the sidecar answers
// within wait, so a longer silence is a hung sidecar, never a slow grant.
const callSlack = 10 * time.Second

// at is the operation's path for name (an election, lock, semaphore or barrier name).
func (o operation) at(name string) string {
	return strings.Replace(o.path, "{name}", url.PathEscape(name), 1)
}

func (c *Client) url(path string, query url.Values) string {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return u
}

// call sends one request of op for name and decodes a 2xx JSON answer into out (nil: ignore
// the body); an error answer becomes *Error.
func (c *Client) call(ctx context.Context, op operation, name string, query url.Values, wait time.Duration, out any) error {
	method, path := op.method, op.at(name)
	ctx, cancel := context.WithTimeout(ctx, wait+callSlack)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, query), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("baton: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("baton: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp.StatusCode, body)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("baton: %s %s: %w", method, path, err)
	}
	return nil
}

func decodeError(status int, body []byte) error {
	var envelope struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &envelope) != nil || envelope.Error.Code == "" {
		return &Error{Status: status, Code: http.StatusText(status), Message: strings.TrimSpace(string(body))}
	}
	return &Error{Status: status, Code: envelope.Error.Code, Message: envelope.Error.Message}
}

// stream opens op's text/event-stream for name; a refusal before the stream starts is an *Error.
func (c *Client) stream(ctx context.Context, op operation, name string, query url.Values) (*eventReader, error) {
	method, path := op.method, op.at(name)
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, query), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("baton: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, decodeError(resp.StatusCode, body)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("baton: %s %s: not an event stream (%s)", method, path, resp.Header.Get("Content-Type"))
	}
	return newEventReader(resp.Body, c.StreamIdle), nil
}

func seconds(d time.Duration) string {
	ms := d.Milliseconds()
	if ms%1000 == 0 {
		return fmt.Sprintf("%ds", ms/1000)
	}
	return fmt.Sprintf("%dms", ms)
}

// Time is an RFC 3339 instant of the API, zero when the sidecar sent null.
type Time struct{ time.Time }

// UnmarshalJSON reads an RFC 3339 string or null.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = parsed
	return nil
}

// Healthy reports whether the sidecar has a session with the ensemble (GET /readyz).
func (c *Client) Healthy(ctx context.Context) error {
	return c.call(ctx, opReadyz, "", nil, 0, nil)
}

var errStreamEnded = errors.New("baton: the sidecar ended the stream")
