package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/server"
)

// entry is an HTTP entry point: one of the Server's handlers, picked once
// the Server is built. While it cannot be, each request is answered 503
// with a Retry-After (when the next build may run) and the entry point's
// own JSON body.
type entry struct {
	init *lazy[http.Handler]
	// contentType and noStore are the 503 answer's headers; body its body
	// for the build's error.
	contentType string
	noStore     bool
	body        func(err error) any
}

// newEntry returns the entry point named name that serves what pick
// returns. A failed build (the Server's or pick's) is logged.
func newEntry(name string, pick func(context.Context, *server.Server) (http.Handler, error), contentType string, noStore bool, body func(error) any) *entry {
	return &entry{
		init: newLazy(func(ctx context.Context) (http.Handler, error) {
			s, err := serverInit.get(ctx)
			var h http.Handler
			if err == nil {
				h, err = pick(ctx, s)
			}
			if err != nil {
				logs.Default().ErrorContext(ctx, name+": configuration failed; a later request retries", "error", err)
			}
			return h, err
		}),
		contentType: contentType, noStore: noStore, body: body,
	}
}

func (e *entry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, err := e.init.get(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", e.contentType)
		if e.noStore {
			w.Header().Set("Cache-Control", "no-store")
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter(err)/time.Second)))
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(e.body(err))
		return
	}
	h.ServeHTTP(w, r)
}
