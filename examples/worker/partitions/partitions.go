// Package partitions is the example worker's work: it processes the
// partitions of a payload one by one, reports progress and checkpoints
// after each, resumes from the last checkpoint of an earlier attempt, and
// honours cancellation between (and during) partitions. The local stack
// (`servo dev`) runs [Process] in-process; examples/worker serves it on
// Cloud Run.
//
// Payload:
//
//	{"partitions": 10, "partitionMs": 500, "failAttempts": 1, "invalid": false}
//
// Its fields:
//   - partitions (1–10000) and partitionMs (0–600000): the work, simulated
//     as a wait of partitionMs per partition;
//   - failAttempts k: attempts 1…k fail with an INFRASTRUCTURE error half
//     way through the partitions they have left, so demos show a retry that
//     resumes from the checkpoint;
//   - invalid: the payload fails validation (DATA_QUALITY, not retried);
//   - ignoreCancel: the work ignores cancellation, like a worker that does
//     not honour cancel (demos and tests of the cancel grace period: Servo
//     ends the task CANCEL_TIMEOUT and, for a job, kills its execution).
//
// Checkpoint: {"nextPartition": i}. Output:
// {"partitions": n, "processed": p, "resumedFrom": i, "attempt": a, "digest": "…"}.
package partitions

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/servo-dev/servo/worker"
)

// Limits of the payload.
const (
	MaxPartitions  = 10000
	MaxPartitionMs = 600_000
)

// Input is the payload.
type Input struct {
	Partitions   int  `json:"partitions"`
	PartitionMs  int  `json:"partitionMs"`
	FailAttempts int  `json:"failAttempts,omitempty"`
	Invalid      bool `json:"invalid,omitempty"`
	IgnoreCancel bool `json:"ignoreCancel,omitempty"`
}

// State is the checkpoint: the first partition not yet processed.
type State struct {
	NextPartition int `json:"nextPartition"`
}

// Output is the result.
type Output struct {
	Partitions  int `json:"partitions"`
	Processed   int `json:"processed"`
	ResumedFrom int `json:"resumedFrom"`
	Attempt     int `json:"attempt"`
	// Digest is a checksum over every partition's result, the same however
	// many attempts the work took.
	Digest string `json:"digest"`
}

// ErrInjected is the injected infrastructure failure.
var ErrInjected = errors.New("injected failure (failAttempts)")

// Validate checks the payload.
func (in Input) Validate() error {
	switch {
	case in.Invalid:
		return errors.New("the payload is marked invalid")
	case in.Partitions < 1 || in.Partitions > MaxPartitions:
		return fmt.Errorf("partitions must be between 1 and %d, got %d", MaxPartitions, in.Partitions)
	case in.PartitionMs < 0 || in.PartitionMs > MaxPartitionMs:
		return fmt.Errorf("partitionMs must be between 0 and %d, got %d", MaxPartitionMs, in.PartitionMs)
	case in.FailAttempts < 0:
		return fmt.Errorf("failAttempts must not be negative, got %d", in.FailAttempts)
	}
	return nil
}

// Process is the worker.Func.
func Process(ctx context.Context, t *worker.Task) (any, error) {
	var in Input
	if err := t.Decode(&in); err != nil {
		return nil, err // DATA_QUALITY
	}
	if err := in.Validate(); err != nil {
		return nil, worker.DataQuality(err)
	}
	var st State
	resumed, err := t.DecodeResumeFrom(&st)
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err) // our own checkpoint: USER_CODE
	}
	start := min(max(st.NextPartition, 0), in.Partitions)
	log := t.Logger()
	if resumed {
		log.Info("resuming from checkpoint", "nextPartition", start, "partitions", in.Partitions)
	}
	failAt := -1
	if t.Attempt() <= in.FailAttempts {
		failAt = start + (in.Partitions-start)/2
	}
	t.SetPhase("processing")
	t.Progress(100*start/in.Partitions, fmt.Sprintf("starting at partition %d of %d", start+1, in.Partitions))
	if in.IgnoreCancel {
		ctx = context.WithoutCancel(ctx)
	}
	for i := start; i < in.Partitions; i++ {
		// Between partitions: stop if Servo asked to, or the lease is gone.
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped before partition %d: %w", i+1, context.Cause(ctx))
		}
		if i == failAt {
			return nil, worker.Infrastructure(fmt.Errorf("partition %d, attempt %d: %w", i+1, t.Attempt(), ErrInjected))
		}
		// The partition's work. Interrupted work is not checkpointed, so a
		// later attempt redoes this partition.
		if err := work(ctx, time.Duration(in.PartitionMs)*time.Millisecond); err != nil {
			return nil, fmt.Errorf("stopped during partition %d: %w", i+1, context.Cause(ctx))
		}
		if err := t.Checkpoint(State{NextPartition: i + 1}); err != nil {
			return nil, err
		}
		t.Progress(100*(i+1)/in.Partitions, fmt.Sprintf("partition %d of %d done", i+1, in.Partitions))
	}
	t.SetPhase("done")
	return Output{Partitions: in.Partitions, Processed: in.Partitions - start, ResumedFrom: start,
		Attempt: t.Attempt(), Digest: digest(in.Partitions)}, nil
}

// work stands in for a partition's real work.
func work(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// digest is a checksum over the partitions' (simulated) results.
func digest(n int) string {
	h := sha256.New()
	var b [8]byte
	for i := range n {
		binary.BigEndian.PutUint64(b[:], uint64(i))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
