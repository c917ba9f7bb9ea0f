package baton

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// Members is the answer of GET /members/NAME: the live members of an election in queue order
// (the first leads), and a version that changes when they do.
type Members struct {
	Election string   `json:"election"`
	Version  string   `json:"version"`
	Members  []Member `json:"members"`
}

// Member is one candidate of an election.
type Member struct {
	Identity string `json:"identity"`
	Address  string `json:"address"`
	Pod      string `json:"pod"`
	Since    Time   `json:"since"`
	Token    int64  `json:"token"`
	Leader   bool   `json:"leader"`
	Node     string `json:"node"`
}

// Members lists the live members of election now.
func (c *Client) Members(ctx context.Context, election string) (Members, error) {
	var m Members
	err := c.call(ctx, opMembers, election, nil, 0, &m)
	return m, err
}

// WaitMembers answers once the members differ from version, or after wait with the same ones.
func (c *Client) WaitMembers(ctx context.Context, election, version string, wait time.Duration) (Members, error) {
	var m Members
	q := url.Values{paramWait: {seconds(wait)}, paramVersion: {version}}
	err := c.call(ctx, opMembers, election, q, wait, &m)
	return m, err
}

// Barrier enters barrier name and returns once parties pods are in (nil), or ErrNotPassed
// when wait runs out. The pod has left the barrier when it returns, so name can be reused.
func (c *Client) Barrier(ctx context.Context, name string, parties int, wait time.Duration) error {
	q := url.Values{paramParties: {strconv.Itoa(parties)}, paramWait: {seconds(wait)}}
	return c.call(ctx, opBarrier, name, q, wait, nil)
}
