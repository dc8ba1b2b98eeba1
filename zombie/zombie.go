// Package zombie is Servo's sweeper: it finds the tasks whose timers have
// run out — deadlines, cancel grace periods, leases (zombies: workers that
// stopped heartbeating), start timeouts (re-drives) — and applies the state
// machine's timer events to them, admits tasks waiting for a quota slot,
// and re-drives the events outbox (docs/contract.md §5.6). It never
// decides a transition itself.
//
// [New] builds it as Servo deploys it — configured from the environment
// (the SERVO_* variables of docs/configuration.md, SERVO_SWEEP_EVERY and
// SERVO_SWEEP_WINDOW among them) and served by Google's clients — for a
// process of your own, for example a Cloud Run job or a loop beside your
// service instead of the ServoSweeper Cloud Function (package functions
// runs the same sweeper on each Cloud Scheduler tick):
//
//	sw, err := zombie.New(ctx)
//	if err != nil { ... }   // a missing or invalid variable is named
//	defer sw.Close()
//	err = sw.Run(ctx)       // one window; sw.Sweep: one pass
//
// The implementation is internal/zombie; the duties and their order are
// documented there and in docs/contract.md §5.6.
package zombie

import (
	"context"
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/servo-dev/servo/internal/server"
)

// Sweeper is the sweeper.
type Sweeper struct {
	s *server.Server
}

// New returns the sweeper configured from the environment, with Google's
// clients (each emulator's when its *_EMULATOR_HOST is set). Close
// releases them.
func New(ctx context.Context) (*Sweeper, error) {
	s, err := server.OpenEnv(ctx)
	if err != nil {
		return nil, fmt.Errorf("zombie: %w", err)
	}
	return &Sweeper{s: s}, nil
}

// Sweep runs one pass of every duty and the outbox re-drive. A failed
// transaction does not stop the pass; the error reports every failure.
// The pass is recorded for GET /v1/health.
func (s *Sweeper) Sweep(ctx context.Context) error {
	_, err := s.s.Sweeper.Sweep(ctx)
	return err
}

// Run sweeps for one window (SERVO_SWEEP_WINDOW, a pass every
// SERVO_SWEEP_EVERY), ending early once a pass finds nothing due before
// the window's end; with no window it runs one pass.
func (s *Sweeper) Run(ctx context.Context) error {
	_, err := s.s.Sweeper.Run(ctx)
	return err
}

// HandleEvent is Run for one Cloud Scheduler tick delivered as a CloudEvent
// (its content is ignored).
func (s *Sweeper) HandleEvent(ctx context.Context, e cloudevents.Event) error {
	return s.s.Sweeper.HandleEvent(ctx, e)
}

// Close delivers the events still held, then closes the clients.
func (s *Sweeper) Close() { s.s.Close() }
