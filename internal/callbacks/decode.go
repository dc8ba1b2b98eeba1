package callbacks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// Kind names a callback: the last segment of its path.
type Kind string

// The callbacks of docs/contract.md §4.1.
const (
	KindStarted   Kind = "started"
	KindHeartbeat Kind = "heartbeat"
	KindCompleted Kind = "completed"
)

// kindEvents are the callbacks the handler serves, each with the
// state-machine event it sends.
var kindEvents = map[Kind]task.EventKind{
	KindStarted:   task.EventStarted,
	KindHeartbeat: task.EventHeartbeat,
	KindCompleted: task.EventCompleted,
}

// Kinds returns the callbacks the handler serves, sorted.
func Kinds() []Kind { return slices.Sorted(maps.Keys(kindEvents)) }

// event is the state-machine event a callback of kind k sends.
func (k Kind) event() (task.EventKind, bool) {
	e, ok := kindEvents[k]
	return e, ok
}

// Request is a decoded callback body. Exactly one of Started, Heartbeat and
// Completed is set, according to Kind; Attempt and WorkerID repeat that
// body's fields.
type Request struct {
	Kind      Kind
	Attempt   int
	WorkerID  string
	Started   *api.StartedRequest
	Heartbeat *api.HeartbeatRequest
	Completed *api.CompletedRequest
}

// DecodeRequest decodes the JSON body of a callback of kind k. It does not
// validate the fields (see Request.Validate): the handler checks the body's
// attempt against the token first. A body that is not one JSON object, or a
// field of the wrong JSON type, is a *task.FieldError naming the field
// ("body" when no field can be named). On a type error the other fields are
// still decoded, so r.Attempt is set whenever the body carried a well-typed
// attempt.
func DecodeRequest(k Kind, body []byte) (r Request, ferr *task.FieldError) {
	r.Kind = k
	var dst any
	switch k {
	case KindStarted:
		r.Started = new(api.StartedRequest)
		dst = r.Started
	case KindHeartbeat:
		r.Heartbeat = new(api.HeartbeatRequest)
		dst = r.Heartbeat
	case KindCompleted:
		r.Completed = new(api.CompletedRequest)
		dst = r.Completed
	default:
		return r, &task.FieldError{Field: "path", Message: fmt.Sprintf("unknown callback %q", k)}
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return r, &task.FieldError{Field: "body", Message: "is required"}
	}
	if trimmed[0] != '{' {
		return r, &task.FieldError{Field: "body", Message: "must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(dst)
	if err == nil {
		// Exactly one value: anything after it but white space is an error.
		if _, terr := dec.Token(); terr != io.EOF {
			err = errTrailing
		}
	}
	r.fill()
	if err != nil {
		return r, decodeError(err)
	}
	return r, nil
}

var errTrailing = errors.New("trailing data after the JSON object")

// fill copies the common fields out of the typed body.
func (r *Request) fill() {
	switch {
	case r.Started != nil:
		r.Attempt, r.WorkerID = r.Started.Attempt, r.Started.WorkerID
	case r.Heartbeat != nil:
		r.Attempt, r.WorkerID = r.Heartbeat.Attempt, r.Heartbeat.WorkerID
	case r.Completed != nil:
		r.Attempt, r.WorkerID = r.Completed.Attempt, r.Completed.WorkerID
	}
}

// decodeError turns a JSON decoding error into a field error. Its message
// names offsets and types only, never values from the body.
func decodeError(err error) *task.FieldError {
	var (
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return &task.FieldError{Field: field, Message: fmt.Sprintf("must be a JSON %s", jsonType(typeErr.Type.Kind().String()))}
	case errors.As(err, &syntaxErr):
		return &task.FieldError{Field: "body", Message: fmt.Sprintf("is not valid JSON (at byte %d)", syntaxErr.Offset)}
	case errors.Is(err, errTrailing):
		return &task.FieldError{Field: "body", Message: "must hold exactly one JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &task.FieldError{Field: "body", Message: "is truncated JSON"}
	}
	// Time fields (startedAt, heartbeatAt, completedAt) fail in their own
	// UnmarshalJSON with a *time.ParseError, which carries no field name.
	return &task.FieldError{Field: "body", Message: "is not a valid callback body (times must be RFC 3339)"}
}

// jsonType names the JSON type a Go kind decodes from.
func jsonType(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	}
	return "value of another type"
}

// Validate checks the body's fields (task's Validate functions) and, for
// completed, truncates free text to the stored limits.
func (r *Request) Validate() *task.FieldError {
	switch {
	case r.Started != nil:
		return task.ValidateStarted(r.Started)
	case r.Heartbeat != nil:
		return task.ValidateHeartbeat(r.Heartbeat)
	case r.Completed != nil:
		if err := task.ValidateCompleted(r.Completed); err != nil {
			return err
		}
		task.NormalizeCompleted(r.Completed)
		return nil
	}
	return &task.FieldError{Field: "body", Message: "is required"}
}
