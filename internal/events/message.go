package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// Default topic ids.
const (
	// DefaultEventsTopic receives one message per task transition.
	DefaultEventsTopic = "servo-task-events"
	// DefaultDeadLetterTopic receives one message per task that ended FAILED
	// with no retry left.
	DefaultDeadLetterTopic = "servo-dead-letter"
)

// Message types, the value of the AttrType attribute.
const (
	// TypeTransition marks a transition event on the events topic.
	TypeTransition = "task.transition"
	// TypeDeadLetter marks a dead letter on the dead-letter topic.
	TypeDeadLetter = "task.deadLetter"
)

// Message attributes, for subscription filters and routing without
// decoding the body.
const (
	// AttrType is TypeTransition or TypeDeadLetter.
	AttrType = "type"
	// AttrEventID is the event id: duplicates carry the same one.
	AttrEventID = "eventId"
	// AttrTenantID is the task's tenant.
	AttrTenantID = "tenantId"
	// AttrWorkspaceID is the task's workspace.
	AttrWorkspaceID = "workspaceId"
	// AttrTaskID is the task id (also the ordering key).
	AttrTaskID = "taskId"
	// AttrRunID is the task's run.
	AttrRunID = "runId"
	// AttrState is the state the task entered (the event's `to`).
	AttrState = "state"
	// AttrReason is why a dead-lettered task failed.
	AttrReason = "reason"
)

// EventOf returns the event a transition publishes.
func EventOf(tr task.Transition) api.Event {
	return api.Event{
		EventID: tr.EventID, TaskID: tr.TaskID, RunID: tr.RunID, TenantID: tr.TenantID,
		WorkspaceID: tr.WorkspaceID, Worker: tr.Worker, Attempt: tr.Attempt, Priority: task.PriorityOf(tr.Priority), From: tr.From, To: tr.To,
		Reason: tr.Reason, OccurredAt: stamp(tr.OccurredAt), Outcome: tr.Outcome, Error: tr.Error,
		NextAttempt: tr.NextAttempt, Seq: tr.Seq, ScheduleID: tr.ScheduleID, ScheduledFireAt: tr.ScheduledFireAt,
	}
}

// stamp is t as the outbox stores it (UTC, Firestore's microseconds), so
// that the hook's copy of an event and a re-driven one are byte-identical.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Dead-letter size limits.
const (
	// MaxDeadLetterBytes caps a dead letter's body, well under Pub/Sub's
	// 10 MB message limit, whatever maxAttempts and the workers' data were.
	MaxDeadLetterBytes = 1 << 20
	// TruncatedFieldBytes is what a large field keeps of its value in a
	// truncated dead letter.
	TruncatedFieldBytes = 2 << 10
)

// TruncatedMarker ends a string field cut in a truncated dead letter,
// followed by the original size: "…[truncated; 16384 bytes]".
const TruncatedMarker = "…[truncated; "

// Truncated JSON fields (output, checkpoint, partial progress) are replaced
// by {"truncated": true, "bytes": N, "head": "<first bytes as text>"}.
type truncatedJSON struct {
	Truncated bool   `json:"truncated"`
	Bytes     int    `json:"bytes"`
	Head      string `json:"head"`
}

// DeadLetterOf returns the dead letter for a transition to FAILED given the
// task's attempt records.
func DeadLetterOf(tr task.Transition, attempts []task.Attempt) api.DeadLetter {
	d := api.DeadLetter{
		EventID: tr.EventID, TaskID: tr.TaskID, RunID: tr.RunID, TenantID: tr.TenantID,
		WorkspaceID: tr.WorkspaceID, Worker: tr.Worker, State: tr.To, Reason: tr.Reason,
		Attempt: tr.Attempt, Priority: task.PriorityOf(tr.Priority), Outcome: tr.Outcome, OccurredAt: stamp(tr.OccurredAt), Error: tr.Error,
		Attempts: make([]api.Attempt, 0, len(attempts)),
	}
	for _, a := range attempts {
		d.Attempts = append(d.Attempts, a.View())
	}
	if d.Error == nil {
		for i := len(attempts) - 1; i >= 0; i-- {
			if attempts[i].Attempt == tr.Attempt && attempts[i].Error != nil {
				d.Error = attempts[i].Error
				break
			}
		}
	}
	if d.Error == nil {
		d.Error = synthesizedError(tr.Reason)
	}
	return d
}

// synthesizedError describes a failure no worker reported.
func synthesizedError(reason string) *api.ErrorInfo {
	switch reason {
	case api.ReasonHeartbeatTimeout:
		return &api.ErrorInfo{Category: api.CategoryTimeout, Message: "no heartbeat within the heartbeat timeout"}
	case api.ReasonDeadlineExceeded:
		return &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the task's deadline passed"}
	case api.ReasonDispatchTimeout:
		return &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the task never started: re-drives exhausted"}
	case api.ReasonCancelTimeout:
		return &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the worker did not finish within the cancel grace period"}
	}
	return &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "task failed: " + reason}
}

func baseAttrs(typ, eventID, tenant, workspace, taskID, runID string, state api.State) map[string]string {
	return map[string]string{
		AttrType: typ, AttrEventID: eventID, AttrTenantID: tenant, AttrWorkspaceID: workspace,
		AttrTaskID: taskID, AttrRunID: runID, AttrState: string(state),
	}
}

// EventMessage returns the Pub/Sub message for a transition: the JSON of
// EventOf(tr), ordering key = task id, and the attributes.
func EventMessage(tr task.Transition) (*pubsub.Message, error) {
	data, err := json.Marshal(EventOf(tr))
	if err != nil {
		return nil, fmt.Errorf("events: encode event %s: %w", tr.EventID, err)
	}
	return &pubsub.Message{
		Data:        data,
		OrderingKey: tr.TaskID,
		Attributes:  baseAttrs(TypeTransition, tr.EventID, tr.TenantID, tr.WorkspaceID, tr.TaskID, tr.RunID, tr.To),
	}, nil
}

