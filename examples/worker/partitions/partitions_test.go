package partitions_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/worker"
)

func newTask(attempt int, payload, resume string) *worker.Task {
	env := api.Envelope{TaskID: "task_x", Attempt: attempt, Payload: json.RawMessage(payload)}
	if resume != "" {
		env.ResumeFrom = json.RawMessage(resume)
	}
	return worker.NewTestTask(env, nil)
}

func TestProcess(t *testing.T) {
	for _, tc := range []struct {
		name       string
		attempt    int
		payload    string
		resume     string
		category   api.Category // "" for success
		checkpoint string
		out        partitions.Output
	}{
		{name: "all partitions", attempt: 1, payload: `{"partitions":4,"partitionMs":1}`, checkpoint: `{"nextPartition":4}`,
			out: partitions.Output{Partitions: 4, Processed: 4, ResumedFrom: 0, Attempt: 1}},
		{name: "resumes", attempt: 2, payload: `{"partitions":4,"partitionMs":1}`, resume: `{"nextPartition":3}`, checkpoint: `{"nextPartition":4}`,
			out: partitions.Output{Partitions: 4, Processed: 1, ResumedFrom: 3, Attempt: 2}},
		{name: "resume past the end", attempt: 2, payload: `{"partitions":2}`, resume: `{"nextPartition":9}`,
			out: partitions.Output{Partitions: 2, Processed: 0, ResumedFrom: 2, Attempt: 2}},
		{name: "injected failure half way", attempt: 1, payload: `{"partitions":6,"failAttempts":1}`, category: api.CategoryInfrastructure, checkpoint: `{"nextPartition":3}`},
		{name: "injected failure on a resumed attempt", attempt: 2, payload: `{"partitions":6,"failAttempts":2}`, resume: `{"nextPartition":3}`,
			category: api.CategoryInfrastructure, checkpoint: `{"nextPartition":4}`},
		{name: "after the failing attempts", attempt: 3, payload: `{"partitions":6,"failAttempts":2}`, resume: `{"nextPartition":4}`, checkpoint: `{"nextPartition":6}`,
			out: partitions.Output{Partitions: 6, Processed: 2, ResumedFrom: 4, Attempt: 3}},
		{name: "invalid", attempt: 1, payload: `{"partitions":3,"invalid":true}`, category: api.CategoryDataQuality},
		{name: "no partitions", attempt: 1, payload: `{}`, category: api.CategoryDataQuality},
		{name: "too slow", attempt: 1, payload: `{"partitions":1,"partitionMs":6000000}`, category: api.CategoryDataQuality},
		{name: "not an object", attempt: 1, payload: `[1]`, category: api.CategoryDataQuality},
		{name: "corrupt checkpoint", attempt: 2, payload: `{"partitions":2}`, resume: `"x"`, category: api.CategoryUserCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := newTask(tc.attempt, tc.payload, tc.resume)
			out, err := partitions.Process(context.Background(), tk)
			if tc.category != "" {
				var we *worker.Error
				got := api.CategoryUserCode
				if errors.As(err, &we) {
					got = we.Category
				}
				if err == nil || got != tc.category {
					t.Fatalf("err %v (category %s), want %s", err, got, tc.category)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				o := out.(partitions.Output)
				tc.out.Digest = o.Digest
				if o != tc.out || o.Digest == "" {
					t.Fatalf("output %+v, want %+v", o, tc.out)
				}
				if pct, _, ok := tk.LastProgress(); !ok || pct != 100 {
					t.Fatalf("progress %d", pct)
				}
			}
			if got := string(tk.LastCheckpoint()); got != tc.checkpoint {
				t.Fatalf("checkpoint %s, want %s", got, tc.checkpoint)
			}
		})
	}
}

func TestProcessDigestIndependentOfAttempts(t *testing.T) {
	whole, err := partitions.Process(context.Background(), newTask(1, `{"partitions":5}`, ""))
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := partitions.Process(context.Background(), newTask(2, `{"partitions":5}`, `{"nextPartition":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if whole.(partitions.Output).Digest != resumed.(partitions.Output).Digest {
		t.Fatal("the digest depends on how the work was split")
	}
}

func TestProcessHonoursCancellation(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	tk := newTask(1, `{"partitions":100,"partitionMs":20}`, "")
	go func() {
		for {
			if cp := tk.LastCheckpoint(); cp != nil {
				cancel(&worker.CancelledError{Reason: "user_requested"})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := partitions.Process(ctx, tk)
	if !errors.Is(err, worker.ErrCancelled) {
		t.Fatalf("err %v, want the cancel cause", err)
	}
	var st partitions.State
	if err := json.Unmarshal(tk.LastCheckpoint(), &st); err != nil || st.NextPartition < 1 || st.NextPartition >= 100 {
		t.Fatalf("checkpoint %s", tk.LastCheckpoint())
	}
}
