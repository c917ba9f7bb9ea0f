package baton

// BaseURL is the sidecar's URL, for the tests' raw calls.
func BaseURL(c *Client) string { return c.base }
