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

	"github.com/servo-dev/servo/internal/store"
)

// errTooManyViews: the hub already refreshes MaxViews views.
var errTooManyViews = errors.New("dashboard: too many live views")

// hub runs one refresher per live view, shared by every tab that shows it:
// while a view has subscribers its refresher reads and renders it every
// view.every and sends the fragment to them when it changed. The store's
// cost is then bounded by the number of distinct views open (at most
// maxViews), whatever the number of tabs.
type hub struct {
	mu       sync.Mutex
	topics   map[string]*topic
	maxViews int
	log      *slog.Logger
	// reads counts view reads (tests check the sharing).
	reads int64
}

// topic is one live view and its subscribers.
type topic struct {
	subs map[chan string]struct{}
	// last is the latest fragment sent.
	last string
}

func newHub(maxViews int, log *slog.Logger) *hub {
	return &hub{topics: map[string]*topic{}, maxViews: maxViews, log: log}
}

// subscribe adds a subscriber to v's topic, starting its refresher when it
// is the first. The channel holds the latest fragment not yet taken.
func (h *hub) subscribe(v view, render func(any) (string, error)) (chan string, func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
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
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(t.subs, ch)
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
	ch, unsubscribe, err := d.hub.subscribe(v, func(data any) (string, error) { return d.fragment(v.page, data) })
	if err != nil {
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
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
		case frag := <-ch:
			var b strings.Builder
			b.WriteString("event: view\n")
			for line := range strings.SplitSeq(frag, "\n") {
				b.WriteString("data: ")
				b.WriteString(strings.TrimSuffix(line, "\r"))
				b.WriteString("\n")
			}
			b.WriteString("\n")
			if _, err := fmt.Fprint(w, b.String()); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
