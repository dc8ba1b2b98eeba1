package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/worker"
)

// PullConfig.ThenPools (docs/contract.md §10): further pools to claim
// from, in priority order after Pool, sent as the claim body's thenPools.

// rawClaimServer is a claim endpoint for the pool "gpu" that hands each
// claim's raw body to bodies (without blocking) and answers it with
// answer.
func rawClaimServer(t *testing.T, bodies chan<- []byte, answer func(w http.ResponseWriter)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/pools/gpu/claim" {
			t.Errorf("claim %s %s, want POST /v1/pools/gpu/claim", r.Method, r.URL.Path)
			http.Error(w, "bad claim path "+r.URL.Path, http.StatusNotFound)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading the claim body: %v", err)
		}
		select {
		case bodies <- b:
		default:
		}
		answer(w)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPullThenPoolsInClaimBody(t *testing.T) {
	for _, tc := range []struct {
		name      string
		thenPools []string
	}{
		{"without", nil},
		{"empty", []string{}},
		{"in order", []string{"spot", "cpu", "a/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bodies := make(chan []byte, 64)
			cs := rawClaimServer(t, bodies, emptyClaim)
			logs := newLogRecorder(t)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			cfg := worker.PullConfig{API: cs.URL, Pool: "gpu", ThenPools: tc.thenPools, MaxWait: 50 * time.Millisecond, Options: pullOptions(logs)}
			done := make(chan error, 1)
			go func() {
				done <- worker.Pull(ctx, cfg, func(context.Context, *worker.Task) (any, error) {
					t.Error("the Func ran: no claim was answered with an attempt")
					return nil, nil
				})
			}()
			// Two claims: the option is on every claim, not only the first.
			var got [][]byte
			for len(got) < 2 {
				select {
				case b := <-bodies:
					got = append(got, b)
				case <-time.After(20 * time.Second):
					t.Fatalf("%d claims were made, want 2", len(got))
				}
			}
			stop()
			waitPull(t, done, 20*time.Second, "an empty long-poll")
			for i, b := range got {
				var keys map[string]json.RawMessage
				if err := json.Unmarshal(b, &keys); err != nil {
					t.Fatalf("claim %d: body %s: %v", i+1, b, err)
				}
				var req api.ClaimRequest
				if err := json.Unmarshal(b, &req); err != nil {
					t.Fatalf("claim %d: body %s: %v", i+1, b, err)
				}
				if req.WorkerID != "w-1" || req.MaxWaitMs == nil || *req.MaxWaitMs != 50 {
					t.Errorf("claim %d: body %s, want workerId w-1 and maxWaitMs 50", i+1, b)
				}
				raw, ok := keys["thenPools"]
				if len(tc.thenPools) == 0 {
					if ok {
						t.Errorf("claim %d: body %s has thenPools, want no such key", i+1, b)
					}
					continue
				}
				var pools []string
				if !ok || json.Unmarshal(raw, &pools) != nil || !slices.Equal(pools, tc.thenPools) {
					t.Errorf("claim %d: body %s, want thenPools %q in that order", i+1, b, tc.thenPools)
				}
				if !slices.Equal(req.ThenPools, tc.thenPools) {
					t.Errorf("claim %d: api.ClaimRequest.ThenPools %q, want %q", i+1, req.ThenPools, tc.thenPools)
				}
			}
		})
	}
}

// Servo's refusal of the option (a bad pool list, or a pool the caller may
// not claim from) ends Pull with the *api.Error, naming the field.
func TestPullThenPoolsRefused(t *testing.T) {
	bodies := make(chan []byte, 64)
	cs := rawClaimServer(t, bodies, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"error": "invalid_request", "field": "thenPools[1]",
			"message": "a pool named twice", "disposition": api.Rejected, "serverTime": time.Now().UTC()})
	})
	logs := newLogRecorder(t)
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(context.Background(), worker.PullConfig{API: cs.URL, Pool: "gpu", ThenPools: []string{"cpu", "cpu"}, MaxWait: 50 * time.Millisecond, Options: pullOptions(logs)},
			func(context.Context, *worker.Task) (any, error) { return nil, nil })
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Pull did not return after a refused claim")
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "invalid_request" || ae.Field != "thenPools[1]" {
		t.Fatalf("Pull: %v, want *api.Error 400 invalid_request on thenPools[1]", err)
	}
	if n := len(bodies); n != 1 {
		t.Fatalf("%d claims, want 1: a refused claim is not retried", n)
	}
}
