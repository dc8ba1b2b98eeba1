package functions

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/pull"
)

func init() { functions.HTTP("ServoClaim", ServoClaim) }

// claimInit builds the claim handler; see dependencies for retries.
var claimInit = newLazy(func(ctx context.Context) (http.Handler, error) {
	h, err := newServoClaim(ctx)
	if err != nil {
		logs.Default().ErrorContext(ctx, "ServoClaim: configuration failed; a later request retries", "error", err)
	}
	return h, err
})

// ServoClaim is the pull pools' claim function (HTTP): POST
// /v1/pools/{pool}/claim, served by pull.NewHandler. Its invoker role is
// granted only to the pools' service accounts (Terraform), and the handler
// verifies the caller's Google ID token (audience SERVO_CLAIM_AUDIENCE, the
// function's URL) and checks its e-mail against the pool's serviceAccounts.
// The local stack's identity header is never accepted here. When the
// dependencies cannot be built it answers 503 unavailable, disposition
// RETRY, with a Retry-After.
func ServoClaim(w http.ResponseWriter, r *http.Request) {
	h, err := claimInit.get(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter(err)/time.Second)))
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(api.ClaimResponse{
			Disposition: api.Retry, ServerTime: time.Now().UTC(), Error: api.CodeUnavailable,
			Message: "the claim service is not configured or cannot reach its dependencies; retry",
		})
		return
	}
	h.ServeHTTP(w, r)
}

func newServoClaim(ctx context.Context) (http.Handler, error) {
	aud := os.Getenv("SERVO_CLAIM_AUDIENCE")
	if aud == "" {
		return nil, errors.New("functions: set SERVO_CLAIM_AUDIENCE to the ServoClaim URL (the audience of the callers' ID tokens)")
	}
	d, err := dependencies(ctx)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(pull.ClaimPath, pull.NewHandler(pull.Config{
		Store: d.Store, Enqueuer: d.Enqueuer, Transport: d.Pools, Identity: pull.IDToken(aud, nil),
		Logger: d.Logger, Project: d.Project,
	}))
	return mux, nil
}
