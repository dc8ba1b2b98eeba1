package client

import (
	"context"
	"net/http"
	"net/url"
)

// SetBearer makes every later request carry "Authorization: Bearer tok"
// (servo --as: a dev identity token for the local stack).
func (c *Client) SetBearer(tok string) {
	base := c.http.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc := *c.http
	hc.Transport = bearer{tok: tok, next: base}
	c.http = &hc
}

type bearer struct {
	tok  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.next.RoundTrip(r)
}

// Usage reads GET /v1/tenants/{tenant}/usage into v.
func (c *Client) Usage(ctx context.Context, tenant string, v any) ([]byte, error) {
	raw, _, err := c.Do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/usage", nil, v)
	return raw, err
}
