package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/servo-dev/servo/api"
)

// ErrStreamExpired: the API ended an event stream because the identity
// token that opened it expired; open a new one (with a fresh token).
var ErrStreamExpired = errors.New("client: the event stream's identity token expired")

// StreamEvents reads the event stream GET /v1/events (q: tenantId, taskId,
// runId): the transitions the caller's roles let it view, published from
// the answer on. It calls ready once the stream is open, then each for
// every event, until ctx ends (nil), the API ends the stream (nil, or
// ErrStreamExpired when the token that opened it expired), or each fails
// (its error).
func (c *Client) StreamEvents(ctx context.Context, q url.Values, ready func(), each func(api.Event) error) error {
	path := "/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	hc := *c.http
	hc.Timeout = 0 // a stream lasts; ctx ends it
	res, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		e := &api.Error{Status: res.StatusCode}
		_ = json.Unmarshal(raw, e)
		return e
	}
	if ready != nil {
		ready()
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var kind string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if kind == "expired" {
				return ErrStreamExpired
			}
			if kind == "transition" && data.Len() > 0 {
				var e api.Event
				if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
					return fmt.Errorf("GET %s: decode event: %w", path, err)
				}
				if err := each(e); err != nil {
					return err
				}
			}
			kind = ""
			data.Reset()
		case strings.HasPrefix(line, "event:"):
			kind = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
