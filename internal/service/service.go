// Package service holds what Servo's services share in their construction:
// the defaults of the clock and logger of a Config, and the error of a
// constructor whose Config lacks a required dependency.
//
// Each service keeps Now, Logger and Project as fields of its own Config
// (so that a composite literal can set them) and fills the first two once,
// in its constructor:
//
//	if cfg.Store == nil {
//		return nil, service.Missing("callbacks", "Config.Store")
//	}
//	service.Defaults(&cfg.Now, &cfg.Logger)
package service

import (
	"errors"
	"log/slog"
	"time"

	"github.com/servo-dev/servo/internal/logs"
)

// ErrMissingDependency is what the error of a constructor whose Config
// lacks a required dependency wraps (errors.Is).
var ErrMissingDependency = errors.New("missing required dependency")

// A MissingError reports a required field left unset.
type MissingError struct {
	// Pkg is the package of the constructor, e.g. "callbacks".
	Pkg string
	// Field names the missing field, e.g. "Config.Store".
	Field string
}

func (e *MissingError) Error() string { return e.Pkg + ": " + e.Field + " is required" }

// Unwrap returns ErrMissingDependency.
func (e *MissingError) Unwrap() error { return ErrMissingDependency }

// Missing returns the error of a constructor of package pkg given no field:
// a *MissingError, which wraps ErrMissingDependency.
func Missing(pkg, field string) error { return &MissingError{Pkg: pkg, Field: field} }

// Clock returns now, or time.Now when now is nil.
func Clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// Logger returns log, or logs.Default() (JSON lines for Cloud Logging, on
// stderr) when log is nil.
func Logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return logs.Default()
	}
	return log
}

// Defaults sets a Config's clock and logger: *now to Clock(*now) and *log
// to Logger(*log).
func Defaults(now *func() time.Time, log **slog.Logger) {
	*now, *log = Clock(*now), Logger(*log)
}
