// Package servo is the root of the Cloud Functions source. The Go
// buildpack builds the package at the source root and, because it imports
// functions-framework-go's functions package, generates a main that serves
// the function named by FUNCTION_TARGET: ServoAPI, ServoCallbacks,
// ServoSweeper or ServoJobs, registered by package functions. See README.md for Servo
// itself; deploy/buildpack tests this the way the buildpack does it.
package servo

import (
	_ "github.com/GoogleCloudPlatform/functions-framework-go/functions" // the buildpack's "registered by name" main
	_ "github.com/servo-dev/servo/functions"                            // ServoAPI, ServoCallbacks, ServoSweeper, ServoJobs
)
