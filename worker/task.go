package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

// Task is one attempt of a Servo task as a [Func] sees it: the envelope, the
// payload, the checkpoint to resume from, and the means to report progress
// and checkpoints. Its methods are safe for concurrent use.
type Task struct {
	// Payload is the task's payload as submitted (JSON; empty if none).
	Payload json.RawMessage
	// ResumeFrom is the last checkpoint of an earlier attempt (JSON; empty
	// on a first attempt or when no earlier attempt checkpointed).
	ResumeFrom json.RawMessage

	env      api.Envelope
	workerID string
	log      *slog.Logger
	// flush asks the heartbeat loop for an early heartbeat; nil when detached.
	flush func()

	mu          sync.Mutex
	progressPct *int
	message     string
	phase       string
	checkpoint  json.RawMessage
	// cpVersion counts checkpoints; cpAcked is the version Servo stored.
	cpVersion, cpAcked int
	// progVersion counts changes of the progress or the message;
	// progAcked is the version a heartbeat Servo acknowledged carried.
	progVersion, progAcked int
}

func newTask(env api.Envelope, workerID string, log *slog.Logger, flush func()) *Task {
	env.TaskToken = ""
	return &Task{Payload: env.Payload, ResumeFrom: env.ResumeFrom, env: env, workerID: workerID, log: log, flush: flush}
}

// NewTestTask returns a Task for env that is not connected to Servo, for
// unit tests of a [Func]: Progress and Checkpoint only record, and
// LastProgress and LastCheckpoint read what was recorded. A nil log
// discards log lines.
func NewTestTask(env api.Envelope, log *slog.Logger) *Task {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newTask(env, "test-worker", log, nil)
}

// Envelope returns a copy of the envelope Cloud Tasks delivered, with the
// task token removed (the SDK alone uses it).
func (t *Task) Envelope() api.Envelope { return t.env }

// ID returns the task id.
func (t *Task) ID() string { return t.env.TaskID }

// Attempt returns the attempt number, from 1.
func (t *Task) Attempt() int { return t.env.Attempt }

// WorkerID returns the id this worker reports to Servo.
func (t *Task) WorkerID() string { return t.workerID }

// Logger returns a logger whose lines carry taskId, attempt, tenantId,
// runId and workerId.
func (t *Task) Logger() *slog.Logger { return t.log }

// Decode unmarshals the payload into v. An empty payload leaves v as it is.
// A payload that does not fit v is bad input: the error is a DATA_QUALITY
// [Error] (not retryable by default), so `return nil, err` reports it right.
func (t *Task) Decode(v any) error {
	if len(t.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return DataQuality(fmt.Errorf("decode payload: %w", err))
	}
	return nil
}

// DecodeResumeFrom unmarshals the checkpoint of an earlier attempt into v
// and reports whether there was one (a JSON null counts as none).
func (t *Task) DecodeResumeFrom(v any) (bool, error) {
	raw := bytes.TrimSpace(t.ResumeFrom)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("decode resumeFrom: %w", err)
	}
	return true, nil
}

// Progress records the attempt's progress (pct is clamped to 0–100, msg is
// truncated to api.MaxMessageBytes). The next heartbeat carries it.
func (t *Task) Progress(pct int, msg string) {
	pct = min(max(pct, 0), 100)
	msg = truncate(msg, api.MaxMessageBytes)
	t.mu.Lock()
	if t.progressPct == nil || *t.progressPct != pct || t.message != msg {
		t.progVersion++
	}
	t.progressPct, t.message = &pct, msg
	t.mu.Unlock()
}

// SetPhase names what the attempt is doing, reported as
// cancelledDuringPhase if it ends CANCELLED.
func (t *Task) SetPhase(phase string) {
	phase = truncate(phase, 256)
	t.mu.Lock()
	t.phase = phase
	t.mu.Unlock()
}

// Checkpoint records v (JSON-encoded; a json.RawMessage is used as is) as
// the attempt's checkpoint: the state a later attempt resumes from
// ([Task.ResumeFrom]) if this one fails and Servo retries. It must encode to
// at most api.MaxCheckpointBytes ([ErrCheckpointTooLarge] otherwise).
//
// Delivery: a checkpoint asks for an early heartbeat, sent at once unless a
// heartbeat went out less than a quarter of the heartbeat interval ago (then
// when that quarter has passed), so a burst of checkpoints costs at most four
// heartbeats per interval. A checkpoint Servo has not stored yet when the
// Func fails is flushed with one last heartbeat before `completed`, so the
// retry resumes from it; a CANCELLED report carries it as partialProgress.
func (t *Task) Checkpoint(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("worker: checkpoint: %w", err)
	}
	if len(b) > api.MaxCheckpointBytes {
		return fmt.Errorf("%w (it has %d bytes)", ErrCheckpointTooLarge, len(b))
	}
	t.mu.Lock()
	t.checkpoint = b
	t.cpVersion++
	t.mu.Unlock()
	if t.flush != nil {
		t.flush()
	}
	return nil
}

// LastCheckpoint returns the last checkpoint recorded (nil if none).
func (t *Task) LastCheckpoint() json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkpoint
}

// LastProgress returns the last progress recorded; ok is false if none.
func (t *Task) LastProgress() (pct int, msg string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.progressPct == nil {
		return 0, t.message, false
	}
	return *t.progressPct, t.message, true
}

// beat is what one heartbeat body carried: the checkpoint and progress
// versions.
type beat struct{ cp, prog int }

// heartbeat builds a heartbeat body with the latest progress and, when
// Servo has not stored it yet, the latest checkpoint. It returns the
// versions the body carries.
func (t *Task) heartbeat(attempt int, workerID string, at time.Time) (api.HeartbeatRequest, beat) {
	t.mu.Lock()
	defer t.mu.Unlock()
	req := api.HeartbeatRequest{Attempt: attempt, WorkerID: workerID, HeartbeatAt: &at, Message: t.message}
	if t.progressPct != nil {
		p := *t.progressPct
		req.ProgressPct = &p
	}
	if t.cpVersion > t.cpAcked {
		req.Checkpoint = t.checkpoint
	}
	return req, beat{cp: t.cpVersion, prog: t.progVersion}
}

// acked records that Servo acknowledged a heartbeat that carried b: it
// stored that checkpoint and that progress.
func (t *Task) acked(b beat) {
	t.mu.Lock()
	t.cpAcked = max(t.cpAcked, b.cp)
	t.progAcked = max(t.progAcked, b.prog)
	t.mu.Unlock()
}

// changed reports whether a heartbeat would carry something new: a
// checkpoint, or a progress or message, Servo has not acknowledged. Only
// a plain heartbeat (nothing new) waits for Servo's pacing hint.
func (t *Task) changed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cpVersion > t.cpAcked || t.progVersion > t.progAcked
}

// dirty reports whether a checkpoint awaits storing.
func (t *Task) dirty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cpVersion > t.cpAcked
}

func (t *Task) phaseAndCheckpoint() (string, json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.phase, t.checkpoint
}

// encodeJSON encodes v; a json.RawMessage is validated and compacted
// instead.
func encodeJSON(v any) ([]byte, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		return json.Marshal(v)
	}
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// truncate cuts s to at most n bytes of valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
