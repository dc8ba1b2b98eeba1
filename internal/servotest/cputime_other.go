//go:build !unix

package servotest

import "time"

// CPUTime is not measured here: the sizing benchmarks report 0.
func CPUTime() time.Duration { return 0 }
