package worker_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/worker"
)

// TestProtocolPacedHeartbeats: a plain heartbeat (nothing new) waits for
// the last answer's nextHeartbeatInMs when it is longer than the interval
// (docs/contract.md §5.7); a changed progress or message still goes out
// at the interval, a checkpoint at once; without the field (an older
// Servo) or with a hint under the interval, every heartbeat comes at the
// interval, as before. The function runs 2.5 s with a 100 ms interval:
// some 25 heartbeats at the interval, 2 or 3 a second apart (counts with
// wide margins: a loaded machine only makes timers late, so fewer).
func TestProtocolPacedHeartbeats(t *testing.T) {
	const run = 2500 * time.Millisecond
	tests := []struct {
		name string
		// hint is every answer's nextHeartbeatInMs (0: absent); started,
		// when set, the `started` answer's alone.
		hint, started int64
		// work runs in the function while it lasts.
		progress, checkpoint bool
		min, max             int // heartbeats
	}{
		{name: "paced: plain heartbeats wait for the hint", hint: 1000, min: 1, max: 4},
		{name: "paced from the started answer", started: 1000, hint: 1000, min: 1, max: 3},
		{name: "no hint (an older Servo): the interval", hint: 0, min: 8, max: 100},
		{name: "a hint under the interval: the interval", hint: 50, min: 8, max: 100},
		{name: "changing progress: the interval", hint: 1000, progress: true, min: 8, max: 100},
		{name: "a checkpoint goes out at once", started: 5000, hint: 5000, checkpoint: true, min: 1, max: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(op string, n int, body []byte) fakeAnswer {
				a := accept(op)
				switch op {
				case "started":
					a.resp.NextHeartbeatInMs = tt.started
				case "heartbeat":
					a.resp.NextHeartbeatInMs = tt.hint
				}
				return a
			})
			env := f.envelope() // 100 ms interval, 5 s lease
			h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
				end := time.Now().Add(run)
				for i := 0; time.Now().Before(end); i++ {
					if tt.progress {
						tk.Progress(i%100, "")
					}
					if tt.checkpoint && i == 10 {
						if err := tk.Checkpoint(map[string]int{"i": i}); err != nil {
							return nil, err
						}
					}
					time.Sleep(20 * time.Millisecond)
				}
				return nil, nil
			})
			if status, ans := deliverEnv(t, h, env); status != http.StatusOK || ans.Result != "committed" {
				t.Fatalf("answer %d %+v", status, ans)
			}
			hbs := f.ops("heartbeat")
			if n := len(hbs); n < tt.min || n > tt.max {
				t.Fatalf("%d heartbeats in %v, want %d to %d", n, run, tt.min, tt.max)
			}
			if tt.checkpoint && string(decode[api.HeartbeatRequest](t, hbs[0].body).Checkpoint) != `{"i":10}` {
				t.Fatalf("the first heartbeat %s, want the checkpoint", hbs[0].body)
			}
		})
	}
}
