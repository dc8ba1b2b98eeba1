package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/task"
)

// eventsPath is the route of the event stream.
const eventsPath = "/v1/events"

// streamParams are the query parameters GET /v1/events accepts.
var streamParams = map[string]bool{"tenantId": true, "taskId": true, "runId": true}

// streamKeepalive is how often an idle stream sends a comment, so that
// proxies keep it open.
const streamKeepalive = 25 * time.Second

// eventStream serves GET /v1/events?tenantId=&taskId=&runId=: the
// transition events published from the answer on, of the tenants the
// caller views (viewer role), as server-sent events ("id: eventId",
// "event: transition", "data: " the event's JSON), until the caller
// leaves. A named tenant needs the viewer role on it (403); a named task
// is read first and needs the viewer role on its tenant (404, 403); a run
// is filtered to the caller's tenants' tasks.
func (h *handler) eventStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if !streamParams[k] {
			h.fail(w, r, invalid(k, "is not a parameter of GET /v1/events (tenantId, taskId, runId)"))
			return
		}
	}
	opts := events.StreamOptions{TenantID: q.Get("tenantId"), TaskID: q.Get("taskId"), RunID: q.Get("runId")}
	if opts.TaskID != "" {
		if !task.ValidID(opts.TaskID, task.TaskIDPrefix) {
			h.fail(w, r, invalid("taskId", "must be a Servo task id (%s followed by a ULID)", task.TaskIDPrefix))
			return
		}
		t, err := h.cfg.Store.GetTask(r.Context(), opts.TaskID)
		if err != nil {
			h.storeError(w, r, err, "taskId", opts.TaskID)
			return
		}
		if e := h.allowed(r, t.TenantID, auth.View); e != nil {
			h.fail(w, r, e)
			return
		}
	}
	if opts.RunID != "" && !task.ValidID(opts.RunID, task.RunIDPrefix) {
		h.fail(w, r, invalid("runId", "must be a Servo run id (%s followed by a ULID)", task.RunIDPrefix))
		return
	}
	if opts.TenantID != "" {
		if e := h.allowed(r, opts.TenantID, auth.View); e != nil {
			e.body.Field = "tenantId"
			h.fail(w, r, e)
			return
		}
	} else if all, tenants := h.cfg.Access.Tenants(auth.Principal(r.Context()), auth.View); !all {
		if len(tenants) == 0 {
			h.fail(w, r, h.allowed(r, "", auth.View))
			return
		}
		opts.Tenants = tenants
	}

	// Each stream holds a Pub/Sub subscription and a connection: bounded
	// per caller and per instance.
	release, ok := h.streams.take(auth.LimitKey(auth.Principal(r.Context()), r.RemoteAddr), h.cfg.MaxStreamsPerCaller, h.cfg.MaxStreams)
	if !ok {
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeQuotaExceeded,
			Message: fmt.Sprintf("too many event streams open (at most %d per caller and %d per instance); close one or retry later", h.cfg.MaxStreamsPerCaller, h.cfg.MaxStreams)})
		return
	}
	defer release()

	rc := http.NewResponseController(w)
	var (
		mu      sync.Mutex
		started bool
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	defer func() { close(stop); wg.Wait() }()
	ready := func() {
		mu.Lock()
		defer mu.Unlock()
		hd := w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "retry: 2000\n\n")
		_ = rc.Flush()
		started = true
		wg.Go(func() {
			tick := time.NewTicker(streamKeepalive)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					mu.Lock()
					fmt.Fprint(w, ": keepalive\n\n")
					_ = rc.Flush()
					mu.Unlock()
				}
			}
		})
	}
	each := func(e api.Event) error {
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, "id: %s\nevent: transition\ndata: %s\n\n", e.EventID, data); err != nil {
			return err
		}
		return rc.Flush()
	}
	// The stream lasts no longer than the identity that opened it, nor
	// than events.MaxStreamDuration: then a last "expired" event tells the
	// client to open a new stream (with a fresh token), and the stream
	// ends.
	ctx := r.Context()
	cred, _, _ := h.cfg.Identity.Credential(r.Header)
	end, tokenEnds := auth.Expiry(cred)
	if longest := time.Now().Add(h.cfg.MaxStreamDuration); !tokenEnds || longest.Before(end) {
		end, tokenEnds = longest, false
	}
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	err := h.cfg.Events(ctx, opts, ready, each)
	mu.Lock()
	defer mu.Unlock()
	if started && ctx.Err() != nil && r.Context().Err() == nil {
		code, msg := api.CodeUnauthenticated, "the identity token has expired: open a new stream with a fresh token"
		if !tokenEnds {
			code, msg = api.CodeUnavailable, fmt.Sprintf("the stream reached its longest duration (%s): open a new stream", h.cfg.MaxStreamDuration)
		}
		data, _ := json.Marshal(api.Error{Code: code, Message: msg})
		fmt.Fprintf(w, "event: expired\ndata: %s\n\n", data)
		_ = rc.Flush()
		return
	}
	if err != nil && !started {
		h.log.WarnContext(r.Context(), "event stream failed", "error", err)
		writeError(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable, Message: "the events topic is unavailable; retry"})
	}
}

// streamCount counts open event streams, in all and by caller.
type streamCount struct {
	mu  sync.Mutex
	all int
	by  map[string]int
}

// take counts a stream of caller unless caller holds perCaller or the
// instance holds max already; release uncounts it.
func (c *streamCount) take(caller string, perCaller, max int) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all >= max || c.by[caller] >= perCaller {
		return nil, false
	}
	c.all++
	c.by[caller]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.all--
		if c.by[caller]--; c.by[caller] <= 0 {
			delete(c.by, caller)
		}
	}, true
}
