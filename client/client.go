// Package client is a Go client for Servo's control API (docs/contract.md,
// "The control API"), used by the servo CLI. Its answers are the wire types
// of package api; an error answer is an *[api.Error].
//
// The client adds no credentials of its own. Against a loopback http://
// API (the local stack) none are needed; a deployed API sits behind Cloud
// Run's IAM, so pass an HTTP client that adds an ID token whose audience is
// the API's URL, for example one from google.golang.org/api/idtoken:
//
//	hc, err := idtoken.NewClient(ctx, "https://servo-api-….run.app")
//	…
//	c, err := client.New("https://servo-api-….run.app", client.WithHTTPClient(hc))
//
// The package depends on the standard library and package api only.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
)

// APIEnv names the variable holding the API's base URL.
const APIEnv = "SERVO_API"

// Client calls the control API.
type Client struct {
	base string
	http *http.Client
}

// An Option configures a Client.
type Option func(*Client)

// defaultTransport is http.DefaultTransport's, keeping up to 64 idle
// connections per host where it keeps 2, so that a program submitting
// from many goroutines reuses its connections rather than opening one (and
// making a TLS handshake) for most requests.
var defaultTransport = sync.OnceValue(func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
})

// WithHTTPClient sends the requests through hc (default: an http.Client
// with a 60 s timeout and no credentials, whose transport is
// http.DefaultTransport's but keeps 64 idle connections per host, shared
// by the process's clients).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// New returns a client for the API at base (e.g. http://127.0.0.1:8080).
func New(base string, opts ...Option) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api url %q must be http(s)://host[:port]", base)
	}
	c := &Client{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: 60 * time.Second, Transport: defaultTransport()}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Do sends a request and decodes a 2xx JSON answer into out (if non-nil).
// It returns the raw body too, for --json output.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) ([]byte, int, error) {
	var body io.Reader
	if in != nil {
		switch v := in.(type) {
		case []byte:
			body = bytes.NewReader(v)
		default:
			b, err := json.Marshal(v)
			if err != nil {
				return nil, 0, err
			}
			body = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, res.StatusCode, err
	}
	if res.StatusCode/100 != 2 {
		e := &api.Error{Status: res.StatusCode}
		_ = json.Unmarshal(raw, e)
		return raw, res.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, res.StatusCode, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return raw, res.StatusCode, nil
}

// Submit posts a task (a JSON object as docs/contract.md §9.2 describes).
func (c *Client) Submit(ctx context.Context, body []byte) (api.SubmitResponse, []byte, error) {
	var r api.SubmitResponse
	raw, _, err := c.Do(ctx, http.MethodPost, "/v1/tasks", body, &r)
	return r, raw, err
}

// Get reads a task with its attempts.
func (c *Client) Get(ctx context.Context, id string) (api.Task, []byte, error) {
	var t api.Task
	raw, _, err := c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, &t)
	return t, raw, err
}

// List reads one page of tasks.
func (c *Client) List(ctx context.Context, q url.Values) (api.ListResponse, []byte, error) {
	var r api.ListResponse
	raw, _, err := c.Do(ctx, http.MethodGet, "/v1/tasks?"+q.Encode(), nil, &r)
	return r, raw, err
}

// ListAll reads every page.
func (c *Client) ListAll(ctx context.Context, q url.Values) ([]api.Task, error) {
	var all []api.Task
	q = cloneValues(q)
	for {
		page, _, err := c.List(ctx, q)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Tasks...)
		if page.NextPageToken == "" {
			return all, nil
		}
		q.Set("pageToken", page.NextPageToken)
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Cancel asks for a task's cancellation.
func (c *Client) Cancel(ctx context.Context, id, reason string) (api.Task, []byte, error) {
	var t api.Task
	raw, _, err := c.Do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", map[string]string{"reason": reason}, &t)
	return t, raw, err
}

// Counts reads how many tasks matching q (tenantId, runId, worker) are in
// each state (GET /v1/tasks:counts; count aggregations, no task is read).
func (c *Client) Counts(ctx context.Context, q url.Values) (api.CountsResponse, error) {
	var r api.CountsResponse
	_, _, err := c.Do(ctx, http.MethodGet, "/v1/tasks:counts?"+q.Encode(), nil, &r)
	return r, err
}

// Runs reads one page of runs, newest first (GET /v1/runs).
func (c *Client) Runs(ctx context.Context, q url.Values) (api.RunsResponse, error) {
	var r api.RunsResponse
	_, _, err := c.Do(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), nil, &r)
	return r, err
}

// RunCounts is a run with how many of its tasks are in each state.
type RunCounts struct {
	api.Run
	api.CountsResponse
}

// RunsWithCounts reads one page of runs (q as for Runs) and each run's
// counts, concurrently: one run query and one counts request per run.
func (c *Client) RunsWithCounts(ctx context.Context, q url.Values) ([]RunCounts, error) {
	page, err := c.Runs(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]RunCounts, len(page.Runs))
	errs := make([]error, len(page.Runs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, r := range page.Runs {
		out[i].Run = r
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i].CountsResponse, errs[i] = c.Counts(ctx, url.Values{"runId": {r.RunID}})
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// TaskEvents reads a task's recorded transitions, in seq order
// (GET /v1/tasks/{id}/events).
func (c *Client) TaskEvents(ctx context.Context, id string) ([]api.Event, error) {
	var r api.EventsResponse
	_, _, err := c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id)+"/events", nil, &r)
	return r.Events, err
}

// RunEvents reads the recorded transitions of a run's tasks, each task's in
// seq order (GET /v1/runs/{runId}/events).
func (c *Client) RunEvents(ctx context.Context, runID string) ([]api.Event, error) {
	var r api.EventsResponse
	_, _, err := c.Do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/events", nil, &r)
	return r.Events, err
}
