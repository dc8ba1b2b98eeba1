package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/servo-dev/servo/api"
)

// panicked is a recovered panic of a Func.
type panicked struct {
	value any
	stack []byte
}

// invoke calls fn, recovering a panic.
func invoke(ctx context.Context, fn Func, t *Task) (out any, err error, p *panicked) {
	defer func() {
		if v := recover(); v != nil {
			p = &panicked{value: v, stack: debug.Stack()}
		}
	}()
	out, err = fn(ctx, t)
	return out, err, nil
}

func boolPtr(b bool) *bool { return &b }

// outcome maps what a Func returned to the `completed` report (without
// attempt, worker, time and metrics). cause is context.Cause of the Func's
// context (nil while it had not ended).
//
//   - a panic: FAILED, USER_CODE, "panic: <value>" with the stack;
//   - nil error: SUCCEEDED with the output (an output that cannot be encoded
//     or exceeds api.MaxOutputBytes is FAILED/USER_CODE, not retryable);
//   - an error after Servo asked to cancel: CANCELLED with the last
//     checkpoint as partialProgress, unless the error carries an explicit
//     [Error] category other than CANCELLED and is not a context
//     cancellation (then FAILED with it: a real failure found while winding
//     down);
//   - an [Error] of category CANCELLED: CANCELLED (the worker's own cancel);
//   - an [Error] of another category: FAILED with it and its advice;
//   - any other error after the task's deadline passed: FAILED/TIMEOUT;
//   - any other error after [Pull] stopped the Func at the end of its
//     grace period: FAILED/INFRASTRUCTURE (retried, from the checkpoint);
//   - any other error: FAILED/USER_CODE.
func outcome(cause error, out any, ferr error, p *panicked, t *Task) api.CompletedRequest {
	var req api.CompletedRequest
	fail := func(c api.Category, msg, stack string, retryable *bool) {
		req.Outcome = api.OutcomeFailed
		req.Error = &api.ErrorInfo{Category: c, Message: truncate(msg, api.MaxMessageBytes),
			StackTrace: truncate(stack, api.MaxStackTraceBytes), Retryable: retryable}
	}
	cancelled := func() {
		req.Outcome = api.OutcomeCancelled
		req.CancelledDuringPhase, req.PartialProgress = t.phaseAndCheckpoint()
	}
	switch {
	case p != nil:
		fail(api.CategoryUserCode, fmt.Sprintf("panic: %v", p.value), string(p.stack), nil)
	case ferr == nil:
		req.Outcome = api.OutcomeSucceeded
		if raw, ok := out.(json.RawMessage); out == nil || (ok && len(raw) == 0) {
			break
		}
		b, err := encodeJSON(out)
		switch {
		case err != nil:
			fail(api.CategoryUserCode, "encode output: "+err.Error(), "", boolPtr(false))
		case len(b) > api.MaxOutputBytes:
			fail(api.CategoryUserCode, fmt.Sprintf("output is %d bytes; the limit is %d", len(b), api.MaxOutputBytes), "", boolPtr(false))
		default:
			req.Output = b
		}
	default:
		var we *Error
		explicit := errors.As(ferr, &we) && we.Category.Valid()
		msg := ferr.Error()
		if e, ok := ferr.(*Error); ok && e.Err != nil {
			msg = e.Err.Error()
		}
		switch {
		case errors.Is(cause, ErrCancelled) && (!explicit || we.Category == api.CategoryCancelled ||
			errors.Is(ferr, context.Canceled) || errors.Is(ferr, ErrCancelled)):
			cancelled()
		case explicit && we.Category == api.CategoryCancelled:
			cancelled()
		case explicit:
			fail(we.Category, msg, "", we.Retryable)
		case errors.Is(cause, ErrDeadlineExceeded):
			fail(api.CategoryTimeout, msg, "", nil)
		case errors.Is(cause, ErrStopping):
			fail(api.CategoryInfrastructure, msg, "", nil)
		default:
			fail(api.CategoryUserCode, msg, "", nil)
		}
	}
	return req
}
