package baton_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"baton.dev/baton"
)

// Raw calls beside the client, for what a test does behind its back.

func baseURL(c *baton.Client) string { return baton.BaseURL(c) }

func getJSON(c *baton.Client, path string, out any) error {
	resp, err := http.Get(baseURL(c) + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func deleteToken(c *baton.Client, path string, token int64) error {
	req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("%s%s?token=%d", baseURL(c), path, token), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("DELETE %s: %s", path, resp.Status)
	}
	return nil
}

// renewalCounter is a reverse proxy in front of a sidecar that counts lease renewals.
type renewalCounter struct {
	addr     string
	renewals atomic.Int64
}

func countRenewals(t *testing.T, sidecar string) *renewalCounter {
	t.Helper()
	target, _ := url.Parse("http://" + sidecar)
	rc := &renewalCounter{}
	forward := httputil.NewSingleHostReverseProxy(target)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/renew") {
			rc.renewals.Add(1)
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	rc.addr = strings.TrimPrefix(server.URL, "http://")
	return rc
}
