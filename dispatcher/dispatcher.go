// Package dispatcher is Servo's control API (docs/contract.md §9): submit
// tasks, read, list and cancel them, read their events, list runs, and
// report the sweeper's health and a tenant's usage, with the dashboard at
// /ui/ under the same access policy.
//
// [New] builds it as Servo deploys it — configured from the environment
// (the SERVO_* variables of docs/configuration.md) and served by Google's
// clients — for a process of your own, for example a Cloud Run service
// instead of the ServoAPI Cloud Function (package functions serves the
// same handler):
//
//	h, err := dispatcher.New(ctx)
//	if err != nil { ... }   // a missing or invalid variable is named
//	defer h.Close()
//	http.ListenAndServe(":8080", h)
//
// The implementation is internal/dispatcher; the routes, bodies, answers
// and error codes are docs/contract.md's.
package dispatcher

import (
	"context"
	"fmt"
	"net/http"

	"github.com/servo-dev/servo/internal/server"
)

// Handler is the control API, with the dashboard under /ui/.
type Handler struct {
	s *server.Server
}

// New returns the control API configured from the environment, with
// Google's clients (each emulator's when its *_EMULATOR_HOST is set).
// Close releases them.
func New(ctx context.Context) (*Handler, error) {
	s, err := server.OpenEnv(ctx)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	return &Handler{s: s}, nil
}

// ServeHTTP serves one request of the control API or the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.API.ServeHTTP(w, r) }

// Close delivers the events still held, then closes the clients.
func (h *Handler) Close() { h.s.Close() }
