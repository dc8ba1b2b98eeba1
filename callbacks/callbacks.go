// Package callbacks serves the worker callbacks of docs/contract.md §4,
// each authenticated by the attempt's task token and applied to the task
// in one Firestore transaction through the state machine:
//
//	POST /v1/tasks/{taskId}/started
//	POST /v1/tasks/{taskId}/heartbeat
//	POST /v1/tasks/{taskId}/completed
//
// [New] builds the handler as Servo deploys it — configured from the
// environment (the SERVO_* variables of docs/configuration.md) and served
// by Google's clients — for a process of your own, for example a Cloud Run
// service instead of the ServoCallbacks Cloud Function (package functions
// serves the same handler):
//
//	h, err := callbacks.New(ctx)
//	if err != nil { ... }   // a missing or invalid variable is named
//	defer h.Close()
//	http.ListenAndServe(":8080", h)
//
// The implementation is internal/callbacks; the order of checks, the
// answers and the retries are docs/contract.md's.
package callbacks

import (
	"context"
	"fmt"
	"net/http"

	"github.com/servo-dev/servo/internal/server"
)

// Handler serves the worker callbacks.
type Handler struct {
	s *server.Server
}

// New returns the callbacks handler configured from the environment, with
// Google's clients (each emulator's when its *_EMULATOR_HOST is set).
// Close releases them.
func New(ctx context.Context) (*Handler, error) {
	s, err := server.OpenEnv(ctx)
	if err != nil {
		return nil, fmt.Errorf("callbacks: %w", err)
	}
	return &Handler{s: s}, nil
}

// ServeHTTP serves one callback (the path may have any prefix).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.Callbacks.ServeHTTP(w, r) }

// Close delivers the events still held, then closes the clients.
func (h *Handler) Close() { h.s.Close() }
