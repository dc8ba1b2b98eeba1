//go:build !unix

package worker

import "time"

// cpuTime is the Go runtime's CPU estimate where getrusage is missing.
func cpuTime() time.Duration { return runtimeCPUTime() }
