package dispatcher

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
)

// An event stream lasts at most MaxStreamDuration (an hour by default,
// never more), even under an identity that never expires: then a last
// "expired" event (an unavailable error naming the duration) tells the
// client to open a new one, and the stream ends.
func TestStreamEndsAtItsLongestDuration(t *testing.T) {
	var until time.Time
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.MaxStreamDuration = 1500 * time.Millisecond
		c.Events = func(ctx context.Context, _ events.StreamOptions, ready func(), _ func(api.Event) error) error {
			until, _ = ctx.Deadline()
			ready()
			<-ctx.Done()
			return nil
		}
	}})
	if got := e.h.cfg.MaxStreamDuration; got != 1500*time.Millisecond {
		t.Fatalf("MaxStreamDuration %v", got)
	}
	opened := time.Now()
	resp, err := http.Get(e.api.URL + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "event: expired\ndata: {\"error\":\"unavailable\"") ||
		!strings.Contains(string(body), "longest duration (1.5s)") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if until.IsZero() || until.Sub(opened) > 1500*time.Millisecond+time.Second {
		t.Fatalf("the stream's deadline %v, opened %v", until, opened)
	}

	for _, d := range []time.Duration{0, 2 * events.MaxStreamDuration} {
		h, err := newHandler(Config{Store: e.st, Enqueuer: e.enq, MaxStreamDuration: d})
		if err != nil {
			t.Fatal(err)
		}
		if h.cfg.MaxStreamDuration != events.MaxStreamDuration {
			t.Errorf("MaxStreamDuration %v gives %v, want %v", d, h.cfg.MaxStreamDuration, events.MaxStreamDuration)
		}
	}
}