// DeadLetterMessage returns the Pub/Sub message for a dead letter, its
// body capped to MaxDeadLetterBytes (see Capped).
func DeadLetterMessage(d api.DeadLetter) (*pubsub.Message, error) {
	data, err := encodeDeadLetter(d, MaxDeadLetterBytes)
	if err != nil {
		return nil, fmt.Errorf("events: encode dead letter %s: %w", d.EventID, err)
	}
	attrs := baseAttrs(TypeDeadLetter, d.EventID, d.TenantID, d.WorkspaceID, d.TaskID, d.RunID, d.State)
	attrs[AttrReason] = d.Reason
	return &pubsub.Message{Data: data, Attributes: attrs}, nil
}

// DecodeEvent decodes an events-topic message body.
func DecodeEvent(data []byte) (api.Event, error) {
	var e api.Event
	if err := json.Unmarshal(data, &e); err != nil {
		return api.Event{}, fmt.Errorf("events: decode event: %w", err)
	}
	if e.EventID == "" || e.TaskID == "" {
		return api.Event{}, fmt.Errorf("events: decode event: missing eventId or taskId")
	}
	return e, nil
}

// DecodeDeadLetter decodes a dead-letter-topic message body.
func DecodeDeadLetter(data []byte) (api.DeadLetter, error) {
	var d api.DeadLetter
	if err := json.Unmarshal(data, &d); err != nil {
		return api.DeadLetter{}, fmt.Errorf("events: decode dead letter: %w", err)
	}
	if d.EventID == "" || d.TaskID == "" {
		return api.DeadLetter{}, fmt.Errorf("events: decode dead letter: missing eventId or taskId")
	}
	return d, nil
}

// TopicName returns the full resource name projects/P/topics/T of a topic
// id; a full name is returned as it is.
func TopicName(project, topic string) string {
	if strings.HasPrefix(topic, "projects/") {
		return topic
	}
	return "projects/" + project + "/topics/" + topic
}

// SubscriptionName returns the full resource name
// projects/P/subscriptions/S of a subscription id; a full name is returned
// as it is.
func SubscriptionName(project, sub string) string {
	if strings.HasPrefix(sub, "projects/") {
		return sub
	}
	return "projects/" + project + "/subscriptions/" + sub
}

// Capped returns d as it is when its JSON fits in limit bytes; otherwise a
// copy with Truncated set whose large fields are cut (TruncatedFieldBytes
// each, with a marker) and, if that is still too big, without the oldest
// attempts (OmittedAttempts counts them).
func Capped(d api.DeadLetter, limit int) api.DeadLetter {
	c, _, _ := capped(d, limit)
	return c
}

func encodeDeadLetter(d api.DeadLetter, limit int) ([]byte, error) {
	_, data, err := capped(d, limit)
	return data, err
}

func capped(d api.DeadLetter, limit int) (api.DeadLetter, []byte, error) {
	data, err := json.Marshal(d)
	if err != nil || len(data) <= limit {
		return d, data, err
	}
	d.Truncated = true
	d.Error = truncateError(d.Error)
	all := make([]api.Attempt, len(d.Attempts))
	for i, a := range d.Attempts {
		all[i] = truncateAttempt(a)
	}
	d.Attempts = all
	// Keep the latest keep attempts, halving until the letter fits.
	for keep := len(all); ; keep /= 2 {
		d.Attempts = all[len(all)-keep:]
		d.OmittedAttempts = len(all) - keep
		if data, err = json.Marshal(d); err != nil || len(data) <= limit || keep == 0 {
			return d, data, err
		}
	}
}

// truncateAttempt cuts an attempt record's large fields.
func truncateAttempt(a api.Attempt) api.Attempt {
	a.Message = truncateString(a.Message)
	a.CancelledDuringPhase = truncateString(a.CancelledDuringPhase)
	a.Output = truncateJSON(a.Output)
	a.Checkpoint = truncateJSON(a.Checkpoint)
	a.PartialProgress = truncateJSON(a.PartialProgress)
	a.Error = truncateError(a.Error)
	return a
}

func truncateError(e *api.ErrorInfo) *api.ErrorInfo {
	if e == nil {
		return nil
	}
	c := *e
	c.Message = truncateString(c.Message)
	c.StackTrace = truncateString(c.StackTrace)
	return &c
}

// truncateString keeps the first TruncatedFieldBytes of s (whole runes)
// and appends TruncatedMarker with the original size.
func truncateString(s string) string {
	if len(s) <= TruncatedFieldBytes {
		return s
	}
	return headOf(s) + TruncatedMarker + strconv.Itoa(len(s)) + " bytes]"
}

// truncateJSON replaces a JSON value over TruncatedFieldBytes by a
// truncatedJSON marker holding its size and first bytes.
func truncateJSON(m json.RawMessage) json.RawMessage {
	if len(m) <= TruncatedFieldBytes {
		return m
	}
	out, err := json.Marshal(truncatedJSON{Truncated: true, Bytes: len(m), Head: headOf(string(m))})
	if err != nil {
		return nil
	}
	return out
}

// headOf returns the first TruncatedFieldBytes bytes of s, cut at a rune
// boundary.
func headOf(s string) string {
	h := s[:TruncatedFieldBytes]
	for i := 0; i < utf8.UTFMax && !utf8.ValidString(h); i++ {
		h = h[:len(h)-1]
	}
	return h
}
