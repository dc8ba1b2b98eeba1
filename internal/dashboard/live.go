package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/store"
)

// errTooManyViews: the hub already refreshes MaxViews views.
var errTooManyViews = errors.New("dashboard: too many live views")

// errTooManyForCaller: the caller already holds MaxViewsPerCaller distinct
// views or MaxStreamsPerCaller streams.
var errTooManyForCaller = errors.New("dashboard: too many live views for this caller")

// hub runs one refresher per live view, shared by every tab that shows it:
// while a view has subscribers its refresher reads and renders it every
// view.every and sends the fragment to them when it changed. The store's
// cost is then bounded by the number of distinct views open (at most
// maxViews), whatever the number of tabs.
type hub struct {
	mu       sync.Mutex
	topics   map[string]*topic
	maxViews int
	// perCaller bounds the distinct views one caller holds open, and
	// perCallerStreams its open streams: one caller cannot take every
	// view (or a process's connections) from the others.
	perCaller, perCallerStreams int
	// held counts each caller's open streams per view key.
	held map[string]map[string]int
	log  *slog.Logger
	// reads counts view reads (tests check the sharing).
	reads int64
}

// topic is one live view and its subscribers.
type topic struct {
	subs map[chan string]struct{}
	// last is the latest fragment sent.
	last string
}

func newHub(maxViews, perCaller, perCallerStreams int, log *slog.Logger) *hub {
	return &hub{topics: map[string]*topic{}, maxViews: maxViews, perCaller: perCaller, perCallerStreams: perCallerStreams,
		held: map[string]map[string]int{}, log: log}
}

// subscribe adds caller's subscriber to v's topic, starting its refresher
// when it is the first. The channel holds the latest fragment not yet
// taken. A caller past its own bounds gets errTooManyForCaller, whatever
// the others hold; past the hub's bound, errTooManyViews.
func (h *hub) subscribe(v view, caller string, render func(any) (string, error)) (chan string, func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	mine := h.held[caller]
	streams := 0
	for _, n := range mine {
		streams += n
	}
	if (mine[v.key] == 0 && len(mine) >= h.perCaller) || streams >= h.perCallerStreams {
		return nil, nil, errTooManyForCaller
	}
	t, ok := h.topics[v.key]
	if !ok {
		if len(h.topics) >= h.maxViews {
			return nil, nil, errTooManyViews
		}
		t = &topic{subs: map[chan string]struct{}{}}
		h.topics[v.key] = t
		go h.refresh(v, t, render)
	}
	ch := make(chan string, 1)
	t.subs[ch] = struct{}{}
	if t.last != "" {
		ch <- t.last
	}
	if mine == nil {
		mine = map[string]int{}
		h.held[caller] = mine
	}
	mine[v.key]++
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(t.subs, ch)
		if mine[v.key]--; mine[v.key] <= 0 {
			delete(mine, v.key)
		}
		if len(mine) == 0 {
			delete(h.held, caller)
		}
	}, nil
}

// refresh re-reads v every v.every until its topic has no subscriber.
func (h *hub) refresh(v view, t *topic, render func(any) (string, error)) {
	tick := time.NewTicker(v.every)
	defer tick.Stop()
	for {
		ctx, cancel := withLoadTimeout(context.Background())
		data, err := v.load(ctx)
		cancel()
		var frag string
		if err == nil {
			frag, err = render(data)
		}
		h.mu.Lock()
		h.reads++
		if err != nil {
			h.log.Warn("dashboard: live view read failed", "view", v.key, "error", err)
		} else if frag != t.last {
			t.last = frag
			for ch := range t.subs {
				select { // keep only the newest fragment
				case <-ch:
				default:
				}
				ch <- frag
			}
		}
		h.mu.Unlock()
		<-tick.C
		h.mu.Lock()
		if len(t.subs) == 0 {
			delete(h.topics, v.key)
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// streamRetryMs is the reconnection delay the stream asks browsers for.
const streamRetryMs = 2000

// live serves GET /ui/live?view=PATH: a server-sent event stream of the
// view's live fragment, sent when it changes.
func (d *Dashboard) live(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("view")
	path, query, _ := strings.Cut(key, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		http.Error(w, "bad view", http.StatusBadRequest)
		return
	}
	v, err := d.resolve(path, q, callerOf(r.Context()))
	switch {
	case errors.Is(err, errForbidden):
		http.Error(w, "your roles do not let you see this view", http.StatusForbidden)
		return
	case err != nil:
		http.Error(w, "no such view", http.StatusNotFound)
		return
	}
	// A view the caller may not see (another tenant's task or run) is
	// refused now, not streamed empty.
	ctx, cancel := withLoadTimeout(r.Context())
	_, err = v.load(ctx)
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "no such view", http.StatusNotFound)
		return
	}
	ch, unsubscribe, err := d.hub.subscribe(v, callerOf(r.Context()).bucket(r), func(data any) (string, error) { return d.fragment(v.page, data) })
	switch {
	case errors.Is(err, errTooManyForCaller):
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("you have too many live views open (at most %d views, %d streams); close some tabs", d.cfg.MaxViewsPerCaller, d.cfg.MaxStreamsPerCaller),
			http.StatusTooManyRequests)
		return
	case err != nil:
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many live views; retry later", http.StatusServiceUnavailable)
		return
	}
	defer unsubscribe()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", streamRetryMs)
	_ = rc.Flush()
	keepalive := time.NewTicker(25 * time.Second)
	defer keepalive.Stop()
	// The stream lasts no longer than the caller's token: at its expiry
	// it ends, and the browser's reconnection meets the sign-in answer.
	var expired <-chan time.Time
	if exp, ok := auth.Expiry(callerOf(r.Context()).credential); ok {
		tm := time.NewTimer(time.Until(exp))
		defer tm.Stop()
		expired = tm.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-expired:
			fmt.Fprint(w, "event: expired\ndata: sign in again\n\n")
			_ = rc.Flush()
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
		case frag := <-ch:
			if _, err := fmt.Fprint(w, sseEvent("view", frag)); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// sseLines turns every line ending of the event stream format (CRLF, CR,
// LF) into LF.
var sseLines = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// sseEvent is one server-sent event: its name, then each line of data as
// a data line. SSE ends a line at CRLF, LF or a bare CR: each is a line
// break here, so no text in data (a worker's message) can end its data
// line early and start a field of its own.
func sseEvent(name, data string) string {
	var b strings.Builder
	b.WriteString("event: " + name + "\n")
	for line := range strings.SplitSeq(sseLines.Replace(data), "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}
