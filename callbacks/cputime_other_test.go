//go:build !unix

package callbacks_test

import "time"

// cpuTime is not measured here: the sizing benchmark reports 0.
func cpuTime() time.Duration { return 0 }
