package task

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// A refused heartbeat interval is told the range it may take, whole: 25 h
// and 2 h get the same message, with the real upper bound (half the
// maximum token lifetime), not MaxTimer's.
func TestHeartbeatIntervalRangeSaidOnce(t *testing.T) {
	want := "must be between 100 and " + strconv.FormatInt((MaxTokenTTL/2).Milliseconds(), 10) + " ms"
	for _, iv := range []time.Duration{25 * time.Hour, 2 * time.Hour, 50 * time.Millisecond} {
		fe := ValidateTiming(api.Timing{HeartbeatIntervalMs: iv.Milliseconds(), HeartbeatTimeoutMs: 2 * iv.Milliseconds(),
			CancelGracePeriodMs: 1000, StartTimeoutMs: 1000}, MinTimerLocal)
		if fe == nil || fe.Field != "heartbeatIntervalMs" || !strings.HasPrefix(fe.Message, want) {
			t.Errorf("interval %v: %v; want %q", iv, fe, want)
		}
	}
	if fe := ValidateTiming(api.Timing{HeartbeatIntervalMs: (MaxTokenTTL / 2).Milliseconds(), HeartbeatTimeoutMs: MaxTimer.Milliseconds(),
		CancelGracePeriodMs: 1000, StartTimeoutMs: 1000}, MinTimerLocal); fe != nil {
		t.Errorf("the largest interval is refused: %v", fe)
	}
}
