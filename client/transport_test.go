package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/servo-dev/servo/client"
)

// TestDefaultClientReusesConnections: a program calling the API from 16
// goroutines at once, burst after burst, opens its connections in the
// first burst and reuses them (http.DefaultTransport keeps 2 idle per
// host: each later burst opened some 14 more).
func TestDefaultClientReusesConnections(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"taskId":"task_1","state":"QUEUED"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	const callers, bursts = 16, 4
	for range bursts {
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				if _, _, err := c.Get(context.Background(), "task_1"); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n := opened.Load(); n > callers {
		t.Errorf("%d connections opened for %d bursts of %d concurrent calls, want at most %d (the first burst's)", n, bursts, callers, callers)
	}
}
