package worker_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/servo-dev/servo/worker"
	"github.com/servo-dev/servo/worker/googleauth"
)

// A push worker on Cloud Run: Cloud Tasks delivers each attempt's envelope
// to the handler, which reports to Servo while the function runs.
func ExampleHandler() {
	process := func(ctx context.Context, t *worker.Task) (any, error) {
		var in struct{ Rows int }
		if err := t.Decode(&in); err != nil {
			return nil, err // a payload that does not decode: DATA_QUALITY
		}
		var next int
		if _, err := t.DecodeResumeFrom(&next); err != nil {
			return nil, err
		}
		for i := next; i < in.Rows; i++ {
			if err := ctx.Err(); err != nil {
				return nil, err // cancelled by Servo, or the lease was lost
			}
			// … one row of work …
			t.Progress(100*(i+1)/in.Rows, "rows")
			if err := t.Checkpoint(i + 1); err != nil {
				return nil, err
			}
		}
		return map[string]int{"rows": in.Rows}, nil
	}
	http.Handle("/", worker.Handler(process))
	log.Fatal(http.ListenAndServe(":"+os.Getenv("PORT"), nil))
}

// A pull worker: it claims attempts from a pull pool until interrupted,
// with an ID token on every claim when the API is a deployed Servo.
func ExamplePull() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	api := os.Getenv("SERVO_API")
	hc, err := googleauth.Client(ctx, api)
	if err != nil {
		log.Fatal(err)
	}
	err = worker.Pull(ctx, worker.PullConfig{API: api, Pool: "gpu", Concurrency: 2, Client: hc},
		func(ctx context.Context, t *worker.Task) (any, error) {
			return nil, worker.Infrastructure(errors.New("no GPU on this host")) // retried by Servo
		})
	if err != nil {
		log.Fatal(err)
	}
}
