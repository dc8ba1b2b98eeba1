package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
)

func TestFailureCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("server: %w: %w", ErrSecret, errors.New("permission denied")), api.CodeSecretUnavailable},
		{fmt.Errorf("server: %w: %w", ErrMisconfigured, errors.New("SERVO_PROJECT is required")), api.CodeMisconfigured},
		{fmt.Errorf("server: %w", store.ErrSchemaTooOld), api.CodeMisconfigured},
		{fmt.Errorf("server: %w", store.ErrSchemaTooNew), api.CodeMisconfigured},
		{fmt.Errorf("server: %w", ErrDueShardsShrunk), api.CodeMisconfigured},
		{errors.New("server: pubsub client: connection refused"), api.CodeUnavailable},
	} {
		if got := FailureCode(tt.err); got != tt.want {
			t.Errorf("FailureCode(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
