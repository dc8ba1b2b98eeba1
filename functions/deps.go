// Package functions registers Servo's Cloud Functions with
// functions-framework-go: ServoAPI (HTTP, the control API), ServoCallbacks
// (HTTP, worker callbacks), ServoSweeper (CloudEvent from Pub/Sub),
// ServoClaim (HTTP, pull-pool claims) and ServoJobs (HTTP, the jobs
// dispatch endpoint, called by Cloud Tasks).
//
// It is thin wiring: on its first request an instance reads its
// configuration from the environment (config.FromEnv; the variables are
// documented in docs/configuration.md), makes Google's clients and builds
// the handlers with server.New, as the local stack does with its own
// configuration and the emulators' clients. A build that fails is retried
// by a later request once a backoff has passed (1 s, doubling up to 30 s);
// meanwhile requests are answered at once with 503 unavailable and a
// Retry-After, and concurrent requests share one build in flight.
package functions

import (
	"context"
	"fmt"
	"os"

	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/server"
)

// serverInit builds the instance's Server. A failed build (a Secret
// Manager or Firestore hiccup, a bad variable) is retried by a later
// request after a backoff (1 s doubling to 30 s), not kept for the
// instance's life.
var serverInit = newLazy(newServer)

// newServer builds the Server from the environment and Google's clients
// (server.Open), with telemetry set up first.
func newServer(ctx context.Context) (*server.Server, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("functions: %w: %w", server.ErrMisconfigured, err)
	}
	setupTelemetry(ctx, cfg.Project, cfg.ServiceName, cfg.TraceSampling)
	s, err := server.Open(ctx, cfg, dashboardConfig())
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	return s, nil
}
